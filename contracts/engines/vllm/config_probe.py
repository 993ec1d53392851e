"""Ask vLLM which draft-config switches it honours, which class it dispatches the draft to, and which rope it
applies — by running its own code, not by reading a list.

Contract served: ``config``. vLLM implements ``norm_before_residual`` (SGLang does not), reads speculators'
nested config natively (there ``norm_before_residual`` defaults to true when absent, in a flat config to false),
and honours ``norm_before_fc``, ``fc_norm`` and ``norm_output``. A switch is *honoured* when flipping it, with
the same weights and inputs, changes the engine's output (the proposer's ``combine_hidden_states``, the draft
forward and ``compute_logits``). A draft whose head size vLLM's CPU attention does not take, or a real-size
one, is probed on a scaled-down copy of its config with seeded weights: whether a switch is honoured is a
property of the engine's code, not of the weights. The rope the engine applies is compared with the rope the
trainer's config describes, both built by vLLM's own ``get_rope``.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import zlib
from pathlib import Path

from contracts.checkpoint import Checkpoint, rope_of
from contracts.engines.errors import EngineBuildError, raised_by_engine
from contracts.engines.scaling import scale_draft
from contracts.checkpoint import trained_window
from contracts.engines.switch_effect import (PROBE_WINDOW, rope_comparison, switch_effect, window_effect)
from contracts.engines.tracing import is_real_size
from contracts.engines.vllm.cpu_forward import CPU_HEAD_DIM
from contracts.engines.vllm.context import current, draft_configs, engine_version
from contracts.engines.vllm.cpu_forward import finish_loading, kernels_missing, one_request, runs_on_cpu
from contracts.engines.vllm.loader import LoadTracer, build_draft, is_eagle3_draft_class
from contracts.engines.load_tracer import fates_of
from contracts.observations import ConfigObservation

SEED = 1234
TOKENS = 8


def _fill_unwritten(model, seed: int) -> None:
    """Seeded values where the checkpoint wrote nothing (NaN sentinel); each parameter's values depend only on its
    name, so a rebuild with one extra parameter leaves every other one identical."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_floating_point():
                gen = torch.Generator().manual_seed(seed + zlib.crc32(name.encode()))
                fresh = (torch.randn(p.shape, generator=gen) * 0.02).to(p.dtype)
                if p.dim() == 1 and "norm" in name:
                    fresh = fresh + 1.0
                mask = torch.isnan(p)
                p[mask] = fresh[mask]


def _outputs(configs, ckpt: Checkpoint | None, overrides: dict, inputs):
    """vLLM's draft step with the checkpoint's weights (seeded ones where it has none) under ``overrides``:
    ((logits over the target vocab, the normed hidden state its head reads), the hidden state the proposer feeds
    back into the next draft step, which ``norm_output`` changes)."""
    import torch

    model = build_draft(configs, overrides=overrides)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.fill_(float("nan"))
    if ckpt is not None:  # a tensor the engine refuses (shape) is recorded by tensor-shapes, not raised here
        fates = fates_of(ckpt)
        LoadTracer(model).load(ckpt.iter_tensors(), fates)
    _fill_unwritten(model, SEED)
    finish_loading(model, configs.draft)
    ids, hidden = inputs
    with one_request(configs.vc, int(ids.shape[0])):
        combined = model.combine_hidden_states(hidden.to(configs.draft.dtype))
        out, fed_back = model(ids, torch.arange(ids.shape[0]), combined)
        logits = model.compute_logits(out)
    finite = torch.where(torch.isfinite(logits), logits, torch.zeros_like(logits))  # -inf outside the draft vocab
    return (finite.float(), out.float()), fed_back.float()


def _rotary(model):
    layer = model.model.layers[0]
    return getattr(getattr(layer, "self_attn", None), "rotary_emb", None)


def compare_rope(model, trainer_cfg: dict) -> dict:
    """The engine's applied rope versus the rope built by vLLM's own ``get_rope`` from the trainer's config."""
    from vllm.model_executor.layers.rotary_embedding import get_rope

    rotary = _rotary(model)
    theta, scaling = rope_of(trainer_cfg)
    applied = {"class": type(rotary).__name__ if rotary is not None else None, "base": getattr(rotary, "base", None)}
    trained = {"rope_theta": theta, "rope_scaling": scaling}
    if rotary is None or theta is None:
        return {"applied": applied, "trained": trained, "same": None}
    params = {"rope_theta": theta, "rope_type": "default", **copy.deepcopy(scaling or {})}
    if "type" in params and "rope_type" not in (scaling or {}):
        params["rope_type"] = params.pop("type")
    max_pos = int(trainer_cfg.get("max_position_embeddings") or rotary.max_position_embeddings)
    expected = get_rope(rotary.head_size, max_position=max_pos, is_neox_style=rotary.is_neox_style,
                        rope_parameters=params, dtype=rotary.cos_sin_cache.dtype)
    return rope_comparison(rotary, expected, theta, scaling)


def observe_config(engine_dir, trainer_config: dict, candidate_switches: dict[str, bool],
                   target_config: dict | None) -> ConfigObservation:
    """Dispatch, honoured switches and applied rope for the draft in ENGINE_DIR (served with a target of
    TARGET_CONFIG, when given)."""
    from vllm.model_executor.model_loader.utils import get_model_architecture

    engine_dir = Path(engine_dir)
    obs = ConfigObservation(engine={"name": "vllm", "version": engine_version()})
    tmp = Path(tempfile.mkdtemp(prefix="eagle3-contracts-vllm-config-"))
    try:
        target_dir = None
        if target_config is not None:
            target_dir = tmp / "target"
            target_dir.mkdir()
            (target_dir / "config.json").write_text(json.dumps(target_config))
        try:
            configs = draft_configs(engine_dir, target_dir)
            obs.architectures = list(getattr(configs.draft.hf_config, "architectures", None) or [])
            cls, _ = get_model_architecture(configs.draft)  # what the model loader dispatches on
            obs.draft_class = cls.__name__
            obs.is_eagle3_draft = is_eagle3_draft_class(cls)
            obs.engine_dtype = str(configs.draft.dtype).removeprefix("torch.")
        except (EngineBuildError, Exception) as e:  # the engine's own refusal is the observation
            obs.dispatch_error = f"{type(e).__name__}: {e}"
            return obs
        if target_config is not None:
            obs.target_engine_dtype = str(configs.target.dtype).removeprefix("torch.")
        if not obs.is_eagle3_draft:
            return obs
        ckpt = Checkpoint.open(engine_dir)
        flat = json.loads((engine_dir / "config.json").read_text())
        if is_real_size(ckpt) or not runs_on_cpu(configs.draft.hf_config):
            why = "a real-size draft" if is_real_size(ckpt) else \
                "its head size is not one vLLM's CPU attention takes"
            scaled = tmp / "draft"
            scaled.mkdir()
            (scaled / "config.json").write_text(json.dumps(scale_draft(flat, 64, 1024, head_dim=CPU_HEAD_DIM)))
            obs.probed_on = (f"a scaled-down copy of the draft config (hidden 64, head_dim {CPU_HEAD_DIM}) with seeded "
                             f"weights ({why})")
            probe_configs, probe_ckpt = draft_configs(scaled, None, "float32"), None
        else:
            obs.probed_on = "the checkpoint's own weights"
            probe_configs, probe_ckpt = draft_configs(engine_dir, target_dir, "float32"), ckpt
        missing = kernels_missing()
        if missing:  # the switches are probed by forwards; the rope the engine builds needs none
            obs.switches_not_probed, obs.probed_on = missing, None
            with current(probe_configs.vc):
                obs.rope = compare_rope(build_draft(probe_configs), trainer_config)
            return obs
        _probe_switches(obs, probe_configs, probe_ckpt, candidate_switches, trainer_config)
        return obs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _probe_switches(obs, configs, ckpt, candidate_switches: dict[str, bool], trainer_config: dict) -> None:
    import torch

    gen = torch.Generator().manual_seed(SEED)
    model = build_draft(configs)
    fc_in = int(model.model.fc_input_size) if getattr(model.model, "fc", None) is not None else \
        int(configs.draft.hf_config.hidden_size)
    vocab = int(configs.draft.hf_config.vocab_size)
    ids = torch.randint(0, vocab, (TOKENS,), generator=gen)
    hidden = torch.randn(TOKENS, fc_in, generator=gen)
    try:
        base = _outputs(configs, ckpt, {}, (ids, hidden))
    except Exception as e:  # noqa: BLE001
        if ckpt is None or not raised_by_engine(e, "vllm"):
            raise
        # the engine's forward refuses the checkpoint's own weights (e.g. compute_logits indexing with a d2t of
        # absolute ids): what that means is d2t-semantics' and forward-parity's to judge; a switch's effect does
        # not depend on the weights, so the switches are flipped on seeded ones
        obs.probed_on = (f"seeded weights (the engine's forward refused the checkpoint's own: "
                         f"{type(e).__name__}: {str(e)[:160]})")
        ckpt = None
        try:
            base = _outputs(configs, ckpt, {}, (ids, hidden))
        except Exception as e2:  # noqa: BLE001  (not the weights: the engine cannot run this draft at all)
            if not raised_by_engine(e2, "vllm"):
                raise
            obs.forward_error = f"{type(e2).__name__}: {str(e2)[:200]}"
            return
    for key, value in candidate_switches.items():
        try:
            flipped = _outputs(configs, ckpt, {key: not value}, (ids, hidden))
        except Exception as e:  # noqa: BLE001  (a flip that changes what the engine builds is honoured)
            obs.switches[key] = {"value": value, "honoured": True, "evidence": f"flipping it changes the build: "
                                 f"{type(e).__name__}: {str(e)[:120]}"}
            continue
        obs.switches[key] = switch_effect(value, base, flipped)
    window = trained_window(trainer_config)
    if window is not None:  # vLLM's llama.py builds per_layer_sliding_window from layer_types and sliding_window
        obs.window = window_effect(window, base, _outputs(configs, ckpt, {"sliding_window": PROBE_WINDOW},
                                                          (ids, hidden)))
    with current(configs.vc):  # vLLM's rotary classes are custom ops: they read the current config when built
        obs.rope = compare_rope(build_draft(configs), trainer_config)
