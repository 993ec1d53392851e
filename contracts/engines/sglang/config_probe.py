"""Ask SGLang which draft-config switches it honours, which class it dispatches the draft to, and which
rope it really applies — by running its own code, not by reading a list.

Contract served: ``config``. speculators' ``train`` defaults set ``norm_before_residual: true``; SGLang 0.5.23
has no such switch, so the same weights compute other logits while every name and shape matches. A
switch is *honoured* when flipping it, with the same weights and inputs, changes the engine's output; the
check fails a checkpoint that sets an ignored switch to a non-default value. The rope the engine applies
is compared with the rope the trainer's config describes by building both with the engine's own
``get_rope`` and comparing the cos/sin caches.
"""

from __future__ import annotations

import copy
import json
import tempfile
import types
from pathlib import Path

from contracts.checkpoint import Checkpoint, rope_of
from contracts.engines.sglang.context import engine_version, ensure_context
from contracts.engines.sglang.cpu_forward import extend_forward
from contracts.engines.scaling import scale_draft
from contracts.checkpoint import trained_window
from contracts.engines.switch_effect import (PROBE_WINDOW, rope_comparison, switch_effect, window_effect)
from contracts.engines.errors import EngineBuildError
from contracts.engines.sglang.loader import build_model, is_eagle3_draft_class, model_config, tracer
from contracts.engines.errors import raised_by_engine
from contracts.engines.tracing import is_real_size
from contracts.engines.sglang.registry_cache import register_architectures
from contracts.engines.load_tracer import fates_of
from contracts.observations import ConfigObservation

SEED = 1234
TOKENS = 8


def _with_overrides(mc, overrides: dict):
    """A copy of the draft ModelConfig with switches changed where the engine reads them (eagle_config first)."""
    mc = copy.copy(mc)
    mc.hf_config = copy.deepcopy(mc.hf_config)
    eagle = dict(getattr(mc.hf_config, "eagle_config", None) or {})
    for key, value in overrides.items():
        if key in eagle:
            eagle[key] = value
            mc.hf_config.eagle_config = eagle
        else:
            setattr(mc.hf_config, key, value)
    return mc


def _fill_unwritten(model, seed: int) -> None:
    """Seeded values where the checkpoint wrote nothing (NaN sentinel); each parameter's values depend only on
    its name, so a rebuild with one extra parameter leaves every other one identical."""
    import zlib

    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_floating_point():
                gen = torch.Generator().manual_seed(seed + zlib.crc32(name.encode()))
                fresh = (torch.randn(p.shape, generator=gen) * 0.02).to(p.dtype)
                mask = torch.isnan(p)
                p[mask] = fresh[mask]


def _outputs(mc, ckpt: Checkpoint | None, overrides: dict, inputs):
    """The engine's draft forward with the checkpoint's weights (seeded ones where it has none, or for a
    scaled-down draft) under ``overrides``: ((logits,), the hidden state captured for the next draft step)."""
    import torch

    run_mc = _with_overrides(mc, overrides) if overrides else mc
    model = build_model(run_mc)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.fill_(float("nan"))
    # the traced load: a tensor the engine refuses (shape) is recorded by tensor-shapes, not raised here
    if ckpt is not None:
        fates = fates_of(ckpt)
        tracer(model).load(ckpt.iter_tensors(), fates)
    _fill_unwritten(model, SEED)
    ids, hidden = inputs
    out = extend_forward(model, run_mc.hf_config, run_mc.dtype, ids, spec_hidden_states=hidden.to(run_mc.dtype))
    return (out.next_token_logits.float(),), out.hidden_states.float()


def _rotary(model):
    """The draft layer's rotary embedding (``model.layers[0]`` on 0.5.23, ``model.midlayer`` on 0.5.9)."""
    inner = model.model
    layer = inner.layers[0] if hasattr(inner, "layers") else getattr(inner, "midlayer", None)
    return getattr(getattr(layer, "self_attn", None), "rotary_emb", None)


def compare_rope(model, trainer_cfg: dict) -> dict:
    """The engine's applied rope versus the rope built by the engine's own ``get_rope`` from the trainer's config."""
    from sglang.srt.layers.rotary_embedding import get_rope

    rotary = _rotary(model)
    theta, scaling = rope_of(trainer_cfg)
    applied = {"class": type(rotary).__name__ if rotary is not None else None,
               "base": getattr(rotary, "base", None)}
    trained = {"rope_theta": theta, "rope_scaling": scaling}
    if rotary is None or theta is None:
        return {"applied": applied, "trained": trained, "same": None}
    max_pos = int(trainer_cfg.get("max_position_embeddings") or rotary.max_position_embeddings)
    expected = get_rope(rotary.head_size, rotary_dim=rotary.rotary_dim, max_position=max_pos, base=theta,
                        rope_scaling=copy.deepcopy(scaling), is_neox_style=rotary.is_neox_style)
    return rope_comparison(rotary, expected, theta, scaling)


def observe_config(engine_dir, trainer_config: dict, candidate_switches: dict[str, bool],
                   target_config: dict | None) -> ConfigObservation:
    """Dispatch, honoured switches and applied rope for the draft in ENGINE_DIR.

    ``trainer_config``: the config as the trainer saved it (nested for speculators), for the rope it trained
    with. ``candidate_switches``: boolean switches present in the checkpoint's config, to flip one by one.
    """

    ensure_context()
    from sglang.srt.configs.model_config import _get_and_verify_dtype
    from sglang.srt.model_loader.utils import get_model_architecture

    engine_dir = Path(engine_dir)
    obs = ConfigObservation(engine={"name": "sglang", "version": engine_version()})
    try:
        mc = model_config(engine_dir)
        obs.architectures = list(mc.hf_config.architectures or [])
        register_architectures(obs.architectures)
        cls, _ = get_model_architecture(mc)  # what the model loader dispatches on
        obs.draft_class = cls.__name__
        obs.is_eagle3_draft = is_eagle3_draft_class(cls)
        obs.engine_dtype = str(mc.dtype).removeprefix("torch.")
    except (EngineBuildError, Exception) as e:  # the engine's own refusal is the observation
        obs.dispatch_error = f"{type(e).__name__}: {e}"
        return obs
    if target_config is not None:
        # the fields the engine's rule reads, as attributes (0.5.3 takes a config object; 0.5.23 also a dict)
        fields = types.SimpleNamespace(model_type=target_config.get("model_type", ""),
                                       dtype=target_config.get("dtype"), torch_dtype=target_config.get("torch_dtype"))
        obs.target_engine_dtype = str(_get_and_verify_dtype(fields, "auto")).removeprefix("torch.")
    if not obs.is_eagle3_draft:
        return obs

    ckpt = Checkpoint.open(engine_dir)
    if is_real_size(ckpt):
        # A real-size draft: whether a switch is honoured is a property of the engine's code, not of the
        # weights, so ask a scaled-down draft of the same config (seeded weights) instead of materialising it.
        with tempfile.TemporaryDirectory(prefix="eagle3-contracts-config-") as tmp:
            flat = json.loads((engine_dir / "config.json").read_text())
            (Path(tmp) / "config.json").write_text(json.dumps(scale_draft(flat, 64, 1024)))
            obs.probed_on = "a scaled-down copy of the draft config (hidden 64) with seeded weights"
            _probe_switches(obs, model_config(Path(tmp)), None, candidate_switches, trainer_config)
        return obs
    obs.probed_on = "the checkpoint's own weights"
    _probe_switches(obs, mc, ckpt, candidate_switches, trainer_config)
    return obs


def _window_option(cls) -> str | None:
    """The server argument through which this release's draft class takes an attention window, if it has one (0.5.23:
    ``LlamaForCausalLMEagle3.__init__`` reads ``speculative_draft_window_size`` and sets it on every draft layer)."""
    import inspect

    try:
        source = inspect.getsource(cls.__init__)
    except (OSError, TypeError):
        return None
    return "--speculative-draft-window-size" if "speculative_draft_window_size" in source else None


def _probe_switches(obs, mc, ckpt, candidate_switches: dict[str, bool], trainer_config: dict) -> None:
    import torch

    gen = torch.Generator().manual_seed(SEED)
    fc_in = build_model(mc).model.fc.in_features
    vocab = int(mc.hf_config.vocab_size)
    ids = torch.randint(0, vocab, (TOKENS,), generator=gen)
    hidden = torch.randn(TOKENS, fc_in, generator=gen)
    try:
        base = _outputs(mc, ckpt, {}, (ids, hidden))
    except Exception as e:  # noqa: BLE001
        if not raised_by_engine(e, "sglang"):
            raise
        # SGLang's own forward cannot run this draft (e.g. num_hidden_layers 0: its llama_eagle3 forward unpacks
        # a norm that returned one value): the server would fail the same way on its first draft step
        obs.forward_error = f"{type(e).__name__}: {str(e)[:200]}"
        return
    for key, value in candidate_switches.items():
        try:
            flipped = _outputs(mc, ckpt, {key: not value}, (ids, hidden))
        except Exception as e:
            obs.switches[key] = {"value": value, "honoured": True, "evidence": f"flipping it changes the build: "
                                 f"{type(e).__name__}: {str(e)[:120]}"}
            continue
        obs.switches[key] = switch_effect(value, base, flipped)
    window = trained_window(trainer_config)
    if window is not None:  # SGLang's draft takes a window only from --speculative-draft-window-size
        obs.window = window_effect(window, base, _outputs(mc, ckpt, {"sliding_window": PROBE_WINDOW}, (ids, hidden)))
    model = build_model(mc)
    if obs.window is not None and _window_option(type(model)):
        obs.window["engine_option"] = _window_option(type(model))
    obs.rope = compare_rope(model, trainer_config)
