"""What vLLM decides, rank by rank, about an EAGLE-3 draft's embedding and head under tensor parallelism, on a CPU.

vLLM shares the target's ``embed_tokens`` / ``lm_head`` with the draft when the draft's own equal them, and each rank
compares only its own vocabulary shard, with no reduction across ranks (Model Runner V1:
``v1/spec_decode/llm_base_proposer.py`` ``_maybe_share_embeddings`` / ``_maybe_share_lm_head``; V2:
``v1/worker/gpu/spec_decode/eagle/utils.py`` ``_should_share``; vllm#50158): a draft equal to the target except in
its first rows is kept by rank 0 and shared by rank 1, and the ranks serve different drafters.

Here the release's own code runs in N processes, one gloo world on a private ``file://`` rendezvous on this machine,
as vLLM's CPU worker sets it up (``init_distributed_environment`` + ``ensure_model_parallel_initialized``; the CPU
build's shared-memory group named from ``VLLM_DIST_IDENT``). In each rank the target is built and loaded by
``get_model`` (each rank holds its shard), then V1's ``EagleProposer.load_model`` and V2's ``load_eagle_model``
build, load and wire the draft; a decision is read back as whether the draft's module *is* the target's afterwards.
Nothing of the decision is re-implemented.

    python -m contracts.engines.vllm.tensor_parallel TARGET_DIR OPTIONS_JSON DRAFT_DIR [DRAFT_DIR ...]
        OPTIONS: {"tp": 2}; one JSON line on stdout: {"tp_size", "ranks": [{"rank", "peak_rss_mb", "drafts":
        {DRAFT_DIR: {"embed_shard", "head_shard", "has_own_embed_tokens", "v1": {"embed", "lm_head"}, "v2": {...}}}}]}
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

RUNNERS = ("v1", "v2")


def _shard(layer) -> list[int]:
    indices = layer.shard_indices
    return [int(indices.org_vocab_start_index), int(indices.org_vocab_end_index)]


def _rank(rank: int, tp: int, rendezvous: str, target: str, drafts: list[str], out: str) -> None:
    """One rank: vLLM's distributed state, then each draft built, loaded and wired by V1's and V2's own code."""
    os.environ["VLLM_DIST_IDENT"] = Path(rendezvous).name  # what vLLM's CpuWorker sets: its shm group's name
    from contracts.engines.vllm import context

    context._quiet()
    import resource

    import torch

    torch.set_num_threads(1)
    from vllm.config import DeviceConfig, ModelConfig, ParallelConfig, SpeculativeConfig, VllmConfig
    from vllm.distributed import (destroy_distributed_environment, destroy_model_parallel,
                                  ensure_model_parallel_initialized, init_distributed_environment)
    from vllm.model_executor.model_loader import get_model
    from vllm.v1.spec_decode.eagle import EagleProposer
    from vllm.v1.worker.cpu_model_runner import _set_torch_accelerator_to_noop
    from vllm.v1.worker.gpu.spec_decode.eagle.utils import load_eagle_model

    _set_torch_accelerator_to_noop()  # as vLLM's CPU model runner does (the loader calls torch.accelerator.*)

    def configs(draft: str):
        parallel = ParallelConfig(tensor_parallel_size=tp)
        model = ModelConfig(model=target, skip_tokenizer_init=True, dtype="auto", enforce_eager=True,
                            max_model_len=context.MAX_MODEL_LEN)
        spec = SpeculativeConfig(method="eagle3", model=draft, num_speculative_tokens=1, target_model_config=model,
                                 target_parallel_config=parallel, enforce_eager=True)
        return VllmConfig(model_config=model, speculative_config=spec, parallel_config=parallel,
                          device_config=DeviceConfig(device="cpu"))

    seen: dict[str, dict] = {}
    for i, draft in enumerate(drafts):
        vc = configs(draft)
        with context.building(vc):
            if i == 0:
                init_distributed_environment(tp, rank, f"file://{rendezvous}", rank, "gloo")
                ensure_model_parallel_initialized(tp, 1)
            target_model = get_model(vllm_config=vc)
            embed, head = target_model.model.embed_tokens, target_model.lm_head
            proposer = EagleProposer(vc, torch.device("cpu"), runner=None)
            proposer.load_model(target_model)
            v1 = proposer.model
        vc2 = configs(draft)  # V2 builds the draft again, under a config of its own (its attention-layer registry)
        with context.building(vc2):
            v2 = load_eagle_model(target_model, vc2)
        seen[draft] = {
            "embed_shard": _shard(embed), "head_shard": _shard(head),
            "has_own_embed_tokens": bool(getattr(v1, "has_own_embed_tokens", False)),
            "has_own_lm_head": bool(getattr(v1, "has_own_lm_head", False)),
            "v1": {"embed": "shared" if v1.model.embed_tokens is embed else "kept",
                   "lm_head": "shared" if v1.lm_head is head else "kept"},
            "v2": {"embed": "shared" if v2.model.embed_tokens is embed else "kept",
                   "lm_head": "shared" if v2.lm_head is head else "kept"},
        }
        vc.compilation_config.static_forward_context.clear()
        vc2.compilation_config.static_forward_context.clear()
        del target_model, proposer, v1, v2
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out).write_text(json.dumps({"rank": rank, "peak_rss_mb": round(peak, 1), "drafts": seen}))
    destroy_model_parallel()
    destroy_distributed_environment()


def _child(*args) -> None:
    try:
        _rank(*args)
    except BaseException:  # noqa: BLE001  (the parent reports the rank's last words)
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def observe(target: str, drafts: list[str], tp: int = 2, timeout: float = 900) -> dict:
    """Each rank's decisions on each draft (the module docstring), from TP processes of this environment."""
    import multiprocessing

    from contracts.engines.vllm import tensor_parallel  # by its name: run as __main__, the ranks still import it

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-tp-") as work:
        rendezvous = str(Path(work) / f"rendezvous-{os.getpid()}")
        spawn = multiprocessing.get_context("spawn")  # fresh interpreters: no engine state or threads inherited
        procs = [spawn.Process(target=tensor_parallel._child, args=(r, tp, rendezvous, target, drafts, f"{work}/rank{r}.json"))
                 for r in range(tp)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
            if p.is_alive():
                p.kill()
                p.join()
        failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
        if failed:
            return {"error": f"rank(s) {failed} of {tp} ended with {[procs[r].exitcode for r in failed]}"}
        ranks = [json.loads(Path(f"{work}/rank{r}.json").read_text()) for r in range(tp)]
    return {"tp_size": tp, "ranks": ranks, "seconds": round(time.perf_counter() - start, 2)}


def main(argv: list[str]) -> int:
    target, options, *drafts = argv
    result = observe(target, drafts, **json.loads(options))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
