"""Observe what SGLang hands an EAGLE-3 draft as "target hidden states", with the engine's own code.

Contract served: ``hidden-width``. The draft applies ``fc`` only when the hidden states are wider than its
embeddings; a target class that does not capture the aux layers hands over one layer's state (width H),
``fc`` is silently skipped and every draft token is rejected (Kimi-K2.5 on SGLang 0.5.9). Steps, all
through SGLang: resolve the draft's aux-layer config as the scheduler does
(``resolve_spec_aux_hidden_state_config``), build a tiny instance of the target's *own architecture class*
(from a scaled-down copy of its config, or the target itself when it is tiny), wire capture with
``configure_aux_hidden_state_capture`` (releases that do both inline in ``ModelRunner``, 0.5.3-0.5.12: those
statements of the engine's own source, see ``compat.run_model_runner_statement``), run the target forward on
CPU and measure the width, then run the draft forward on it and record whether ``fc`` ran. Where an architecture cannot be built or run on a
CPU, the evidence falls back to the engine's model registry (does the class implement the hook).
"""

from __future__ import annotations

import copy
import inspect
import json
import shutil
import tempfile
from pathlib import Path

from contracts.checkpoint import Checkpoint, text_config
from contracts.engines.sglang.compat import (
    ast_is_attribute,
    has_module,
    mentions,
    run_model_runner_statement,
    runner_stand_in,
)
from contracts.engines.sglang.context import engine_version, ensure_context
from contracts.engines.sglang.cpu_forward import extend_forward, target_forward, uses_latent_attention
from contracts.engines.tracing import init_random
from contracts.engines.scaling import draft_at_target_vocab, scale_down, scale_draft
from contracts.engines.sglang.registry_cache import register_architectures
from contracts.observations import AuxCaptureObservation

SMALL_TARGET_PARAMS = 50_000_000  # targets up to this size are run with their own weights
TINY_BUILD_MAX_ELEMENTS = 50_000_000  # a scaled-down target copy larger than this (parameters + buffers) is not built
INPUT_IDS = [1, 5, 9, 22, 100, 7]

def _resolve_aux_config(draft_dir: Path, target_mc):
    """The engine's own reading of the draft's eagle_config (use_aux_hidden_state, layer ids)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    if not has_module("sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state"):
        return _resolve_aux_config_in_model_runner(draft_dir)
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.runtime_context import get_context

    override = get_context().override_server_args(speculative_algorithm="EAGLE3",
                                                   speculative_draft_model_path=str(draft_dir))
    server_args = override.install()
    try:
        cfg = resolve_spec_aux_hidden_state_config(server_args=server_args, model_config=target_mc,
                                                   spec_algorithm=SpeculativeAlgorithm.EAGLE3, is_draft_worker=False)
    finally:
        override.restore()
    return bool(cfg.eagle_use_aux_hidden_state), cfg.eagle_aux_hidden_state_layer_ids


def _eagle3_statement(node) -> bool:
    """ModelRunner's EAGLE-3 aux statement: ``if self.spec_algorithm.is_eagle3() and not self.is_draft_worker:``
    reading the draft's eagle_config (0.5.9/0.5.12: into attributes; 0.5.3: straight into the target's hook)."""
    return mentions(node.test, "is_eagle3", "is_draft_worker") and mentions(node, "eagle_aux_hidden_state_layer_ids")


class _RecordingTarget:
    """Stands in for the target model where 0.5.3's statement hands it the ids (read here, wired later)."""

    ids = "not called"

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.ids = layer_ids


def _run_eagle3_statement(draft_dir: Path, model):
    from contracts.engines.sglang.context import server_args as published
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    server_args = copy.copy(published())
    server_args.speculative_algorithm = "EAGLE3"
    server_args.speculative_draft_model_path = str(draft_dir)
    runner = runner_stand_in(spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"), is_draft_worker=False,
                             eagle_use_aux_hidden_state=False, model=model)
    run_model_runner_statement(_eagle3_statement, {"self": runner, "server_args": server_args})
    return runner


def _resolve_aux_config_in_model_runner(draft_dir: Path):
    """Releases that read the draft's eagle_config inline in ``ModelRunner`` (0.5.3-0.5.12): that statement, run
    on a stand-in runner of the target with ``--speculative-draft-model-path`` set to the draft."""
    recorder = _RecordingTarget()
    runner = _run_eagle3_statement(draft_dir, recorder)
    if "eagle_aux_hidden_state_layer_ids" in vars(runner):  # 0.5.9/0.5.12 keep what they read
        return bool(runner.eagle_use_aux_hidden_state), runner.eagle_aux_hidden_state_layer_ids
    return True, recorder.ids  # 0.5.3: no use_aux_hidden_state switch; the statement wires capture itself


def _configure_capture(model, use_aux: bool, ids, draft_dir: Path) -> None:
    """The engine's own call that wires the target's aux capture (raises what the engine raises)."""
    if has_module("sglang.srt.model_executor.model_runner_components.attention_backend_setup"):
        from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
            configure_aux_hidden_state_capture,
        )

        configure_aux_hidden_state_capture(model=model, eagle_use_aux_hidden_state=use_aux,
                                           eagle_aux_hidden_state_layer_ids=ids, dflash_use_aux_hidden_state=False,
                                           dflash_target_layer_ids=None, is_dspark=False)
        return
    # 0.5.9/0.5.12: inline in ModelRunner, `if self.eagle_use_aux_hidden_state: self.model.set_eagle3_...(ids)`
    runner = runner_stand_in(model=model, eagle_use_aux_hidden_state=use_aux, eagle_aux_hidden_state_layer_ids=ids)
    try:
        run_model_runner_statement(
            lambda node: ast_is_attribute(node.test, "eagle_use_aux_hidden_state")
            and mentions(node, "set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)"),
            {"self": runner})
    except LookupError:  # 0.5.3: the EAGLE-3 statement itself calls the target's hook
        _run_eagle3_statement(draft_dir, model)


def _capture_owner(model):
    """The module whose ``layers_to_capture`` the hook sets (the model itself, or a wrapped language model)."""
    for module in model.modules():
        if isinstance(getattr(module, "layers_to_capture", None), list):
            return module
    return None


def _hook_kind(cls) -> str:
    hook = getattr(cls, "set_eagle3_layers_to_capture", None)
    if hook is None:
        return "missing"
    try:
        source = inspect.getsource(hook)
    except (OSError, TypeError):
        return "implemented"
    if "hasattr(" in source and "raise" not in source:
        return "delegates only if the inner model implements it"
    if "language_model" in source or ".model.set_eagle3" in source:
        return "delegates to the inner language model"
    return "implemented"


def _hf_states(target_dir: Path, input_ids):
    """transformers' ``hidden_states`` of the target (its own weights) over ``input_ids``; None when it cannot load."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()  # stderr stays the CLI's one-line channel
    try:
        hf = transformers.AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    except Exception:
        return None
    with torch.no_grad():
        return hf(input_ids[None], output_hidden_states=True).hidden_states


def _hf_indices(states, captured, hidden: int) -> list[int] | None:
    """Which transformers ``hidden_states`` index (of ``_hf_states``) each captured tensor equals."""
    if states is None:
        return None
    out = []
    for j in range(captured.shape[-1] // hidden):
        chunk = captured[:, j * hidden:(j + 1) * hidden].float()
        diffs = [float((chunk - s[0]).abs().max()) for s in states]
        best = min(range(len(diffs)), key=diffs.__getitem__)
        out.append(best if diffs[best] < 1e-3 else -1)
    return out


class _HookState:
    """Sets the engine's capture hook to some ids for a while and puts its state back (the hook also switches
    capture on)."""

    def __init__(self, model, owner):
        self.model, self.owner = model, owner

    def __enter__(self):
        self.saved = list(self.owner.layers_to_capture)
        self.flags = {m: m.__dict__["capture_aux_hidden_states"] for m in (self.model, self.owner)
                      if "capture_aux_hidden_states" in m.__dict__}
        return self

    def set(self, ids) -> list:
        self.model.set_eagle3_layers_to_capture(list(ids))
        return list(self.owner.layers_to_capture)

    def __exit__(self, *exc):
        self.owner.layers_to_capture = self.saved
        for m, flag in self.flags.items():
            m.capture_aux_hidden_states = flag


def _ids_for(model, owner, wanted: list[int]) -> list[int] | None:
    """Ask the engine's hook which explicit ids make it list exactly ``wanted`` (tries id-1 and id, as the hook of
    each target class shifts them or not); ``_verify_ids`` then runs the forward with them."""
    with _HookState(model, owner) as hook:
        for candidate in ([w - 1 for w in wanted], list(wanted)):
            if hook.set(candidate) == list(wanted):
                return candidate
    return None


def _verify_ids(obs, model, owner, forward, wanted: list[int]) -> None:
    """The ids the hook lists are what it records, not what the forward captures: a Llama target's hook takes
    id 7 on an 8-layer target and lists layer 8, but its decoder loop never reaches layer 8 and hands over two
    states. Run the forward with the ids and keep them only when it captures ``wanted`` (by position where the
    target has its own weights, else by count); otherwise say what it captured."""
    candidate = obs.ids_for_trainer_layers
    with _HookState(model, owner) as hook:
        hook.set(candidate)
        try:
            captured, where = forward()
        except Exception as e:  # noqa: BLE001  (the forward under the default ids ran: say why this one did not)
            captured, where = None, f"nothing (it raised {type(e).__name__}: {str(e)[:200]})"
    if captured == list(wanted) or (where == "count" and captured == len(wanted)):
        return
    got = where if captured is None else (f"{captured} state(s)" if where == "count" else f"hidden_states {captured}")
    obs.ids_unreachable = (f"ids {candidate} make its hook list layers {list(wanted)}, but the forward with them "
                           f"captures {got}: no ids make {obs.target_class} capture hidden_states {list(wanted)}")
    obs.ids_for_trainer_layers = None


HOOK = "set_eagle3_layers_to_capture"  # what a target class implements to capture aux hidden states
# Releases that gained the hook for a target class, for the fix line.
HOOK_SINCE = {
    "KimiK25ForConditionalGeneration": "SGLang 0.5.10 (kimi_k25 delegates capture to its DeepSeek-V3 language model)",
    "DeepseekV2ForCausalLM": "SGLang 0.5.6", "DeepseekV3ForCausalLM": "SGLang 0.5.6",
}


def observe_aux_capture(draft_dir, target_dir, *, trainer_hf_indices: list[int] | None = None) -> AuxCaptureObservation:
    """What SGLang would hand this draft from this target, observed on a tiny instance of the target class."""
    import torch

    from contracts.engines.sglang.loader import build_model

    ensure_context()
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.models.registry import ModelRegistry

    draft_dir, target_dir = Path(draft_dir), Path(target_dir)
    target = Checkpoint.open(target_dir, require_weights=False, role="target")
    draft_cfg = json.loads((draft_dir / "config.json").read_text())
    arch = (target.config.get("architectures") or ["?"])[0]
    text = text_config(target.config)
    obs = AuxCaptureObservation(engine={"name": "sglang", "version": engine_version()}, target_architecture=arch,
                                num_target_layers=text.get("num_hidden_layers"),
                                target_hidden_size=text.get("hidden_size"), hook_name=HOOK,
                                hook_since=HOOK_SINCE.get(arch))
    try:
        register_architectures([arch])
        cls, _ = ModelRegistry.resolve_model_cls([arch])
        obs.target_class = cls.__name__
        obs.hook = _hook_kind(cls)
    except Exception as e:
        obs.evidence = "static"
        obs.evidence_reason = f"the engine's registry has no class for {arch}: {type(e).__name__}: {e}"
        obs.hook = "missing"
        return obs

    n_params = sum(t.numel for t in target.tensors.values())
    # the target's own weights only when they are small and hold its decoder layers (a target dir may carry only
    # its vocabulary tensors, e.g. fixtures/targets/kimi-k25-tiny: then it is a config with random weights)
    own_weights = (n_params <= SMALL_TARGET_PARAMS and any(".layers." in k or k.startswith("layers.")
                                                           for k in target.tensors))
    tmp = Path(tempfile.mkdtemp(prefix="eagle3-contracts-aux-"))
    try:
        if own_weights:
            tiny_target = target_dir
        else:
            tiny_target = tmp / "target"
            tiny_target.mkdir()
            (tiny_target / "config.json").write_text(json.dumps(scale_down(target.config)))
        tiny_text = text_config(json.loads((tiny_target / "config.json").read_text()))
        hidden, vocab = int(tiny_text["hidden_size"]), int(tiny_text.get("vocab_size") or 1024)
        tiny_draft = tmp / "draft"
        tiny_draft.mkdir()
        (tiny_draft / "config.json").write_text(json.dumps(
            draft_at_target_vocab(draft_cfg, vocab) if own_weights else scale_draft(draft_cfg, hidden, vocab)))
        obs.tiny_target = "the target itself (own weights)" if own_weights else "scaled-down copy of its config (random weights)"

        try:
            target_mc = ModelConfig(str(tiny_target), trust_remote_code=False, dtype="float32")
            # first on the meta device: a copy whose class sizes parts from what the scaling does not touch (a
            # Gemma-3 multimodal class over a Kimi-K2.5 config: head_dim 256 rope caches for 262144 positions, 537 MB
            # of buffers, 1.46 GB peak) is never materialised, so memory stays bounded on every path
            meta = build_model(target_mc, device="meta")
            size = sum(t.numel() for t in [*meta.parameters(), *meta.buffers()])
            del meta
            if size > TINY_BUILD_MAX_ELEMENTS:
                obs.evidence = "static"
                obs.evidence_reason = (f"the scaled-down copy of {arch} still holds {size / 1e6:.0f} M parameter and "
                                       f"buffer elements (parts sized from what the scaling does not touch, e.g. rope "
                                       f"caches for the full context): not built on CPU")
                return obs
            model = build_model(target_mc)
        except Exception as e:
            obs.evidence = "static"
            obs.evidence_reason = f"a tiny {arch} could not be built on CPU: {str(e)[:300]}"
            return obs
        if own_weights:
            try:
                model.load_weights(target.iter_tensors())
            except Exception as e:  # the engine's loader refuses the target's own weights: judge the class alone
                obs.evidence = "static"
                obs.evidence_reason = f"SGLang's {arch}.load_weights refused the target's weights: {str(e)[:300]}"
                return obs
        else:
            init_random(model)
            finish = getattr(model, "post_load_weights", None)
            if callable(finish):  # what the engine's load_weights ends with (e.g. MLA's absorbed w_kc / w_vc)
                finish()
        try:  # the engine's own reading of the draft's eagle_config, then its wiring of the target's capture
            obs.use_aux_hidden_state, obs.aux_layer_ids = _resolve_aux_config(tiny_draft, target_mc)
            _configure_capture(model, obs.use_aux_hidden_state, obs.aux_layer_ids, tiny_draft)
        except Exception as e:  # a target without the hook refuses to start (0.5.23 ValueError, 0.5.9 AttributeError)
            obs.configure_error = f"{type(e).__name__}: {e}"
        owner = _capture_owner(model)
        obs.layers_to_capture = list(owner.layers_to_capture) if owner is not None else None
        # asked of the hook alone, before any forward: known even where the tiny forward cannot run on a CPU
        if trainer_hf_indices and owner is not None and obs.configure_error is None and obs.use_aux_hidden_state:
            obs.ids_for_trainer_layers = _ids_for(model, owner, trainer_hf_indices)
            if obs.ids_for_trainer_layers is None:
                obs.ids_unreachable = (f"no ids make the hook of {obs.target_class} list hidden_states "
                                       f"{list(trainer_hf_indices)} (tried each id, id-1)")
        input_ids = torch.tensor([i % vocab for i in INPUT_IDS])
        try:
            out = target_forward(model, target_mc.hf_config, torch.float32, input_ids)
        except Exception as e:
            obs.evidence = "static"
            obs.evidence_reason = (f"the tiny {arch} forward does not run on CPU with SGLang's torch-native attention "
                                   f"backend (the one that runs on a CPU): {type(e).__name__}: {str(e)[:300]}")
            return obs
        captured = out.hidden_states
        obs.evidence = "observed"
        if uses_latent_attention(target_mc.hf_config):
            obs.tiny_target += "; run as decode steps (the engine's absorbed MLA form, see cpu_forward.decode_forward)"
        obs.hidden_width = int(captured.shape[-1])
        obs.tiny_hidden_size = hidden
        hf_states = _hf_states(target_dir, input_ids) if own_weights and (
            obs.layers_to_capture or obs.ids_for_trainer_layers is not None) else None
        if own_weights and obs.layers_to_capture:
            obs.hf_indices = _hf_indices(hf_states, captured, hidden)
        if obs.ids_for_trainer_layers is not None:
            def forward():
                states = target_forward(model, target_mc.hf_config, torch.float32, input_ids).hidden_states
                positions = _hf_indices(hf_states, states, hidden)
                if positions is not None:
                    return positions, "position"
                return int(states.shape[-1]) // hidden, "count"  # (transformers could not place them: by count)

            _verify_ids(obs, model, owner, forward, list(trainer_hf_indices or []))
        _observe_draft(obs, tiny_draft, captured)
        return obs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _observe_draft(obs: AuxCaptureObservation, tiny_draft: Path, captured) -> None:
    """Run the engine's draft forward on what the target handed over; did ``fc`` run?"""
    import torch

    from contracts.engines.errors import EngineBuildError
    from contracts.engines.sglang.loader import build_model, model_config

    try:
        mc = model_config(tiny_draft)
        draft = build_model(mc)
    except EngineBuildError as e:
        obs.draft_forward_error = str(e)
        return
    fc = getattr(getattr(draft, "model", None), "fc", None)
    if fc is None:  # the config dispatches to a class that is no EAGLE-3 draft (judged by `config`)
        obs.draft_forward_error = f"the engine builds {type(draft).__name__} for this draft config, which has no fc"
        return
    init_random(draft)
    obs.fc_in_features = int(fc.in_features)
    calls = []
    handle = fc.register_forward_hook(lambda module, inputs, output: calls.append(int(inputs[0].shape[-1])))
    ids = torch.tensor(INPUT_IDS[: captured.shape[0]]) % int(mc.hf_config.vocab_size)
    try:
        extend_forward(draft, mc.hf_config, mc.dtype, ids, spec_hidden_states=captured.to(mc.dtype))
        obs.fc_ran = bool(calls)
    except Exception as e:
        obs.draft_forward_error = f"{type(e).__name__}: {str(e)[:300]}"
        obs.fc_ran = bool(calls)
    finally:
        handle.remove()
