"""Run vLLM's own EAGLE proposer wiring of a draft to its target on a CPU and report which embedding and which
head the draft holds afterwards.

Contract served: ``embed-head``. Model Runner V1's ``EagleProposer.load_model`` shares the target's
``embed_tokens`` into a draft whose checkpoint has none (or an identical one), unless the widths differ, and the
target's ``lm_head`` into a draft whose checkpoint has no ``lm_head`` (or an identical one) — a full-vocabulary head
under a draft that declares a reduced ``draft_vocab_size``. Before vllm#28549 it replaced trained heads too (accept
length 1.32, 2.49 once fixed). Model Runner V2 (a GPU server's default) does the same in its speculator's
``load_eagle_model`` (``maybe_share_target_embed``, then the head), without V1's width check. Nothing is
re-implemented: V1's real ``EagleProposer``, or V2's real runner and speculator, are constructed from the server's
``VllmConfig`` and handed the draft that ``loader.load_traced`` built and loaded (NaN sentinel), and their own
``load_model(target)`` runs. The target is vLLM's own class for the target config, built
on ``meta`` with only its embedding and head given storage and loaded by its own ``load_weights``.
"""

from __future__ import annotations

import contextlib
import json
import types
from pathlib import Path

from contracts.checkpoint import Checkpoint
from contracts.engines.errors import EngineBuildError, ReplayError, TargetBuildError, raised_by_engine
from contracts.engines.held_tensors import held, load_on_meta, materialise, stand_in, vocab_on_meta
from contracts.engines.scaling import estimated_elements
from contracts.engines.vllm.context import engine_version, on_device
from contracts.engines.vllm.loader import EMBED_PARAM, HEAD_PARAM, LoadTracer, engine_map, load_traced
from contracts.observations import TensorFate
from contracts.observations_wiring import WiringObservation

TARGET_KEY_SUFFIXES = ("embed_tokens.weight", "lm_head.weight")
SMALL_TARGET_ELEMENTS = 50_000_000  # a target that cannot be built on meta is built on CPU up to this size
SHARING_STEPS = ("_maybe_share_embeddings", "_maybe_share_lm_head")


def build_target(configs, device: str = "meta"):
    """The target as vLLM builds it from the server's config (its language model's vocabulary tensors are what
    the proposer shares)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    if configs.target_note is not None:
        raise TargetBuildError(f"vLLM cannot build the target: {configs.target_note}")
    mc = configs.target
    try:
        with set_current_vllm_config(configs.vc), set_default_torch_dtype(mc.dtype), on_device(device):
            return initialize_model(vllm_config=configs.vc, model_config=mc)
    except Exception as e:
        # A class that moves a part to a device while it is built (vLLM's Kimi-K2.5 moves its vision tower) cannot
        # be built on meta; on CPU only when that is bounded (a small target such as the bundled scaled-down one).
        error = f"vLLM could not build the target model: {type(e).__name__}: {e}"
        if device != "meta":
            raise TargetBuildError(error) from None
        size = estimated_elements(json.loads(Path(mc.model, "config.json").read_text()))
        if size > SMALL_TARGET_ELEMENTS:
            if "meta" in str(e):  # the meta device's limit, not vLLM refusing the target: ours to say
                raise ReplayError(f"vLLM's {type(e).__name__} building this target class on the meta device "
                                  f"({str(e)[:160]}); built on CPU instead it would hold about {size / 1e9:.1f} B "
                                  f"parameters, so this suite does not replay the embed/head wiring for a real-size "
                                  f"target of this class") from None
            raise TargetBuildError(error) from None
    try:
        with set_current_vllm_config(configs.vc), set_default_torch_dtype(mc.dtype), on_device("cpu"):
            return initialize_model(vllm_config=configs.vc, model_config=mc)
    except Exception as e:
        raise TargetBuildError(f"vLLM could not build the target model: {type(e).__name__}: {e}") from None


def _vocab_params(target) -> list:
    return [p for n, p in target.named_parameters() if n.endswith(TARGET_KEY_SUFFIXES)]


def _load_target_vocab_tensors(target, target_dir: Path) -> tuple[bool, dict, str | None, dict]:
    """Feed the target's embedding/head tensors (only) through the target's own ``load_weights``. A target given
    as its config alone has nothing to load: its vocabulary tensors are NaN stand-ins without storage. Above
    ``held_tensors.META_VOCAB_BYTES`` the load is traced on ``meta`` (the copy regions vLLM's weight loaders write,
    counted) and the tensors become stand-ins too; the last element returned maps each target parameter the loader
    wrote whole from one file tensor to that tensor (its values, for the fingerprint and the wiring's comparisons)."""
    import torch

    ckpt = Checkpoint.open(target_dir, require_weights=False, role="target")
    keys = [k for k in ckpt.tensors if k.endswith(TARGET_KEY_SUFFIXES)] if ckpt.has_weights else []
    fates = {k: TensorFate(key=k, shape=list(ckpt.tensors[k].shape), dtype=ckpt.tensors[k].dtype) for k in keys}
    if vocab_on_meta(ckpt, keys) and all(p.is_meta for p in _vocab_params(target)):
        error, from_file = load_on_meta(LoadTracer(target), ckpt, keys, fates)
        for p in _vocab_params(target):
            materialise(target, p, lazily=True)
        return True, {k: f.reached for k, f in fates.items()}, error, from_file
    for p in _vocab_params(target):
        if p.is_meta:
            materialise(target, p, lazily=not ckpt.has_weights)
        else:  # a target built on CPU: the same sentinel, so what the target's files never wrote shows
            with torch.no_grad():
                p.fill_(float("nan"))
    if not ckpt.has_weights:
        return False, {}, None, {}
    error = LoadTracer(target).load(((k, ckpt.load_tensor(k)) for k in keys), fates)
    return True, {k: f.reached for k, f in fates.items()}, error, {}


def _equal_by_file(draft, ckpt, fates, target, target_from_file: dict) -> dict:
    """For a target loaded on ``meta``: a constant for each vocabulary tensor of the draft and of the target, equal
    exactly where their file tensors are equal in the parameter's dtype (streamed side by side,
    ``fingerprint.compare_file_tensors``), and the target's stand-ins given theirs. vLLM's sharing steps then
    compare (``torch.equal``) stand-ins that agree as the loaded tensors would: its code still takes the decision.
    Returns draft parameter name -> its constant (a draft tensor no file wrote whole keeps the NaN that equals
    nothing)."""
    from contracts.fingerprint import compare_file_tensors, files_equal

    target_params = dict(target.named_parameters(remove_duplicate=False))
    files = {("target", n): where for n, where in target_from_file.items() if n in target_params}
    for name in (EMBED_PARAM, HEAD_PARAM):
        keys = [f.key for f in fates.values() for c in f.calls if c.param == name and c.error is None]
        if len(keys) == 1:
            files[("draft", name)] = (ckpt.path / ckpt.tensors[keys[0]].file, keys[0])
    shape = {who: tuple((target_params[who[1]] if who[0] == "target" else draft.get_parameter(who[1])).shape)
             for who in files}
    dtype = str(next(iter(target_params.values())).dtype).removeprefix("torch.")
    value: dict = {}
    for who in files:  # equal file tensors share a constant (equality is transitive: one comparison per class)
        same = next((other for other in value if shape[other] == shape[who] and
                     files_equal(compare_file_tensors(files[other], files[who], dtype))), None)
        value[who] = value[same] if same is not None else float(len(set(value.values())))
    replaced: dict = {}  # one stand-in per target parameter object (a tied target keeps one object in both places)
    for n, param in target_params.items():
        if ("target", n) in value and id(param) not in replaced:
            replaced[id(param)] = stand_in(param, value[("target", n)])
    for module in target.modules():
        weight = getattr(module, "weight", None)
        if weight is not None and id(weight) in replaced:
            module.weight = replaced[id(weight)]
    return {n: v for (side, n), v in value.items() if side == "draft"}


@contextlib.contextmanager
def readable_draft_vocab(draft, target, ckpt, fates, target_has_weights: bool, by_file: dict | None = None):
    """For the wiring only, give a draft built on ``meta`` vocabulary tensors vLLM's sharing steps can read: they
    compare them with the target's by value (``torch.equal(target.weight.cpu(), draft.weight.cpu())``), which a
    meta tensor cannot answer ("Cannot copy out of meta tensor": a wiring failure of our making, not vLLM's).
    Where that comparison can come out true (a target with weights, a tensor of the same shape) the draft's tensor
    gets its checkpoint values through vLLM's own ``load_weights``; everywhere else it cannot (shapes differ, or
    the target's are never-written NaN), so a storage-free NaN stand-in gives vLLM the same answer. The meta
    parameters are put back afterwards wherever the draft still holds a substitute, so the evidence is recorded
    on the parameters the load traced. BY_FILE (a target loaded on ``meta``, ``_equal_by_file``): the draft's
    tensors are stand-ins whose constants compare with the target's as the file tensors do, never loaded."""
    target_shapes = {tuple(p.shape) for p in _vocab_params(target) if not p.is_meta}
    swapped, seen = [], set()
    for name, module in ((EMBED_PARAM, draft.model.embed_tokens), (HEAD_PARAM, draft.lm_head)):
        p = module.weight
        if (not p.is_meta and by_file is None) or id(module) in seen:
            continue
        seen.add(id(module))
        compared = target_has_weights and tuple(p.shape) in target_shapes and by_file is None
        if by_file is not None:
            module.weight = stand_in(p, by_file.get(name, float("nan")))
        elif compared:
            materialise(draft, p)
        else:
            module.weight = stand_in(p)
        swapped.append((module, p, module.weight))
        if compared:
            keys = [f.key for f in fates.values() for c in f.calls if c.param == name and c.error is None]
            draft.load_weights((k, ckpt.load_tensor(k)) for k in keys)
    try:
        yield
    finally:
        for module, original, substitute in swapped:
            if module.weight is substitute:
                module.weight = original


def wire(engine_dir, target_dir, dtype: str = "auto", runner: str | None = None) -> types.SimpleNamespace:
    """Load the draft in ENGINE_DIR and run the wiring of the runner judged (None: the GPU default) to the target in
    TARGET_DIR: V1's ``EagleProposer.load_model``, V2's speculator ``load_model`` (``load_eagle_model``). The live
    objects (``observe_embed_head`` reports on them; the forward-parity replay runs the wired draft)."""
    import torch
    from vllm.config import set_current_vllm_config

    from contracts.engines.vllm.runners import LABEL, resolve

    ckpt, configs, draft, tracer, fates, _ = load_traced(engine_dir, target_dir, dtype)
    judged = resolve(configs.vc, runner)
    target = build_target(configs)
    has_weights, target_loaded, target_error, target_from_file = _load_target_vocab_tensors(target, Path(target_dir))
    by_file = _equal_by_file(draft, ckpt, fates, target, target_from_file) if target_from_file else None
    own_embed, own_head = draft.get_parameter(EMBED_PARAM), draft.get_parameter(HEAD_PARAM)
    error: str | None = None
    calls: list = []
    replay = WIRING[judged]
    with set_current_vllm_config(configs.vc), torch.no_grad():
        try:
            with readable_draft_vocab(draft, target, ckpt, fates, has_weights, by_file):
                draft = replay.run(configs, draft, target, calls)
        except Exception as e:  # the engine's own refusal is the observation; a failure of the replay is not
            if not raised_by_engine(e, "vllm"):
                raise ReplayError(f"this suite's replay of vLLM {engine_version()}'s {replay.name} ({LABEL[judged]}) "
                                  f"failed: {type(e).__name__}: {e}") from None
            error = f"{type(e).__name__}: {e}"
    return types.SimpleNamespace(configs=configs, draft=draft, tracer=tracer, fates=fates, target=target,
                                 has_weights=has_weights, target_loaded=target_loaded, target_error=target_error,
                                 target_from_file=target_from_file,
                                 calls=calls, error=error, own_embed=own_embed, own_head=own_head, runner=judged,
                                 wiring=replay.name)


def _v1_wiring(configs, draft, target, calls: list):
    """V1: a real ``EagleProposer``, its ``_get_model`` handing it the traced draft, its own ``load_model(target)``;
    the sharing steps that replaced a draft tensor are recorded."""
    import torch
    from vllm.v1.spec_decode.eagle import EagleProposer

    proposer = EagleProposer(configs.vc, torch.device("cpu"), runner=None)
    proposer._get_model = lambda: draft  # the draft loaded (and traced) above, instead of a second load
    for step in SHARING_STEPS:  # which sharing steps replaced a draft tensor
        original = getattr(proposer, step)

        def traced(target_lm, _step=step, _f=original):
            before = (draft.model.embed_tokens, draft.lm_head)
            _f(target_lm)
            if (draft.model.embed_tokens, draft.lm_head) != before:
                calls.append(_step)
        setattr(proposer, step, traced)
    proposer.load_model(target)
    return draft


def _v2_wiring(configs, draft, target, calls: list):
    """V2: vLLM's own V2 CPU runner builds its speculator (``init_speculator``); the speculator's ``load_model(target)``
    runs ``load_eagle_model``, whose ``get_model`` hands back the traced draft; which tensors its sharing
    (``maybe_share_target_embed``, the ``lm_head`` step) replaced is recorded."""
    from contracts.engines.vllm.runners import draft_model_is, v2_runner

    runner = v2_runner(configs.vc)
    before = (draft.model.embed_tokens, draft.lm_head)
    with draft_model_is(draft):
        runner.speculator.load_model(target)
    wired = runner.speculator.model
    if wired.model.embed_tokens is not before[0]:
        calls.append(V2_STEPS[0])
    if wired.lm_head is not before[1]:
        calls.append(V2_STEPS[1])
    return wired


V2_STEPS = ("maybe_share_target_embed", "load_eagle_model")  # V2's embedding step, and the head step inside it
WIRING = {"v1": types.SimpleNamespace(name="EagleProposer.load_model", run=_v1_wiring),
          "v2": types.SimpleNamespace(name="EagleSpeculator.load_model (load_eagle_model; the Model Runner V2 "
                                           "functions that decide, none of its Triton-only kernels)", run=_v2_wiring)}


def observe_embed_head(engine_dir, target_dir, runner: str | None = None) -> WiringObservation:
    """What the draft in ENGINE_DIR holds after vLLM's wiring to the target in TARGET_DIR (on the runner judged)."""
    w = wire(engine_dir, target_dir, runner=runner)
    draft, target, tracer, fates = w.draft, w.target, w.tracer, w.fates
    names = {id(p): f"target:{n}" for n, p in target.named_parameters(remove_duplicate=False)}
    names.setdefault(id(w.own_embed), f"draft:{EMBED_PARAM}")
    written: dict = {}
    for fate in fates.values():
        for call in fate.calls:
            if call.error is None:
                written.setdefault(id(tracer.params[call.param]), []).append(fate.key)
    target_params = dict(target.named_parameters())
    for key, params in w.target_loaded.items():
        for p in params:
            written.setdefault(id(target_params[p]), []).append(key)
    cfg, tcfg = w.configs.draft.hf_config, w.configs.target.hf_config.get_text_config()
    embed, head = draft.model.embed_tokens.weight, draft.lm_head.weight
    from_file = {id(target_params[n]): where for n, where in w.target_from_file.items() if n in target_params}
    hot = None
    try:
        hot = engine_map(draft)
    except Exception:  # noqa: BLE001  (a head shared from the target no longer fits the map: judged by embed-head)
        pass
    return WiringObservation(
        engine={"name": "vllm", "version": engine_version()},
        wiring=w.wiring,
        runner=w.runner,
        calls=w.calls,
        load_lm_head_from_target=not bool(getattr(draft, "has_own_lm_head", False)),
        tied=draft.lm_head is draft.model.embed_tokens,
        draft={"hidden_size": cfg.hidden_size, "has_target_hidden_size": hasattr(cfg, "target_hidden_size"),
               "target_hidden_size": getattr(cfg, "target_hidden_size", None), "vocab_size": cfg.vocab_size,
               "draft_vocab_size": getattr(cfg, "draft_vocab_size", None),
               "tie_word_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
               "model_dtype": str(w.configs.draft.dtype).removeprefix("torch.")},
        target={"class": type(target).__name__, "dtype": str(w.configs.target.dtype).removeprefix("torch."),
                "hidden_size": getattr(tcfg, "hidden_size", None), "vocab_size": getattr(tcfg, "vocab_size", None),
                "tie_word_embeddings": bool(getattr(tcfg, "tie_word_embeddings", False)),
                "has_weights": w.has_weights, "loaded": w.target_loaded, "load_error": w.target_error},
        embed=held(EMBED_PARAM, embed, w.own_embed, names, written, (target, draft), from_file),
        head=held(HEAD_PARAM, head, w.own_head, names, written, (target, draft), from_file),
        hot_token_id_len=None if hot is None else len(hot),
        error=w.error,
    )


__all__ = ["EngineBuildError", "TargetBuildError", "build_target", "observe_embed_head", "wire"]
