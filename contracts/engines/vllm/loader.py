"""Build vLLM's own EAGLE-3 draft for a checkpoint directory and trace its own ``load_weights``.

Contract served: ``key-naming`` / ``tensor-shapes`` / ``d2t-semantics``. vLLM's
``Eagle3LlamaForCausalLM.load_weights`` returns None, so vLLM's own check "Following weights were not
initialized from checkpoint" never runs for EAGLE-3 drafts: a missing ``post_attention_layernorm``,
``embed_tokens`` or ``d2t`` goes unnoticed (the parameter keeps its initial value; ``draft_id_to_target_id``
stays zeros, the identity map), ``fc.bias`` and ``q_proj.bias`` are dropped without a word (its loader ignores
unexpected biases), and a stray ``layers.1.*`` or unknown name raises after a partial load. Nothing here
re-implements that loader: the draft is built by vLLM's ``initialize_model`` from the configs its server makes
(``context.draft_configs``), every float parameter holds a NaN sentinel, every parameter's weight loader is
wrapped to record which checkpoint tensor reached it (vLLM collects all tensors before loading, so a tensor is
known by its object, not by the order it was fed), and the draft->target map is read from the engine's own
``compute_logits``.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from contracts.checkpoint import Checkpoint
from contracts.engines.errors import EngineBuildError, engine_words
from contracts.engines.layer_reads import mark_reads
from contracts.engines import load_tracer
from contracts.engines.load_tracer import ByObjectTracer, config_summary, fates_of
from contracts.engines.tracing import (READ_WHOLE_ELEMENTS, choose_device, fill_sentinel, iter_for_device,
                                       unwritten_fraction)
from contracts.engines.vllm.context import building, current, draft_configs, engine_version, on_device
from contracts.observations import LoadObservation, ParamState, TensorFate
from contracts.renames import dropped_keys

EMBED_PARAM = "model.embed_tokens.weight"
HEAD_PARAM = "lm_head.weight"
MAP_PARAM = "draft_id_to_target_id"

CONFIG_SUMMARY_KEYS = (
    "architectures", "model_type", "hidden_size", "target_hidden_size", "num_hidden_layers", "vocab_size",
    "draft_vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
    "tie_word_embeddings", "eagle_config", "eagle_aux_hidden_state_layer_ids", "num_aux_hidden_states",
    "norm_before_fc", "fc_norm", "norm_output", "norm_before_residual", "attention_bias", "rope_theta",
    "rope_scaling", "rope_parameters", "max_position_embeddings",
)


def is_eagle3_draft_class(cls) -> bool:
    """An EAGLE-3 draft class of vLLM (it combines the target's aux hidden states through ``fc``), not a target
    class such as ``LlamaForCausalLM``, which a draft published under the base architecture dispatches to."""
    return hasattr(cls, "combine_hidden_states") and "Eagle3" in cls.__name__


@contextlib.contextmanager
def overridden(hf_config, overrides: dict | None):
    """The draft's hf_config with ``overrides`` set where vLLM reads them (``eagle_config`` entries first),
    restored afterwards: vLLM's draft classes read their config from the ``VllmConfig`` they are built under."""
    if not overrides:
        yield
        return
    eagle = getattr(hf_config, "eagle_config", None)
    saved_eagle = dict(eagle) if isinstance(eagle, dict) else eagle
    missing = object()
    saved = {}
    for key, value in overrides.items():
        if isinstance(eagle, dict) and key in eagle:
            hf_config.eagle_config = {**hf_config.eagle_config, key: value}
        else:
            saved[key] = getattr(hf_config, key, missing)
            setattr(hf_config, key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is missing:
                delattr(hf_config, key)
            else:
                setattr(hf_config, key, value)
        if isinstance(eagle, dict):
            hf_config.eagle_config = saved_eagle


def build_draft(configs, device: str = "cpu", overrides: dict | None = None, beside_target: bool = False):
    """Construct vLLM's draft class the way its model loader does (registry, default dtype, device). With
    ``beside_target`` the attention layers already registered (the target's, built under the same config) stay
    registered, as in a server, where the draft's layers are numbered after the target's."""
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    mc = configs.draft
    try:
        with overridden(mc.hf_config, overrides), (current if beside_target else building)(configs.vc), \
                set_default_torch_dtype(mc.dtype), on_device(device):
            model = initialize_model(vllm_config=configs.vc, model_config=mc)
    except Exception as e:
        raise EngineBuildError(f"vLLM could not build the model: {engine_words(e)}") from None
    if device == "meta":
        _materialise_small(model)
    return model


def _materialise_small(model) -> None:
    """On ``meta``, give the small parameters (norms, the draft->target map) real storage: they are read whole, so
    their values (and the NaN sentinel) are exact even for a real-size draft."""
    import torch

    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            if p.is_meta and p.numel() <= READ_WHOLE_ELEMENTS:
                # of the parameter's own class (vLLM's fused qkv / gate_up parameters serve ``weight_loader`` as a
                # property of it: a plain Parameter fell back to default_weight_loader, which refused every shard,
                # and tensor-shapes failed a pristine draft whose config made it large)
                real = torch.Tensor._make_subclass(type(p), torch.zeros(p.shape, dtype=p.dtype), p.requires_grad)
                real.__dict__.update(p.__dict__)  # weight_loader and vLLM's parameter attributes
                setattr(module, name, real)


class LoadTracer(ByObjectTracer):
    """vLLM collects every tensor before loading: a loader call serves the tensor object it was given; an error that
    escapes ``load_weights`` is told with the checkpoint keys it names."""

    def __init__(self, model):
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        super().__init__(model, default_weight_loader)

    def describe_error(self, message, fates):
        named = _keys_named_in(message, fates)
        return message[:600] + (f" (raised on {', '.join(named)})" if named else "")


def _keys_named_in(message: str, fates: dict[str, TensorFate]) -> list[str]:
    """The checkpoint keys an engine error names (vLLM: "There is no module or parameter named 'model.layers.1'")."""
    quoted = re.findall(r"named '([^']+)'", message) or re.findall(r"'([\w.]+)'", message)[:1]
    out = []
    for q in quoted:
        stem = q.removeprefix("model.")
        out += [k for k, f in fates.items() if not f.calls and (k.startswith(stem) or k.startswith(q))]
    return sorted(dict.fromkeys(out))[:8]


MAP_BYTES = 32 << 20  # one compute_logits call's [rows, target vocab] float32: at most 64 rows (a 128k vocabulary),
# fewer over a larger one (64 rows of a 2,000,000-token vocabulary and their scatter were 1 GB)


def engine_map(model) -> list[int] | None:
    """The draft id -> target id map as vLLM's own ``compute_logits`` applies it: the draft head's logits are
    replaced by rows of the identity for one call at a time, so row i of the engine's scattered output peaks at
    draft id i's target id (None: the draft keeps the full vocabulary and maps nothing). In blocks of
    draft ids of ``MAP_BYTES`` of logits: the whole identity and its scatter at a real size (32k draft ids over a
    128k-163k vocabulary) would be 20 GB."""
    import torch

    if getattr(model, MAP_PARAM, None) is None:
        return None
    n = int(model.config.draft_vocab_size)

    class RowsOfIdentity(torch.nn.Module):  # stands for the head's logits, rows start.. of the identity
        start = 0

        def forward(self, head, hidden):
            k = hidden.shape[0]
            rows = torch.zeros(k, n, dtype=torch.float32)
            rows[torch.arange(k), torch.arange(self.start, self.start + k)] = 1.0
            return rows

    saved, vocab = model.logits_processor, model.config.vocab_size
    stand_in = model.logits_processor = RowsOfIdentity()
    out: list[int] = []
    try:
        with torch.no_grad():
            step = max(1, min(64, MAP_BYTES // (4 * int(vocab))))
            for start in range(0, n, step):
                stand_in.start, k = start, min(step, n - start)
                try:
                    scattered = model.compute_logits(torch.zeros(k, 1))
                except IndexError:
                    # a target id past the vocabulary: the engine raises at its first draft step (d2t-semantics
                    # reports the ids out of range); its own scatter shows them over a vocabulary wide enough
                    model.config.vocab_size = vocab + n + int(getattr(model, MAP_PARAM).abs().max())
                    scattered = model.compute_logits(torch.zeros(k, 1))
                out += scattered.argmax(dim=-1).tolist()
        return out
    finally:
        model.logits_processor, model.config.vocab_size = saved, vocab


def load_traced(engine_dir, target_dir=None, dtype: str = "auto", device: str | None = None):
    """Build vLLM's draft for ENGINE_DIR (served with TARGET_DIR), fill the NaN sentinel and run its own
    ``load_weights`` traced. Returns ``(checkpoint, configs, model, tracer, fates, load_error)``."""
    engine_dir = Path(engine_dir)
    ckpt = Checkpoint.open(engine_dir)
    device = device or choose_device(ckpt)
    configs = draft_configs(engine_dir, None if target_dir is None else Path(target_dir), dtype)
    model = build_draft(configs, device=device)
    tracer, fates, load_error = _traced_load(model, ckpt, configs, device)
    return ckpt, configs, model, tracer, fates, load_error


def _traced_load(model, ckpt: Checkpoint, configs, device: str):
    """The NaN sentinel, then vLLM's own ``load_weights`` of every checkpoint tensor under its config, traced:
    ``(tracer, fates, load_error)``."""
    fill_sentinel(model)
    tracer = LoadTracer(model)
    fates = fates_of(ckpt)
    with current(configs.vc):
        return tracer, fates, tracer.load(iter_for_device(ckpt, device), fates)


# The step of each runner's wiring that shares the target's tensor into a draft whose checkpoint has none.
SHARED_BY = {"v1": {EMBED_PARAM: "_maybe_share_embeddings", HEAD_PARAM: "_maybe_share_lm_head"},
             "v2": {EMBED_PARAM: "maybe_share_target_embed", HEAD_PARAM: "load_eagle_model"}}


def _param_states(model, tracer, reached: set[str], runner: str = "v1") -> list[ParamState]:
    own = {EMBED_PARAM: bool(getattr(model, "has_own_embed_tokens", False)),
           HEAD_PARAM: bool(getattr(model, "has_own_lm_head", False))}
    params = []
    for name, p in tracer.params.items():
        shared = None
        if name in own and not own[name]:  # the runner's wiring shares the target's (judged by embed-head)
            shared = SHARED_BY[runner][name]
        if p.is_floating_point():
            fraction = unwritten_fraction(p, tracer.meta_written, name)
        else:  # an integer parameter (the draft->target map) has no NaN: written if a loader call reached it
            fraction = 0.0 if name in reached else 1.0
        params.append(ParamState(name=name, shape=list(p.shape), dtype=str(p.dtype).removeprefix("torch."),
                                 unwritten_fraction=fraction, shared_from_target=shared))
    return params


def observe_load(engine_dir, target_dir=None, *, probe_fixes: bool = True, device: str | None = None,
                 runner: str | None = None) -> LoadObservation:
    """Everything vLLM's own construction and ``load_weights`` did with the checkpoint in ENGINE_DIR (the same on
    both runners; ``runner`` names the sharing step that will fill what the checkpoint leaves to the target).

    Raises ``EngineBuildError`` when vLLM refuses the config or cannot build the draft class."""
    from contracts.engines.vllm.cpu_forward import runs_on_cpu
    from contracts.engines.vllm.runners import resolve

    ckpt, configs, model, tracer, fates, load_error = load_traced(engine_dir, target_dir, device=device)
    judged = resolve(configs.vc, runner)
    reached = {c.param for f in fates.values() for c in f.calls if c.error is None}
    hf = configs.draft.hf_config
    hot = engine_map(model) if is_eagle3_draft_class(type(model)) else None
    observation = LoadObservation(
        engine={"name": "vllm", "version": engine_version()},
        draft_class=type(model).__name__,
        config=config_summary(hf, CONFIG_SUMMARY_KEYS),
        model_dtype=str(configs.draft.dtype).removeprefix("torch."),
        tensors=list(fates.values()),
        params=_param_states(model, tracer, reached, judged),
        load_error=load_error,
        hot_token_id=hot,
        hot_token_id_dtype=None if hot is None else str(getattr(model, MAP_PARAM).dtype).removeprefix("torch."),
        is_eagle3_draft=is_eagle3_draft_class(type(model)),
    )
    observation.device = "meta" if any(p.is_meta for p in model.parameters()) else "cpu"
    if load_error is None and int(getattr(hf, "num_hidden_layers", 1)) > 1:
        observation.reads_not_observed = mark_reads(observation.params, model, lambda: _one_forward(model, configs)) \
            if observation.device == "cpu" and runs_on_cpu(hf) else _reads_on_scaled_copy(engine_dir, observation)
    for fate in observation.tensors:
        if fate.key.split(".")[-1] == "d2t" and any(c.param == MAP_PARAM for c in fate.calls):
            fate.side_channel = MAP_PARAM  # vLLM's d2t: draft_id_to_target_id, applied as arange + d2t
    dropped = [f.key for f in fates.values() if f.dropped]
    if probe_fixes and dropped and load_error is None:
        observation.probes = load_tracer.probe_fixes(
            lambda switch: build_draft(configs, device=observation.device, overrides=switch), LoadTracer, ckpt,
            dropped, observation.device, int(getattr(hf, "num_hidden_layers", 1)))
    if probe_fixes and load_error is None and not dropped_keys(fates.values()):
        observation.config_fix = _probe_settings(configs, ckpt, observation, judged)
    return observation


def _reads_on_scaled_copy(engine_dir, observation: LoadObservation) -> str | None:
    """Which layer parameters vLLM's forward reads, observed on a scaled-down copy of the draft's config (same
    class, layer count and switches; seeded weights) where the checkpoint's own cannot run here: a real-size draft
    (built on ``meta``) or a head size vLLM's CPU attention does not take. What the forward reads is a property of
    the engine's code, not of the weights: without it, a second layer's ``hidden_norm`` (built, never read) failed
    key-naming on every real two-layer draft."""
    import json
    import shutil
    import tempfile

    from contracts.engines.scaling import scale_draft
    from contracts.engines.tracing import init_random
    from contracts.engines.vllm.cpu_forward import CPU_HEAD_DIM

    tmp = Path(tempfile.mkdtemp(prefix="eagle3-contracts-vllm-reads-"))
    try:
        flat = json.loads((Path(engine_dir) / "config.json").read_text())
        (tmp / "config.json").write_text(json.dumps(scale_draft(flat, 64, 1024, head_dim=CPU_HEAD_DIM)))
        try:
            configs = draft_configs(tmp, None, "float32")
            model = build_draft(configs)
        except EngineBuildError as e:
            return f"the scaled-down copy could not be built: {e}"
        init_random(model)  # finite before the first forward: vLLM's CPU path repacks weights on first use
        why = mark_reads(observation.params, model, lambda: _one_forward(model, configs))
        if why is None:
            observation.reads_observed_on = (f"a scaled-down copy of the draft config (hidden 64, head_dim "
                                             f"{CPU_HEAD_DIM}) with seeded weights")
        return why
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _one_forward(model, configs):
    """The proposer's step on the loaded draft over zero target hidden states: ``combine_hidden_states`` and one
    prefill (which modules run, and whether what they read reaches the output)."""
    import torch

    from contracts.engines.vllm.cpu_forward import finish_loading, kernels_missing, one_request

    missing = kernels_missing()
    if missing:
        raise RuntimeError(missing)
    finish_loading(model, configs.draft)
    ids = torch.tensor([1, 5, 9, 22]) % int(configs.draft.get_vocab_size())
    fc = getattr(model.model, "fc", None)
    width = int(fc.input_size) if fc is not None else int(configs.draft.get_hidden_size())
    with one_request(configs.vc, len(ids)):
        combined = model.combine_hidden_states(torch.zeros(len(ids), width, dtype=configs.draft.dtype))
        return model(ids, torch.arange(len(ids)), combined)


def _probe_settings(configs, ckpt: Checkpoint, observation: LoadObservation, runner: str) -> dict | None:
    """The one setting under which vLLM builds exactly what the checkpoint holds (``load_tracer.probe_settings``)."""

    def load_again(model):
        tracer, fates, load_error = _traced_load(model, ckpt, configs, observation.device)
        written = {c.param for f in fates.values() for c in f.calls if c.error is None}
        left = [p.name for p in _param_states(model, tracer, written, runner)
                if p.unwritten_fraction and not p.shared_from_target]
        return load_error, dropped_keys(fates.values()), left

    return load_tracer.probe_settings(
        lambda switch: build_draft(configs, device=observation.device, overrides=switch), load_again, observation)
