"""Build SGLang's own draft model for a checkpoint directory and trace its own ``load_weights``.

Contract served: ``key-naming`` / ``tensor-shapes``. SGLang's ``LlamaForCausalLMEagle3.load_weights``
returns None and silently skips every name it cannot match (in 0.5.3 all ten ``layers.0.*`` tensors of a
speculators draft were dropped and seven parameters stayed random while the server started). Nothing
here re-implements that loader: the model is built through SGLang's ``ModelConfig`` and model registry,
every parameter is filled with a NaN sentinel, every parameter's weight loader is wrapped to record which
checkpoint key reached it (and what it raised), and the keys are fed through a generator that knows which
key is current. A key that reached no loader and no side channel was dropped; a parameter still holding
the sentinel was never written.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

from contracts.checkpoint import Checkpoint
from contracts.engines.errors import EngineBuildError, engine_words
from contracts.engines.layer_reads import mark_reads
from contracts.engines.sglang.compat import accepts, meta_build_isolated
from contracts.engines.sglang.context import engine_version, ensure_context
from contracts.engines import load_tracer
from contracts.engines.load_tracer import InOrderTracer, config_summary, fates_of
from contracts.engines.tracing import choose_device, fill_sentinel, iter_for_device, unwritten_fraction
from contracts.observations import LoadObservation, ParamState
from contracts.renames import dropped_keys

# The engine wiring that overwrites a draft parameter from the target after loading (0.5.23:
# ``EagleDraftWorker.init_lm_head`` always calls ``set_embed``; ``set_embed_and_head`` when the draft
# sets ``load_lm_head_from_target``). The embed-head contract observes whether it really happens.
EMBED_PARAM = "model.embed_tokens.weight"
HEAD_PARAM = "lm_head.weight"

CONFIG_SUMMARY_KEYS = (
    "architectures", "model_type", "hidden_size", "target_hidden_size", "num_hidden_layers", "vocab_size",
    "draft_vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
    "tie_word_embeddings", "eagle_config", "num_aux_hidden_states", "norm_before_fc", "fc_norm", "norm_output",
    "norm_before_residual", "bias", "rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings",
)


def is_eagle3_draft_class(cls) -> bool:
    """An EAGLE-3 draft class of the engine (it maps draft ids through ``hot_token_id``), not a target class such
    as ``LlamaForCausalLM``, which a draft published under the base architecture dispatches to."""
    return hasattr(cls, "get_hot_token_id") and "Eagle3" in cls.__name__


def model_config(engine_dir: Path, dtype: str = "auto"):
    """The draft's ``ModelConfig`` made by SGLang's own config handling (as for ``--speculative-draft-model-path``;
    ``dtype`` as ``--dtype``)."""
    ensure_context()
    from sglang.srt.configs.model_config import ModelConfig

    # Releases that take the speculative algorithm (0.5.23) read EAGLE-3 specifics from it; older ones
    # (0.5.9) infer them from the draft config.
    spec = {"speculative_algorithm": "EAGLE3"} if accepts(ModelConfig, "speculative_algorithm") else {}
    try:
        return ModelConfig(str(engine_dir), is_draft_model=True, trust_remote_code=False, dtype=dtype, **spec)
    except Exception as e:  # the engine's own refusal is the observation
        raise EngineBuildError(f"SGLang's ModelConfig rejected the draft config: {type(e).__name__}: {e}") from None


def _import_model_modules(mc) -> None:
    """Let the engine's registry import its model modules outside any ``torch.device`` context: on 0.5.9 a
    first lookup made under ``meta`` fails to import modules that make tensors at import time, and the
    registry then silently lacks their classes (``'LlamaForCausalLMEagle3' is not a registered model``)."""
    from sglang.srt.model_loader.utils import get_model_architecture

    from contracts.engines.sglang.registry_cache import register_architectures

    try:
        register_architectures(getattr(mc.hf_config, "architectures", None))
        get_model_architecture(mc)
    except Exception:  # noqa: BLE001  (the build below reports the engine's refusal with its own message)
        pass


def build_model(mc, overrides: dict | None = None, device: str = "cpu"):
    """Construct the engine's draft class the way its model loader does (registry, default dtype, device)."""
    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader.loader import _initialize_model
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    if overrides:
        mc = copy.copy(mc)
        mc.hf_config = copy.deepcopy(mc.hf_config)
        for k, v in overrides.items():
            setattr(mc.hf_config, k, v)
    _import_model_modules(mc)
    isolated = meta_build_isolated() if device == "meta" else contextlib.nullcontext()
    try:
        with isolated, set_default_torch_dtype(mc.dtype), torch.device(device):
            return _initialize_model(mc, LoadConfig())
    except Exception as e:
        raise EngineBuildError(f"SGLang could not build the model: {engine_words(e)}") from None


def tracer(model) -> InOrderTracer:
    """SGLang loads each tensor as it is yielded: a loader call serves the tensor last fed."""
    from sglang.srt.model_loader.weight_utils import default_weight_loader

    return InOrderTracer(model, default_weight_loader)


def load_traced(engine_dir, dtype: str = "auto", device: str | None = None):
    """Build the engine's draft for ENGINE_DIR, fill the NaN sentinel and run its own ``load_weights`` traced.

    ``device``: "cpu" (exact), "meta" (bounded memory: nothing but small tensors is read) or None to choose
    by the checkpoint's size. Returns ``(checkpoint, model_config, model, tracer, fates, load_error)``; the
    loaded model itself is also what the embed-head observation hands to the engine's worker wiring.
    """
    engine_dir = Path(engine_dir)
    ckpt = Checkpoint.open(engine_dir)
    device = device or choose_device(ckpt)
    mc = model_config(engine_dir, dtype)
    model = build_model(mc, device=device)
    traced, fates, load_error = _traced_load(model, ckpt, device)
    return ckpt, mc, model, traced, fates, load_error


def _traced_load(model, ckpt: Checkpoint, device: str):
    """The NaN sentinel (off ``meta``), then the engine's own ``load_weights`` of every checkpoint tensor, traced:
    ``(tracer, fates, load_error)``."""
    if device != "meta":
        fill_sentinel(model)
    traced = tracer(model)
    fates = fates_of(ckpt)
    return traced, fates, traced.load(iter_for_device(ckpt, device), fates)


def observe_load(engine_dir, *, probe_fixes: bool = True, device: str | None = None) -> LoadObservation:
    """Everything the engine's own construction and ``load_weights`` did with the checkpoint in ENGINE_DIR.

    ENGINE_DIR holds the config in the form SGLang reads (see ``contracts.hand_conversion``) and the tensors.
    Raises ``EngineBuildError`` when SGLang refuses the config or cannot build the draft class.
    """
    ckpt, mc, model, traced, fates, load_error = load_traced(engine_dir, device=device)

    head_from_target = bool(getattr(model, "load_lm_head_from_target", False))
    params = []
    for name, p in traced.params.items():
        shared = None
        if name == EMBED_PARAM:
            shared = "set_embed_and_head" if head_from_target else "set_embed"
        elif name == HEAD_PARAM and head_from_target:
            shared = "set_embed_and_head"
        params.append(ParamState(name=name, shape=list(p.shape), dtype=str(p.dtype).removeprefix("torch."),
                                 unwritten_fraction=unwritten_fraction(p, traced.meta_written, name),
                                 shared_from_target=shared))

    hot = getattr(model, "hot_token_id", None)
    observation = LoadObservation(
        engine={"name": "sglang", "version": engine_version()},
        draft_class=type(model).__name__,
        config=config_summary(mc.hf_config, CONFIG_SUMMARY_KEYS),
        model_dtype=str(mc.dtype).removeprefix("torch."),
        tensors=list(fates.values()),
        params=params,
        load_error=load_error,
        hot_token_id=None if hot is None else hot.tolist(),
        hot_token_id_dtype=None if hot is None else str(hot.dtype).removeprefix("torch."),
        is_eagle3_draft=is_eagle3_draft_class(type(model)),
    )
    observation.device = next(p.device.type for p in model.parameters())
    if observation.device == "cpu" and load_error is None and int(getattr(mc.hf_config, "num_hidden_layers", 1)) > 1:
        observation.reads_not_observed = mark_reads(params, model, lambda: _one_forward(model, mc))
    dropped = [f.key for f in fates.values() if f.dropped]
    if probe_fixes and dropped:
        observation.probes = load_tracer.probe_fixes(
            lambda switch: build_model(mc, switch, device=observation.device), tracer, ckpt, dropped,
            observation.device, int(getattr(mc.hf_config, "num_hidden_layers", 1)))
    if probe_fixes and load_error is None and not dropped_keys(fates.values()):
        observation.config_fix = _probe_settings(mc, ckpt, observation)
    return observation


def _one_forward(model, mc):
    """One extend of the loaded draft on zero target hidden states (which modules run, and whether what they read
    reaches the output)."""
    import torch

    from contracts.engines.sglang.cpu_forward import extend_forward

    ids = torch.tensor([1, 5, 9, 22]) % int(mc.hf_config.vocab_size)
    fc = getattr(model.model, "fc", None)
    width = int(fc.in_features) if fc is not None else int(mc.hf_config.hidden_size)
    return extend_forward(model, mc.hf_config, mc.dtype, ids,
                          spec_hidden_states=torch.zeros(len(ids), width, dtype=mc.dtype))


def _probe_settings(mc, ckpt: Checkpoint, observation: LoadObservation) -> dict | None:
    """The one setting under which SGLang builds exactly what the checkpoint holds (``load_tracer.probe_settings``)."""
    shared = {p.name for p in observation.params if p.shared_from_target}

    def load_again(model):
        traced, fates, load_error = _traced_load(model, ckpt, observation.device)
        left = [n for n, p in traced.params.items()
                if n not in shared and unwritten_fraction(p, traced.meta_written, n)]
        return load_error, dropped_keys(fates.values()), left

    return load_tracer.probe_settings(lambda switch: build_model(mc, switch, device=observation.device), load_again, observation)
