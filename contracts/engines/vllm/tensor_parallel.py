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


def rank_entry(rank: int, tp: int, rendezvous: str, payload: dict) -> dict:
    """One rank: vLLM's distributed state, then each draft built, loaded and wired by the runner's own code."""
    os.environ["VLLM_DIST_IDENT"] = Path(rendezvous).name  # what vLLM's CpuWorker sets: its shm group's name
    from contracts.engines.vllm import context

    context._quiet()
    import torch

    torch.set_num_threads(1)
    from vllm.config import DeviceConfig, ModelConfig, ParallelConfig, SpeculativeConfig, VllmConfig
    from vllm.distributed import (destroy_distributed_environment, destroy_model_parallel,
                                  ensure_model_parallel_initialized, init_distributed_environment)
    from vllm.model_executor.model_loader import get_model
    from vllm.v1.spec_decode.eagle import EagleProposer
    from vllm.v1.worker.cpu_model_runner import _set_torch_accelerator_to_noop
    from vllm.v1.worker.gpu.spec_decode.eagle.utils import load_eagle_model
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from contracts.engines.ranks import differences, fingerprint_of, gathered

    _set_torch_accelerator_to_noop()  # as vLLM's CPU model runner does (the loader calls torch.accelerator.*)
    target, runner = payload["target"], payload["runner"]

    def configs(draft: str):
        parallel = ParallelConfig(tensor_parallel_size=tp)
        model = ModelConfig(model=target, skip_tokenizer_init=True, dtype="auto", enforce_eager=True,
                            max_model_len=context.MAX_MODEL_LEN)
        spec = SpeculativeConfig(method="eagle3", model=draft, num_speculative_tokens=1, target_model_config=model,
                                 target_parallel_config=parallel, enforce_eager=True)
        return VllmConfig(model_config=model, speculative_config=spec, parallel_config=parallel,
                          device_config=DeviceConfig(device="cpu"))

    seen: dict[str, dict] = {}
    for i, draft in enumerate(payload["drafts"]):
        vc = configs(draft)
        with context.building(vc), torch.no_grad():
            if i == 0:
                init_distributed_environment(tp, rank, f"file://{rendezvous}", rank, "gloo")
                ensure_model_parallel_initialized(tp, 1)
            target_model = get_model(vllm_config=vc)
            embed, head = target_model.model.embed_tokens, target_model.lm_head
            if runner == "v1":
                proposer = EagleProposer(vc, torch.device("cpu"), runner=None)
                proposer.load_model(target_model)
                model = proposer.model
            else:
                model = load_eagle_model(target_model, vc)
            vocab = int(vc.model_config.hf_config.get_text_config().vocab_size)
            served_embed = model.model.embed_tokens(torch.arange(vocab))  # its own forward: the all-reduce included
            own_head = model.lm_head
            served_head = gathered(own_head.weight[: _rows(own_head)[1] - _rows(own_head)[0]])
            aux = GPUModelRunner._get_eagle3_aux_layers_from_config(  # the runner's own reading of the draft config
                type("Runner", (), {"speculative_config": vc.speculative_config})())
        seen[draft] = {
            "embed": {"decision": "shared" if model.model.embed_tokens is embed else "kept",
                      "rows": _rows(model.model.embed_tokens), "target_rows": _rows(embed),
                      "served": fingerprint_of(served_embed, str(served_embed.dtype).removeprefix("torch."))},
            "lm_head": {"decision": "shared" if own_head is head else "kept", "rows": _rows(own_head),
                        "target_rows": _rows(head),
                        "served": fingerprint_of(served_head, str(served_head.dtype).removeprefix("torch."))},
            "aux_layer_ids": None if aux is None else list(aux),
        }
        if rank == 0:  # (every rank serves the same rows together: one compares them with the files)
            for role, served in (("embed", served_embed), ("lm_head", served_head)):
                seen[draft][role]["differs"] = differences(served, Path(draft), Path(target), role)
        vc.compilation_config.static_forward_context.clear()
        del target_model, model, embed, head, own_head
    destroy_model_parallel()
    destroy_distributed_environment()
    return {"rank": rank, "drafts": seen}


def observe_ranks(engine_dirs, target_dir, tp: int, runner: str | None = None) -> list:
    """A ``RankObservation`` per draft in ENGINE_DIRS: its drafter as each of TP ranks of vLLM builds it, on the model
    runner RUNNER (None: the release's default for the first draft), beside the two candidates each role can serve."""
    from contracts.engines.ranks import candidates, run_ranks
    from contracts.engines.vllm.context import engine_version
    from contracts.engines.vllm.runners import observe_path
    from contracts.observations import RankObservation

    drafts = [str(Path(d).resolve()) for d in engine_dirs]
    runner = runner or observe_path(Path(drafts[0]), Path(target_dir), None).judged
    records, seconds = run_ranks("contracts.engines.vllm.tensor_parallel:rank_entry", tp,
                                 {"engine": "vllm", "target": str(Path(target_dir).resolve()), "drafts": drafts,
                                  "runner": runner})
    observations = []
    for draft in drafts:
        ranks = [{"rank": r["rank"], "peak_rss_mb": r["peak_rss_mb"], **r["drafts"][draft]} for r in records]
        observations.append(RankObservation(
            engine={"name": "vllm", "version": engine_version()}, tp_size=tp, how="processes", runner=runner,
            ranks=ranks, candidates=candidates(ranks, Path(draft), Path(target_dir)), wiring=WIRING[runner],
            seconds=round(seconds, 2)))
    return observations


def main(argv: list[str]) -> int:
    target, options, *drafts = argv
    options = json.loads(options)
    found = observe_ranks(drafts, target, options.get("tp", 2), options.get("runner"))
    sys.stdout.write(json.dumps([o.to_dict() for o in found]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
