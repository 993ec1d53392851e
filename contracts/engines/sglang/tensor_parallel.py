"""What SGLang builds, rank by rank, as an EAGLE-3 draft's embedding and head under tensor parallelism, on a CPU.

Contract served: ``rank-consistency``. Each rank runs the wiring of the release's default speculative worker
(``contracts.engines.sglang.wiring.wire``: the draft loaded by its own loader, the target's vocabulary tensors by the
target's, then ``EagleDraftWorker.init_lm_head``) inside a TP-rank gloo world (``context.ensure_context(tp, rank)``:
the published ``ServerArgs(tp_size=N)`` and SGLang's own model-parallel groups). What the ranks serve together is
read through the modules: the draft embedding's own forward over every target token id (its masked lookup and
all-reduce), and the head's shards gathered in rank order. A drafter whose ``set_embed`` hands it the target's
embedding shard while its own ``VocabParallelEmbedding`` ranges come from another vocabulary size (a draft config
whose ``vocab_size`` is smaller than the target's) serves shifted rows and zeros at TP=2, and the right rows at TP=1.
"""

from __future__ import annotations

from pathlib import Path

WIRING = "EagleDraftWorker.init_lm_head (set_embed / set_embed_and_head), in each rank"


def _rows(layer) -> list[int]:
    indices = layer.shard_indices
    return [int(indices.org_vocab_start_index), int(indices.org_vocab_end_index)]


def _holding(model, param):
    """The module of MODEL whose ``weight`` is PARAM (the target's embedding / head, wherever its class keeps them)."""
    return next(m for m in model.modules() if getattr(m, "weight", None) is param)


def _wired(w):
    """The wiring, or the engine's own refusal of it raised (``wire`` keeps it as an observation)."""
    if w.error is not None:
        from contracts.engines.errors import EngineBuildError

        raise EngineBuildError(f"SGLang's {w.wiring} raised: {w.error}")
    return w


def rank_entry(rank: int, tp: int, rendezvous: str, payload: dict) -> dict:
    """One rank: SGLang's TP-rank context, then each draft wired to the target by the release's own worker code."""
    import torch

    torch.set_num_threads(1)
    from contracts.engines.ranks import agreed, differences, fingerprint_of, gathered, shard_digest
    from contracts.engines.sglang import context
    from contracts.engines.sglang.aux_capture import _resolve_aux_config
    from contracts.engines.sglang.loader import EMBED_PARAM, HEAD_PARAM
    from contracts.engines.sglang.wiring import _vocab_params, wire

    context.ensure_context(tp=tp, rank=rank, init_method=f"file://{rendezvous}")
    seen: dict[str, dict] = {}
    for draft in payload["drafts"]:
        w, failed = agreed(lambda: _wired(wire(draft, payload["target"])), "sglang")  # noqa: B023  (called at once)
        if failed:
            seen[draft] = {"failed": failed}
            continue
        target_embed, target_head = w.target.get_embed_and_head()
        target_params = {id(p) for p in _vocab_params(w.target)}
        embed_module, head_module = w.draft.model.embed_tokens, w.draft.lm_head
        vocab = int(w.target_mc.hf_config.vocab_size)
        with torch.no_grad():
            served_embed = embed_module(torch.arange(vocab))  # its own forward: the masked lookup and all-reduce
            head_rows = _rows(head_module)
            served_head = gathered(head_module.weight[: head_rows[1] - head_rows[0]])
        _, aux = _resolve_aux_config(Path(draft), w.target_mc)
        seen[draft] = {
            "embed": {"decision": "shared" if id(w.draft.get_parameter(EMBED_PARAM)) in target_params else "kept",
                      "rows": _rows(embed_module), "target_rows": _rows(_holding(w.target, target_embed)),
                      "shard": shard_digest(embed_module, _rows(embed_module)),
                      "served": fingerprint_of(served_embed, str(served_embed.dtype).removeprefix("torch."))},
            "lm_head": {"decision": "shared" if id(w.draft.get_parameter(HEAD_PARAM)) in target_params else "kept",
                        "rows": head_rows, "target_rows": _rows(_holding(w.target, target_head)),
                        "shard": shard_digest(head_module, head_rows),
                        "served": fingerprint_of(served_head, str(served_head.dtype).removeprefix("torch."))},
            "aux_layer_ids": None if aux is None else list(aux),
        }
        if rank == 0:  # (every rank serves the same rows together: one compares them with the files)
            for role, served in (("embed", served_embed), ("lm_head", served_head)):
                seen[draft][role]["differs"] = differences(served, Path(draft), Path(payload["target"]), role)
        del w
    return {"rank": rank, "drafts": seen}


def observe_ranks(engine_dirs, target_dir, tp: int, runner: str | None = None) -> list:
    """A ``RankObservation`` per draft in ENGINE_DIRS: its drafter as each of TP ranks of SGLang builds it, beside the
    two candidates each role can serve (RUNNER: unused, SGLang judges its release's default worker)."""
    from contracts.engines.ranks import observations_of, run_ranks
    from contracts.engines.sglang.context import engine_version

    drafts = [str(Path(d).resolve()) for d in engine_dirs]
    target = str(Path(target_dir).resolve())
    records, seconds = run_ranks("contracts.engines.sglang.tensor_parallel:rank_entry", tp,
                                 {"engine": "sglang", "target": target, "drafts": drafts})
    return observations_of(records, drafts, Path(target), {"name": "sglang", "version": engine_version()}, tp,
                           seconds, None, WIRING)
