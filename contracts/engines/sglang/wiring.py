"""Run SGLang's own worker wiring of an EAGLE-3 draft to its target on a CPU and report which embedding and
which head the draft holds afterwards.

Contract served: ``embed-head``. The wiring replayed is the one of the worker the release constructs by default
(``workers.default_worker``): ``EAGLEWorkerV2``'s, or ``EAGLEWorker``'s inline statements. In 0.5.23
``EagleDraftWorker.init_lm_head`` shares the target's embedding
into the draft (``set_embed``) and, when the draft config has no ``draft_vocab_size``, the target's head too
(``set_embed_and_head``), replacing a trained head; ``set_embed`` returns without a word when
``target_hidden_size != hidden_size``, leaving a draft without ``embed_tokens`` on a random embedding.
Nothing is re-implemented: the draft is the one ``loader.load_traced`` built and loaded (NaN sentinel), the
target is SGLang's own class for the target config (``ModelConfig`` + ``_initialize_model``), built on the
``meta`` device with only its embedding and head given storage and loaded by its own ``load_weights`` (the
wiring touches nothing else, so memory stays bounded on real targets), and the engine's unbound
``init_token_map`` / ``init_lm_head`` run on a stand-in worker that holds the two models.
"""

from __future__ import annotations

import types
from pathlib import Path

from contracts.checkpoint import Checkpoint
from contracts.engines.sglang.context import engine_version, ensure_context
from contracts.engines.errors import EngineBuildError, ReplayError, TargetBuildError, raised_by_engine
from contracts.engines.sglang.loader import EMBED_PARAM, HEAD_PARAM, build_model, load_traced, tracer
from contracts.engines.held_tensors import held, load_on_meta, materialise, vocab_on_meta
from contracts.observations import TensorFate
from contracts.observations_wiring import WiringObservation

TARGET_KEY_SUFFIXES = ("embed_tokens.weight", "lm_head.weight")
TRACED_DRAFT_METHODS = ("set_embed", "set_embed_and_head", "set_lm_head_from_target")


def build_target(target_dir: Path, dtype: str = "auto"):
    """The target as SGLang builds it (``is_draft_model=False``), on ``meta``; returns ``(model, model_config)``."""
    ensure_context()
    from sglang.srt.configs.model_config import ModelConfig

    try:
        mc = ModelConfig(str(target_dir), is_draft_model=False, trust_remote_code=False, dtype=dtype)
    except Exception as e:
        raise TargetBuildError(f"SGLang's ModelConfig rejected the target config: {type(e).__name__}: {e}") from None
    try:
        return build_model(mc, device="meta"), mc
    except EngineBuildError as e:
        raise TargetBuildError(str(e).replace("the model", "the target model")) from None


def _vocab_params(target) -> set:
    """The target's embedding and head: the engine's own accessor (what the wiring will share), or, for a target
    class without one (0.5.9's KimiK25ForConditionalGeneration; the wiring then raises), its parameters named so."""
    if hasattr(target, "get_embed_and_head"):
        return set(target.get_embed_and_head())
    return {p for n, p in target.named_parameters() if n.endswith(TARGET_KEY_SUFFIXES)}


def _load_target_vocab_tensors(target, target_dir: Path) -> tuple[bool, dict, str | None, dict]:
    """Feed the target's embedding/head tensors (only) through the target's own ``load_weights``.

    Returns (has weights, file key -> target parameters it reached, the load's error, and, for a target loaded on
    ``meta``, target parameter -> the file tensor whose values it holds). Above ``held_tensors.META_VOCAB_BYTES`` the load is
    traced on ``meta`` (the copy regions SGLang's weight loaders write, counted; no values), and the wiring is
    handed storage-free stand-ins (``held_tensors.stand_in``): SGLang's wiring moves parameter objects and never
    reads their values, and a parameter its loader wrote whole from one file tensor holds that tensor's values."""
    ckpt = Checkpoint.open(target_dir, require_weights=False, role="target")
    if not ckpt.has_weights:
        return False, {}, None, {}
    keys = [k for k in ckpt.tensors if k.endswith(TARGET_KEY_SUFFIXES)]
    fates = {k: TensorFate(key=k, shape=list(ckpt.tensors[k].shape), dtype=ckpt.tensors[k].dtype) for k in keys}
    vocab = _vocab_params(target)
    if not vocab_on_meta(ckpt, keys):
        for p in vocab:
            materialise(target, p)
        error = tracer(target).load(((k, ckpt.load_tensor(k)) for k in keys), fates)
        return True, {k: f.reached for k, f in fates.items()}, error, {}
    error, from_file = load_on_meta(tracer(target), ckpt, keys, fates)
    for p in vocab:
        materialise(target, p, lazily=True)
    return True, {k: f.reached for k, f in fates.items()}, error, from_file


def wire(engine_dir, target_dir, dtype: str = "auto") -> types.SimpleNamespace:
    """Load the draft in ENGINE_DIR and run SGLang's worker wiring to the target in TARGET_DIR.

    Returns the live objects (draft, target, their model configs, the stand-in worker, the load trace, the
    wiring calls and any error the engine raised); ``observe_embed_head`` reports on them and the
    forward-parity replay runs the wired draft.
    """
    import torch

    _, mc, draft, tracer, fates, _ = load_traced(engine_dir, dtype)
    target, target_mc = build_target(Path(target_dir), dtype)
    has_weights, target_loaded, target_error, target_from_file = _load_target_vocab_tensors(target, Path(target_dir))

    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from contracts.engines.sglang.shims import (cuda_synchronize_is_a_no_op, fast_topk_stand_in,
                                                import_with_kernel_stand_in)

    fast_topk_stand_in()  # (0.5.3-0.5.4.post1: eagle_worker_v2's CUDA-graph runner imports it)
    v2 = import_with_kernel_stand_in("sglang.srt.speculative.eagle_worker_v2", optional=True)

    own_embed, own_head = draft.get_parameter(EMBED_PARAM), draft.get_parameter(HEAD_PARAM)
    calls: list[str] = []
    for method in TRACED_DRAFT_METHODS:  # record which branch the worker takes (instance attrs, removed below)
        original = getattr(draft, method, None)
        if original is not None:
            def traced(*args, _m=method, _f=original, **kwargs):
                calls.append(_m)
                return _f(*args, **kwargs)
            setattr(draft, method, traced)

    # The stand-in worker: only what init_token_map / init_lm_head / _resolve_shared_embed_and_head read.
    worker = types.SimpleNamespace(
        # the target worker's runner: `.model` (get_embed_and_head, lm_head), `.model_config.model_path`/
        # `.revision` and `.load_config` (read only when the target's embedding lives on another PP stage)
        target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(
            model=target, model_config=target_mc, load_config=LoadConfig())),
        # the draft worker's runner: `.model` is the draft loaded above (0.5.3 calls it draft_model_runner)
        draft_runner=types.SimpleNamespace(model=draft),
        draft_model_runner=types.SimpleNamespace(model=draft),
        # set by the worker's constructor from --speculative-algorithm EAGLE3
        speculative_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
        # read by 0.5.9's init_token_map: --speculative-token-map's default (EAGLE-3 ignores it anyway)
        server_args=types.SimpleNamespace(speculative_token_map=None),
    )
    from contracts.engines.sglang.workers import V1_WORKER, default_worker

    worker_cls, _ = default_worker(Path(engine_dir), Path(target_dir))
    # The default worker's wiring: EAGLEWorkerV2's draft worker, or EAGLEWorker's inline statements (0.5.3.post2/
    # .post3 ship eagle_worker_v2 without EagleDraftWorker: their EAGLE-3 wiring is the inline one too).
    inline = worker_cls == V1_WORKER or not hasattr(v2, "EagleDraftWorker")
    error, wiring = None, INLINE_WIRING if inline else "EagleDraftWorker.init_lm_head"
    with torch.no_grad(), cuda_synchronize_is_a_no_op():
        try:
            if not inline:
                EagleDraftWorker = v2.EagleDraftWorker
                if hasattr(EagleDraftWorker, "_resolve_shared_embed_and_head"):  # 0.5.23's init_lm_head calls it
                    worker._resolve_shared_embed_and_head = types.MethodType(
                        EagleDraftWorker._resolve_shared_embed_and_head, worker)
                EagleDraftWorker.init_token_map(worker)  # the engine's own: hot_token_id (None for EAGLE-3)
                EagleDraftWorker.init_lm_head(worker)
            else:
                _wire_inline(worker)
        except Exception as e:  # the engine's own refusal is the observation; a failure of the replay is not
            if not raised_by_engine(e, "sglang"):
                raise ReplayError(f"this suite's replay of SGLang's {wiring} failed on SGLang {engine_version()}: "
                                  f"{type(e).__name__}: {e}") from None
            error = f"{type(e).__name__}: {e}"
        finally:
            for method in TRACED_DRAFT_METHODS:
                draft.__dict__.pop(method, None)

    return types.SimpleNamespace(mc=mc, draft=draft, tracer=tracer, fates=fates, target=target,
                                 target_mc=target_mc, has_weights=has_weights, target_loaded=target_loaded,
                                 target_error=target_error, target_from_file=target_from_file, worker=worker,
                                 calls=calls, error=error,
                                 own_embed=own_embed, own_head=own_head, wiring=wiring)


INLINE_WIRING = "EAGLEWorker.__init__ (its embed/head statements)"


def _wire_inline(worker) -> None:
    """``EAGLEWorker`` (0.5.3's only worker, the default one of releases that run EAGLE-3 without the overlap
    scheduler): the same wiring, inline in ``EAGLEWorker.__init__``: its hot-token-map statement, then its
    statements from ``get_embed_and_head()`` through the ``set_embed`` branch (the draft worker's own
    construction between them is not run: the stand-in already holds the loaded draft)."""
    import ast

    from contracts.engines.sglang.compat import run_method_statements
    from contracts.engines.sglang.shims import import_eagle_worker_v1

    worker_cls = import_eagle_worker_v1().EAGLEWorker

    def says(*words):
        return lambda node: all(w in ast.unparse(node) for w in words)

    token_map = says("speculative_token_map", "hot_token_id")
    run_method_statements(worker_cls, "__init__", token_map, token_map,
                          {"self": worker, "server_args": worker.server_args})
    run_method_statements(worker_cls, "__init__", says("get_embed_and_head()"),
                          lambda node: isinstance(node, ast.If) and "set_embed" in ast.unparse(node),
                          {"self": worker})


def observe_embed_head(engine_dir, target_dir) -> WiringObservation:
    """What the draft in ENGINE_DIR holds after SGLang's worker wiring to the target in TARGET_DIR."""
    w = wire(engine_dir, target_dir)
    mc, draft, tracer, fates, target, target_mc = w.mc, w.draft, w.tracer, w.fates, w.target, w.target_mc
    has_weights, target_loaded, target_error = w.has_weights, w.target_loaded, w.target_error
    worker, calls, error, own_embed, own_head = w.worker, w.calls, w.error, w.own_embed, w.own_head

    names = {id(p): f"target:{n}" for n, p in target.named_parameters(remove_duplicate=False)}
    names.setdefault(id(own_embed), f"draft:{EMBED_PARAM}")
    written: dict = {}
    for fate in fates.values():
        for call in fate.calls:
            if call.error is None:
                written.setdefault(id(tracer.params[call.param]), []).append(fate.key)
    target_params = dict(target.named_parameters())
    for key, params in target_loaded.items():
        for p in params:
            written.setdefault(id(target_params[p]), []).append(key)

    cfg, tcfg = mc.hf_config, target_mc.hf_config
    hot = getattr(worker, "hot_token_id", None)
    from_file = {id(target_params[n]): where for n, where in w.target_from_file.items() if n in target_params}
    return WiringObservation(
        engine={"name": "sglang", "version": engine_version()},
        wiring=w.wiring,
        calls=calls,
        load_lm_head_from_target=bool(getattr(draft, "load_lm_head_from_target", False)),
        tied=draft.lm_head is draft.model.embed_tokens,
        draft={"hidden_size": cfg.hidden_size, "has_target_hidden_size": hasattr(cfg, "target_hidden_size"),
               "target_hidden_size": getattr(cfg, "target_hidden_size", None), "vocab_size": cfg.vocab_size,
               "draft_vocab_size": getattr(cfg, "draft_vocab_size", None),
               "tie_word_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
               "model_dtype": str(mc.dtype).removeprefix("torch.")},
        target={"class": type(target).__name__, "dtype": str(target_mc.dtype).removeprefix("torch."),
                "hidden_size": getattr(tcfg, "hidden_size", None), "vocab_size": getattr(tcfg, "vocab_size", None),
                "tie_word_embeddings": bool(getattr(tcfg, "tie_word_embeddings", False)),
                "has_weights": has_weights, "loaded": target_loaded, "load_error": target_error},
        embed=held(EMBED_PARAM, draft.get_parameter(EMBED_PARAM), own_embed, names, written, (target, draft),
                   from_file),
        head=held(HEAD_PARAM, draft.get_parameter(HEAD_PARAM), own_head, names, written, (target, draft), from_file),
        hot_token_id_len=None if hot is None else int(hot.shape[0]),
        error=error,
    )
