"""What vLLM decides, rank by rank, about an EAGLE-3 draft's embedding and head under tensor parallelism, on a CPU.

Contract served: ``rank-consistency``. vLLM shares the target's ``embed_tokens`` / ``lm_head`` with the draft when the
draft's own equal them, and each rank compares only its own vocabulary shard, with no reduction across ranks (Model
Runner V1: ``v1/spec_decode/llm_base_proposer.py`` ``_maybe_share_embeddings`` / ``_maybe_share_lm_head``; V2:
``v1/worker/gpu/spec_decode/eagle/utils.py`` ``_should_share``; vllm#50158): a draft equal to the target except in
its first rows is kept by rank 0 and shared by rank 1, and the ranks serve different drafters.

Here the release's own code runs in N ranks (``contracts.engines.ranks``: one gloo world on a private ``file://``
rendezvous, as vLLM's CPU worker sets it up: ``init_distributed_environment`` + ``ensure_model_parallel_initialized``,
the CPU build's shared-memory group named from ``VLLM_DIST_IDENT``). In each rank the target is built and loaded by
``get_model`` (each rank holds its shard), then the runner's own code builds, loads and wires the draft (V1's
``EagleProposer.load_model``, V2's ``load_eagle_model``); a decision is read back as whether the draft's module *is*
the target's afterwards, and what the ranks serve together is read through the modules themselves (the embedding's
own forward with its all-reduce over every token id; the head's shards gathered in rank order). Nothing of the
decision is re-implemented.

    python -m contracts.engines.vllm.tensor_parallel TARGET_DIR OPTIONS_JSON DRAFT_DIR [DRAFT_DIR ...]
        OPTIONS: {"tp": 2, "runner": "v1"|"v2"}; one JSON line: a ``RankObservation`` per draft
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

RUNNERS = ("v1", "v2")
WIRING = {"v1": "EagleProposer.load_model (_maybe_share_embeddings, _maybe_share_lm_head), in each rank",
          "v2": "load_eagle_model (maybe_share_target_embed, _should_share), in each rank"}


def _rows(layer) -> list[int]:
    indices = layer.shard_indices
    return [int(indices.org_vocab_start_index), int(indices.org_vocab_end_index)]


def _module(model, name: str):
    """MODEL's module NAME nearest its root (a multimodal target keeps its language model's one level down)."""
    return min(((n, m) for n, m in model.named_modules() if n.split(".")[-1] == name), key=lambda nm: len(nm[0]))[1]


def rank_entry(rank: int, tp: int, rendezvous: str, payload: dict) -> dict:
    """One rank: vLLM's distributed state, then each draft built, loaded and wired by the runner's own code."""
    os.environ["VLLM_DIST_IDENT"] = Path(rendezvous).name  # what vLLM's CpuWorker sets: its shm group's name
    from contracts.engines.vllm import context

    context._quiet()
    import torch

    torch.set_num_threads(1)
    context.ensure_context(tp, rank, f"file://{rendezvous}")
    from vllm.distributed import destroy_distributed_environment, destroy_model_parallel
    from vllm.v1.spec_decode.eagle import EagleProposer
    from vllm.v1.worker.gpu.spec_decode.eagle.utils import load_eagle_model
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from contracts.engines.errors import TargetBuildError
    from contracts.engines.ranks import agreed, differences, fingerprint_of, gathered, shard_digest
    from contracts.engines.vllm.wiring import _load_target_vocab_tensors, build_target

    target, runner = payload["target"], payload["runner"]

    def build(draft: str):
        """The server's configs at TP ranks; the target as the embed-head wiring builds it (its class on ``meta``,
        its embedding and head loaded by its own ``load_weights``: each rank its shard); the draft by the runner."""
        configs = context.draft_configs(Path(draft), Path(target), tp=tp)
        vc = configs.vc
        with context.building(vc):
            target_model = build_target(configs)
            _, _, error, _ = _load_target_vocab_tensors(target_model, Path(target))
            if error:
                raise TargetBuildError(f"vLLM's load_weights of the target's embedding and head raised: {error}")
            if runner == "v1":
                proposer = EagleProposer(vc, torch.device("cpu"), runner=None)
                proposer.load_model(target_model)
                return vc, target_model, proposer.model
            return vc, target_model, load_eagle_model(target_model, vc)

    seen: dict[str, dict] = {}
    for draft in payload["drafts"]:
        with torch.no_grad():
            built, failed = agreed(lambda: build(draft), "vllm")  # noqa: B023  (called at once)
            if failed:
                seen[draft] = {"failed": failed}
                continue
            vc, target_model, model = built
            embed, head = _module(target_model, "embed_tokens"), _module(target_model, "lm_head")
            vocab = int(vc.model_config.hf_config.get_text_config().vocab_size)
            served_embed = model.model.embed_tokens(torch.arange(vocab))  # its own forward: the all-reduce included
            own_head = model.lm_head
            served_head = gathered(own_head.weight[: _rows(own_head)[1] - _rows(own_head)[0]])
            aux = GPUModelRunner._get_eagle3_aux_layers_from_config(  # the runner's own reading of the draft config
                type("Runner", (), {"speculative_config": vc.speculative_config})())
        seen[draft] = {
            "embed": {"decision": "shared" if model.model.embed_tokens is embed else "kept",
                      "rows": _rows(model.model.embed_tokens), "target_rows": _rows(embed),
                      "shard": shard_digest(model.model.embed_tokens, _rows(model.model.embed_tokens)),
                      "served": fingerprint_of(served_embed, str(served_embed.dtype).removeprefix("torch."))},
            "lm_head": {"decision": "shared" if own_head is head else "kept", "rows": _rows(own_head),
                        "target_rows": _rows(head),
                        "shard": shard_digest(own_head, _rows(own_head)),
                        "served": fingerprint_of(served_head, str(served_head.dtype).removeprefix("torch."))},
            "aux_layer_ids": None if aux is None else list(aux),
        }
        if rank == 0:  # (every rank serves the same rows together: one compares them with the files)
            for role, served in (("embed", served_embed), ("lm_head", served_head)):
                seen[draft][role]["differs"] = differences(served, Path(draft), Path(target), role)
        vc.compilation_config.static_forward_context.clear()
        del target_model, model, embed, head, own_head, built
    destroy_model_parallel()
    destroy_distributed_environment()
    return {"rank": rank, "drafts": seen}


def observe_ranks(engine_dirs, target_dir, tp: int, runner: str | None = None) -> list:
    """A ``RankObservation`` per draft in ENGINE_DIRS: its drafter as each of TP ranks of vLLM builds it, on the model
    runner RUNNER (None: the release's default for the first draft), beside the two candidates each role can serve."""
    from contracts.engines.ranks import observations_of, run_ranks
    from contracts.engines.vllm.context import engine_version
    from contracts.engines.vllm.runners import observe_path

    drafts = [str(Path(d).resolve()) for d in engine_dirs]
    runner = runner or observe_path(Path(drafts[0]), Path(target_dir), None).judged
    records, seconds = run_ranks("contracts.engines.vllm.tensor_parallel:rank_entry", tp,
                                 {"engine": "vllm", "target": str(Path(target_dir).resolve()), "drafts": drafts,
                                  "runner": runner})
    return observations_of(records, drafts, Path(target_dir).resolve(), {"name": "vllm", "version": engine_version()},
                           tp, seconds, runner, WIRING[runner])


def main(argv: list[str]) -> int:
    target, options, *drafts = argv
    options = json.loads(options)
    found = observe_ranks(drafts, target, options.get("tp", 2), options.get("runner"))
    sys.stdout.write(json.dumps([o.to_dict() for o in found]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


SHARD_WIRING = ("vLLM's VocabParallelEmbedding._get_indices (each rank's vocabulary shard) and _should_share (Model "
                "Runner V2's per-rank decision; V1's _maybe_share_embeddings / _maybe_share_lm_head make the same "
                "torch.equal of the rank's shard) called for each rank in one process, on the checkpoint's and the "
                "target's rows as the engine loads them")


def _shard(files: dict, who: str, rows: dict, dtype):
    """WHO's rows of this rank (``files[who]``: its checkpoint and tensor name), as a module holding them in DTYPE."""
    import types

    import torch

    from contracts.checkpoint import tensor_rows

    if who not in files:
        return None
    ckpt, key = files[who]
    part = tensor_rows(ckpt.path / ckpt.tensors[key].file, key)[rows[who][0]:rows[who][1]]
    return types.SimpleNamespace(weight=torch.as_tensor(part).to(dtype))


def observe_shard_ranges(engine_dirs, target_dir, tp: int, runner: str | None = None) -> list:
    """A ``RankObservation`` per draft at a TP size beyond what this machine runs in processes: for each rank, the
    vocabulary shard vLLM's own ``VocabParallelEmbedding._get_indices`` gives it and the decision vLLM's own
    ``_should_share`` takes on that shard of the draft's tensor and the target's (read from their files, cast to the
    dtype the engine loads them in); the draft's own-tensor flags from vLLM's own load of it (one rank)."""
    import types

    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding, pad_vocab_size
    from vllm.v1.worker.gpu.spec_decode.eagle.utils import _should_share

    from contracts.checkpoint import Checkpoint
    from contracts.engines.errors import EngineBuildError
    from contracts.engines.ranks import ROLE_KEYS, key_ending
    from contracts.engines.vllm.context import engine_version
    from contracts.engines.vllm.loader import load_traced
    from contracts.engines.vllm.runners import observe_path
    from contracts.observations import RankObservation

    target = Path(target_dir)
    runner = runner or observe_path(Path(engine_dirs[0]), target, None).judged
    flags = {"embed": "has_own_embed_tokens", "lm_head": "has_own_lm_head"}
    found = []
    for draft in map(Path, engine_dirs):
        _, configs, model, _, _, load_error = load_traced(draft, target)
        if load_error:
            found.append(RankObservation(engine={"name": "vllm", "version": engine_version()}, tp_size=tp,
                                         how="shard-ranges", runner=runner, error=f"vLLM's load_weights: {load_error}",
                                         error_kind=EngineBuildError.__name__))
            continue
        dtype = configs.target.dtype
        ranks: list[dict] = [{"rank": r} for r in range(tp)]
        for role, suffix in ROLE_KEYS.items():
            files = {who: (Checkpoint.open(d, require_weights=False), key) for who, d in (("draft", draft), ("target", target))
                     if (key := key_ending(d, suffix)) is not None}
            sizes = {who: ckpt.tensors[key].shape[0] for who, (ckpt, key) in files.items()}
            for rank in ranks:
                rows = {}
                for who, size in sizes.items():
                    padded = pad_vocab_size(size)
                    shard = VocabParallelEmbedding._get_indices(padded, padded, size, size, rank["rank"], tp)
                    rows[who] = [int(shard.org_vocab_start_index), int(shard.org_vocab_end_index)]
                own = bool(getattr(model, flags[role], False))
                share = _should_share(types.SimpleNamespace(**{flags[role]: own}), flags[role],
                                      _shard(files, "draft", rows, dtype), _shard(files, "target", rows, dtype))
                rank[role] = {"decision": "shared" if share else "kept",
                              "rows": rows["target" if share else "draft"] if rows else None,
                              "target_rows": rows.get("target")}
        found.append(RankObservation(engine={"name": "vllm", "version": engine_version()}, tp_size=tp,
                                     how="shard-ranges", runner=runner, ranks=ranks, wiring=SHARD_WIRING))
        del model
    return found
