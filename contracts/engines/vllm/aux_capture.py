"""Observe what vLLM hands an EAGLE-3 draft as "target hidden states", with the engine's own code, on the runner
judged (``runners``: Model Runner V2 on a GPU by default, V1 on request).

Contract served: ``hidden-width``. Each runner reads the draft's aux layer ids and decides whether to capture on its
own: V1's ``GPUModelRunner._get_eagle3_aux_layers_from_config`` reads the top-level
``eagle_aux_hidden_state_layer_ids``, else ``eagle_config``'s, and its proposer decides ``use_aux_hidden_state``;
V2's ``get_eagle3_aux_layers_from_config`` reads the top-level key (or ``eagle_config["layer_ids"]``) and never the
nested one, and its constructor decides the switch. With no ids read, both fall back to the target's
``get_eagle3_default_aux_hidden_state_layers``, ``(2, N//2, N-3)``; a target class without ``SupportsEagle3``
raises. vLLM's id k captures the residual stream entering layer k, transformers' ``hidden_states[k]``, while
SGLang's explicit id k captures ``hidden_states[k+1]``: a SpecForge or Model Optimizer draft whose ids are written
explicitly (trained on SGLang's capture) is one layer early on V1, and V2 serves nested ids on its default layers.
Steps, all through vLLM: a tiny instance of the target's own architecture class (a scaled-down copy of its config at
a head size vLLM's CPU attention takes, or the target itself when it is tiny and runs), the runner's own wiring of
it (V1: the runner's two methods on a stand-in runner holding it, with the proposer that decides
``use_aux_hidden_state``; V2: vLLM's own V2 CPU runner, its constructor and its ``load_model`` with the target),
the target forward on CPU, the width handed over, which residual-stream position each captured tensor is (matched
against the target's own layer outputs), then the draft's ``combine_hidden_states`` and forward on it (did ``fc``
run?). Where the class cannot be built or run on a CPU the evidence falls back to the registry (does the class
implement ``SupportsEagle3``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import types
from pathlib import Path

from contracts.checkpoint import Checkpoint, text_config
from contracts.engines.errors import EngineBuildError, ReplayError, raised_by_engine
from contracts.engines.scaling import draft_at_target_vocab, scale_down, scale_draft
from contracts.engines.vllm.context import building, draft_configs, engine_version, on_device
from contracts.engines.tracing import init_random
from contracts.engines.vllm.cpu_forward import (CPU_HEAD_DIM, finish_loading, head_dim_of, kernels_missing, one_request,
                                                runs_on_cpu)
from contracts.engines.vllm.loader import build_draft
from contracts.engines.vllm.runners import LABEL, resolve
from contracts.observations import AuxCaptureObservation

SMALL_TARGET_PARAMS = 50_000_000  # targets up to this size are run with their own weights
TINY_BUILD_MAX_ELEMENTS = 50_000_000  # a scaled-down target copy larger than this (parameters + buffers) is not built
INPUT_IDS = [1, 5, 9, 22, 100, 7]
CPU_LATENT = {"kv_lora_rank": 512, "qk_rope_head_dim": 64}  # vLLM's CPU MLA kernel takes only a 576-wide latent


def _target_class(configs):
    from vllm.model_executor.model_loader.utils import get_model_architecture

    cls, _ = get_model_architecture(configs.target)
    return cls


def _hook_kind(cls) -> str:
    from vllm.model_executor.models.interfaces import supports_eagle3

    return "implemented (SupportsEagle3)" if supports_eagle3(cls) else "missing"


def _build_target(configs, device: str):
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    with building(configs.vc), set_default_torch_dtype(configs.target.dtype), on_device(device):
        return initialize_model(vllm_config=configs.vc, model_config=configs.target)


def _meta_size(configs, tiny_target: Path) -> int:
    """Parameter and buffer elements of the scaled-down target, from a build on ``meta``. A class that moves a
    part to a device at construction (vLLM's Kimi-K2.5 moves its vision tower) cannot be built on meta: it is
    sized from the sub-configs the scaling leaves as they are (each a transformer stack: 12 H^2 per layer)."""
    try:
        meta = _build_target(configs, "meta")
        return sum(t.numel() for t in [*meta.parameters(), *meta.buffers()])
    except Exception:  # noqa: BLE001  (sized from the config instead)
        cfg = json.loads((tiny_target / "config.json").read_text())
        size = 0
        for key, sub in cfg.items():
            if isinstance(sub, dict) and key != "text_config" and isinstance(sub.get("hidden_size"), int):
                size += 12 * sub["hidden_size"] ** 2 * int(sub.get("num_hidden_layers") or 1)
        return size


IDS_KEY = "eagle_aux_hidden_state_layer_ids"  # top level: read first by V1, the only EAGLE-3 key V2 reads


def _v1_capture(configs, target, draft) -> types.SimpleNamespace:
    """V1: a stand-in for its model runner holding the target, with what ``_setup_eagle3_aux_hidden_state_outputs``
    reads; ``use_aux_hidden_state_outputs`` is set as the runner's constructor sets it, from vLLM's own proposer."""
    import torch
    from vllm.v1.spec_decode.eagle import EagleProposer
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    proposer = EagleProposer(configs.vc, torch.device("cpu"), runner=None)
    runner = types.SimpleNamespace(speculative_config=configs.vc.speculative_config, model=target,
                                   use_aux_hidden_state_outputs=bool(proposer.eagle3_use_aux_hidden_state))
    runner.get_model = lambda: target
    runner._get_eagle3_aux_layers_from_config = types.MethodType(GPUModelRunner._get_eagle3_aux_layers_from_config,
                                                                 runner)
    ids = runner._get_eagle3_aux_layers_from_config()
    return types.SimpleNamespace(
        use_aux=runner.use_aux_hidden_state_outputs, ids=None if ids is None else list(ids),
        setup=types.MethodType(GPUModelRunner._setup_eagle3_aux_hidden_state_outputs, runner),
        how="V1: GPUModelRunner._get_eagle3_aux_layers_from_config / _setup_eagle3_aux_hidden_state_outputs, "
            "EagleProposer.eagle3_use_aux_hidden_state")


def _v2_capture(configs, target, draft) -> types.SimpleNamespace:
    """V2: vLLM's own V2 CPU runner; its constructor decides the capture switch, its ``load_model`` (given the
    target, the draft handed to its speculator) reads the ids and wires the capture."""
    from contracts.engines.vllm.context import current
    from contracts.engines.vllm.runners import draft_model_is, target_model_is, v2_aux_ids, v2_runner

    runner = v2_runner(configs.vc)

    def setup():
        if draft is None:  # (the load contracts report the engine's refusal to build it)
            raise ReplayError("V2's load_model needs the draft, which vLLM could not build")
        with current(configs.vc), target_model_is(target), draft_model_is(draft):
            runner.load_model()

    return types.SimpleNamespace(
        use_aux=bool(runner.use_aux_hidden_state_outputs), ids=v2_aux_ids(configs.vc), setup=setup,
        how="V2: vLLM's own V2 CPU runner, its constructor (use_aux_hidden_state_outputs) and load_model "
            "(set_eagle3_aux_hidden_state_layers: get_eagle3_aux_layers_from_config, else the target's default); "
            "these functions decide, and none of V2's Triton-only kernels (batch preparation, speculator steps) runs")


CAPTURE = {"v1": _v1_capture, "v2": _v2_capture}


def _capture_owner(model):
    """The module whose ``aux_hidden_state_layers`` the hook sets (the decoder, possibly inside a wrapper)."""
    for module in model.modules():
        if isinstance(getattr(module, "aux_hidden_state_layers", None), tuple) and hasattr(module, "layers"):
            return module
    return None


def _target_forward(configs, target, input_ids):
    """The target's forward over one request; returns (last hidden, [aux tensors]) and the residual stream as
    transformers numbers it (index 0: the embeddings; i+1: the output of decoder layer i), read from the
    engine's own layers with forward hooks."""
    import torch

    owner = _capture_owner(target) or getattr(target, "model", target)
    stream = {}
    hooks = [owner.embed_tokens.register_forward_hook(lambda m, i, o: stream.__setitem__(0, o.detach().clone()))]
    for idx, layer in enumerate(owner.layers):
        def keep(module, inputs, output, _i=idx):
            hidden, residual = output if isinstance(output, tuple) else (output, None)
            stream[_i + 1] = (hidden + residual if residual is not None else hidden).detach().clone()
        hooks.append(layer.register_forward_hook(keep))
    positions = torch.arange(input_ids.shape[0])
    try:
        with one_request(configs.vc, int(input_ids.shape[0])):
            out = target(input_ids=input_ids, positions=positions, intermediate_tensors=None)
    finally:
        for h in hooks:
            h.remove()
    hidden, aux = (out if isinstance(out, tuple) else (out, []))
    return hidden, list(aux), stream


def _positions(aux, stream) -> list[int]:
    """Which residual-stream position (transformers ``hidden_states`` index) each captured tensor is."""
    out = []
    for tensor in aux:
        match = [k for k, s in sorted(stream.items()) if s.shape == tensor.shape and
                 float((s.float() - tensor.float()).abs().max()) < 1e-5]
        out.append(match[0] if match else -1)
    return out


def _ids_for(target, owner, wanted: list[int]) -> list[int] | None:
    """Ask the engine's hook which explicit ids make it capture exactly ``wanted`` (tries id, id-1, id+1)."""
    saved = tuple(owner.aux_hidden_state_layers)
    try:
        for candidate in (list(wanted), [w - 1 for w in wanted], [w + 1 for w in wanted]):
            target.set_aux_hidden_state_layers(tuple(candidate))
            if list(owner.aux_hidden_state_layers) == sorted(set(wanted)):
                return candidate
    finally:
        owner.aux_hidden_state_layers = saved
    return None


def _verify_ids(obs, configs, target, owner, input_ids, wanted: list[int]) -> None:
    """The hook's list is what it records, not what the forward captures: run the forward with the ids found for the
    trainer's layers and keep them only when it captures those positions; otherwise say what it captured."""
    candidate, saved = obs.ids_for_trainer_layers, tuple(owner.aux_hidden_state_layers)
    try:
        target.set_aux_hidden_state_layers(tuple(candidate))
        _, aux, stream = _target_forward(configs, target, input_ids)
        positions = _positions(aux, stream)
        if positions == list(wanted):
            return
        got = f"hidden_states {positions}"
    except Exception as e:  # noqa: BLE001  (the forward under the runner's ids ran: say why this one did not)
        got = f"nothing (it raised {type(e).__name__}: {str(e)[:200]})"
    finally:
        owner.aux_hidden_state_layers = saved
    obs.ids_unreachable = (f"ids {candidate} make its hook list layers {sorted(set(wanted))}, but the forward with "
                           f"them captures {got}: no ids make {obs.target_class} capture hidden_states {list(wanted)}")
    obs.ids_for_trainer_layers = None


def _write_tiny(tmp: Path, target: Checkpoint, target_dir: Path, draft_cfg: dict, own_weights: bool):
    if own_weights:
        tiny_target = target_dir
    else:
        tiny_target = tmp / "target"
        tiny_target.mkdir()
        (tiny_target / "config.json").write_text(json.dumps(scale_down(target.config, head_dim=CPU_HEAD_DIM, latent=CPU_LATENT)))
    tiny_text = text_config(json.loads((tiny_target / "config.json").read_text()))
    hidden, vocab = int(tiny_text["hidden_size"]), int(tiny_text.get("vocab_size") or 1024)
    tiny_draft = tmp / "draft"
    tiny_draft.mkdir()
    draft = draft_at_target_vocab(draft_cfg, vocab) if own_weights and runs_on_cpu(_layer(draft_cfg)) else \
        scale_draft(draft_cfg, hidden, vocab, head_dim=CPU_HEAD_DIM)
    (tiny_draft / "config.json").write_text(json.dumps(draft))
    return tiny_target, tiny_draft


def _layer(draft_cfg: dict) -> dict:
    return draft_cfg.get("transformer_layer_config") or draft_cfg


def observe_aux_capture(draft_dir, target_dir, *, trainer_hf_indices: list[int] | None = None,
                        runner: str | None = None) -> AuxCaptureObservation:
    """What vLLM would hand this draft from this target, observed on a tiny instance of the target class."""
    import torch

    draft_dir, target_dir = Path(draft_dir), Path(target_dir)
    target = Checkpoint.open(target_dir, require_weights=False, role="target")
    draft_cfg = json.loads((draft_dir / "config.json").read_text())
    arch = (target.config.get("architectures") or ["?"])[0]
    text = text_config(target.config)
    obs = AuxCaptureObservation(engine={"name": "vllm", "version": engine_version()}, target_architecture=arch,
                                num_target_layers=text.get("num_hidden_layers"),
                                target_hidden_size=text.get("hidden_size"),
                                hook_name="SupportsEagle3 (set_aux_hidden_state_layers)")
    n_params = sum(t.numel for t in target.tensors.values())
    own_weights = (n_params <= SMALL_TARGET_PARAMS and runs_on_cpu(text)
                   and any(".layers." in k or k.startswith("layers.") for k in target.tensors))
    tmp = Path(tempfile.mkdtemp(prefix="eagle3-contracts-vllm-aux-"))
    try:
        tiny_target, tiny_draft = _write_tiny(tmp, target, target_dir, draft_cfg, own_weights)
        obs.tiny_target = "the target itself (own weights)" if own_weights else \
            (f"scaled-down copy of its config (random weights, head_dim {CPU_HEAD_DIM}: vLLM's CPU attention takes no "
             f"smaller head)" if head_dim_of(text) != CPU_HEAD_DIM else "scaled-down copy of its config (random weights)")
        try:
            configs = draft_configs(tiny_draft, tiny_target, dtype="float32")
        except EngineBuildError as e:
            obs.evidence, obs.evidence_reason = "static", f"vLLM refused the draft config: {str(e)[:300]}"
            return obs
        if configs.target_note:
            obs.evidence, obs.hook = "static", "missing"
            obs.evidence_reason = f"vLLM cannot make a config for {arch}: {configs.target_note[:300]}"
            return obs
        try:
            cls = _target_class(configs)
            obs.target_class, obs.hook = cls.__name__, _hook_kind(cls)
        except Exception as e:
            obs.evidence, obs.hook = "static", "missing"
            obs.evidence_reason = f"vLLM's registry has no class for {arch}: {type(e).__name__}: {str(e)[:300]}"
            return obs
        try:  # first on meta: a copy the scaling leaves large is judged from the class, never materialised
            size = _meta_size(configs, tiny_target)
            if size > TINY_BUILD_MAX_ELEMENTS:
                obs.evidence = "static"
                obs.evidence_reason = (f"the scaled-down copy of {arch} still holds {size / 1e6:.0f} M parameter and "
                                       f"buffer elements: not built on CPU")
                return obs
            model = _build_target(configs, "cpu")
        except Exception as e:
            obs.evidence = "static"
            obs.evidence_reason = f"a tiny {arch} could not be built on CPU: {type(e).__name__}: {str(e)[:300]}" + (
                f" ({kernels_missing()})" if kernels_missing() else "")
            return obs
        if own_weights:
            try:
                with torch.no_grad():
                    model.load_weights(target.iter_tensors())
            except Exception as e:
                obs.evidence = "static"
                obs.evidence_reason = f"vLLM's {arch}.load_weights refused the target's weights: {str(e)[:300]}"
                return obs
        else:
            init_random(model)
        missing = kernels_missing()
        if not missing:  # (what a forward needs: the CPU build's weight prepacking, e.g. an MoE target's)
            finish_loading(model, configs.target)
        obs.runner = resolve(configs.vc, runner)
        try:
            draft = build_draft(configs, beside_target=True)
            init_random(draft)
        except EngineBuildError as e:
            draft, obs.draft_forward_error = None, str(e)
        capture = CAPTURE[obs.runner](configs, model, draft)
        obs.use_aux_hidden_state = capture.use_aux
        obs.aux_layer_ids = capture.ids
        obs.ids_key = IDS_KEY
        obs.wiring = capture.how
        try:
            capture.setup()
        except Exception as e:  # a target without SupportsEagle3 refuses to start
            if not raised_by_engine(e, "vllm"):
                raise ReplayError(f"this suite's replay of vLLM {engine_version()}'s {LABEL[obs.runner]} capture "
                                  f"wiring failed: {type(e).__name__}: {e}") from None
            obs.configure_error = f"{type(e).__name__}: {e}"
        owner = _capture_owner(model)
        obs.layers_to_capture = list(owner.aux_hidden_state_layers) if owner is not None and \
            obs.use_aux_hidden_state and obs.configure_error is None else []
        # asked of the hook alone, before any forward: known even where the tiny forward cannot run on a CPU
        if trainer_hf_indices and owner is not None and obs.configure_error is None:
            obs.ids_for_trainer_layers = _ids_for(model, owner, trainer_hf_indices)
            if obs.ids_for_trainer_layers is None:
                obs.ids_unreachable = (f"no ids make the hook of {obs.target_class} list hidden_states "
                                       f"{list(trainer_hf_indices)} (tried each id, id-1, id+1)")
        if missing:  # the capture the runner wired is known; what it hands over cannot be run
            obs.evidence, obs.evidence_reason = "static", missing
            return obs
        vocab = int(configs.target.get_vocab_size())
        input_ids = torch.tensor([i % vocab for i in INPUT_IDS])
        try:
            hidden, aux, stream = _target_forward(configs, model, input_ids)
        except Exception as e:
            obs.evidence = "static"
            obs.evidence_reason = (f"the tiny {arch} forward does not run on CPU with vLLM's CPU attention backend: "
                                   f"{type(e).__name__}: {str(e)[:300]}")
            return obs
        captured = torch.cat(aux, dim=-1) if aux else hidden
        obs.evidence = "observed"
        obs.hidden_width = int(captured.shape[-1])
        obs.tiny_hidden_size = int(configs.target.get_hidden_size())
        if aux:
            obs.hf_indices = _positions(aux, stream)
            obs.hf_indices_from = "matched against the target's own layer outputs in vLLM (hidden_states numbering)"
        if obs.ids_for_trainer_layers is not None:
            _verify_ids(obs, configs, model, owner, input_ids, list(trainer_hf_indices or []))
        _observe_draft(obs, configs, captured, input_ids, draft)
        return obs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _default_gemm(fc, x):
    """vLLM's GEMM on its default (GPU) path over FC's shape, on X (releases before ``default_unquantized_gemm``
    called torch's linear in ``UnquantizedLinearMethod.apply``)."""
    import torch

    try:
        from vllm.model_executor.layers.utils import default_unquantized_gemm
    except ImportError:
        def default_unquantized_gemm(layer, x, weight, bias=None):
            return torch.nn.functional.linear(x, weight, bias)

    weight = torch.zeros(int(fc.output_size), int(fc.input_size), dtype=x.dtype)
    return default_unquantized_gemm(fc, x, weight)


def _observe_draft(obs: AuxCaptureObservation, configs, captured, input_ids, draft) -> None:
    """The proposer's step on what the target handed over: ``combine_hidden_states`` (``fc``), then the draft's
    forward; did ``fc`` run?"""
    import torch

    if draft is None:  # the engine could not build it (obs.draft_forward_error says why)
        return
    fc = getattr(getattr(draft, "model", None), "fc", None)
    if not hasattr(draft, "combine_hidden_states"):
        obs.draft_forward_error = f"the engine builds {type(draft).__name__} for this draft config, which has no fc"
        return
    obs.fc_in_features = int(fc.input_size) if fc is not None else None
    if fc is not None and int(captured.shape[-1]) != obs.fc_in_features:
        # another width than fc's: vLLM's CPU GEMM (packed at load) takes its width from the weight and reads past the
        # input, corrupting the worker's heap (a draft trained on four aux layers: the worker died, or hung for good
        # in glibc's malloc lock in about half the runs). The product a deployment computes is the default (GPU)
        # path's, vLLM's default_unquantized_gemm: asked on one row, its refusal is the draft forward's
        obs.fc_ran = False
        try:
            _default_gemm(fc, captured[:1])
        except RuntimeError as e:
            obs.draft_forward_error = f"{type(e).__name__}: {str(e)[:300]}"
            return
    calls = []
    handle = fc.register_forward_hook(lambda m, i, o: calls.append(int(i[0].shape[-1]))) if fc is not None else None
    finish_loading(draft, configs.draft)
    try:
        with one_request(configs.vc, int(input_ids.shape[0])):
            combined = draft.combine_hidden_states(captured.to(configs.draft.dtype))
            draft(input_ids, torch.arange(input_ids.shape[0]), combined)
        obs.fc_ran = bool(calls)
    except Exception as e:
        obs.draft_forward_error = f"{type(e).__name__}: {str(e)[:300]}"
        obs.fc_ran = bool(calls)
    finally:
        if handle is not None:
            handle.remove()
