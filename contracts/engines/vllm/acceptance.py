"""Acceptance measured on vLLM's own speculative decoding loop on a CPU: ``LLM.generate`` serving the target with the
draft as its EAGLE-3 speculator, and vLLM's own speculative-decoding counters (``LLM.get_metrics``).

Serves ``accept``: the number the contracts predict, measured (a draft every contract passes should be accepted;
one that fails a root-cause contract serves an accept length near 1.00). vLLM's CPU build runs the V1 model runner
(Model Runner V2's batch preparation and speculator kernels are Triton-only), so the loop measured is V1's
``EagleProposer`` with its rejection sampler. Run in the vLLM environment as its own process (the engine core
in-process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``):

    python -m contracts.engines.vllm.acceptance DRAFT_DIR TARGET_DIR JSON_OPTIONS   (one JSON line on stdout)
"""

from __future__ import annotations

import json
import os
import sys
import time

from contracts.engines.serving_prompts import PROMPT_TOKENS, SEED, prompts

KV_CACHE_BYTES = 256 * 1024 * 1024  # else the CPU worker reserves 92% of host memory


def cpu_llm(target_dir: str, draft_dir: str, tokens: int, *, max_model_len: int, max_num_seqs: int = 1, **kwargs):
    """vLLM's own ``LLM`` serving TARGET with DRAFT as its EAGLE-3 speculator on a CPU: the engine core in-process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), float32, eager, no tokenizer (token-id prompts), a bounded KV cache."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    return LLM(model=target_dir, skip_tokenizer_init=True, dtype="float32", max_model_len=max_model_len,
               enforce_eager=True, max_num_seqs=max_num_seqs, kv_cache_memory_bytes=KV_CACHE_BYTES,
               speculative_config={"method": "eagle3", "model": draft_dir, "num_speculative_tokens": tokens}, **kwargs)


def _counters(metrics) -> dict:
    """vLLM's speculative-decoding counters from ``LLM.get_metrics()`` (Counter / Vector objects by name)."""
    out = {}
    for m in metrics:
        name = getattr(m, "name", "")
        if not name.startswith("vllm:spec_decode_"):
            continue
        key = name.removeprefix("vllm:spec_decode_")
        out[key] = list(m.values) if hasattr(m, "values") else getattr(m, "value", None)
    return out


def tensor_parallel(tp: int) -> dict:
    """What ``LLM`` takes to serve at TP ranks on this CPU, as vLLM's CPU build runs them: its multiprocessing executor
    (a worker process per rank, gloo and its shared-memory all-reduce between them), this machine's cores split between
    the ranks (``VLLM_CPU_OMP_THREADS_BIND``, which a one-NUMA-node machine needs), and the executor's message queue
    and gloo on the loopback (``VLLM_HOST_IP``, ``GLOO_SOCKET_IFNAME``)."""
    if tp <= 1:
        return {}
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // tp)
    spans = [cores[r * share:(r + 1) * share] or cores[-1:] for r in range(tp)]
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(f"{s[0]}-{s[-1]}" if len(s) > 1 else str(s[0])
                                                                 for s in spans))
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
    if os.path.exists("/sys/class/net/lo"):  # gloo between the ranks on the loopback too
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return {"tensor_parallel_size": tp, "distributed_executor_backend": "mp"}


def measure(draft_dir: str, target_dir: str, *, tokens: int = 3, n_prompts: int = 4, max_tokens: int = 64,
            temperature: float = 0.0, tp: int = 1) -> dict:
    start = time.perf_counter()
    try:  # the engine building, loading and serving the draft: an exception here is the engine's refusal
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        llm = cpu_llm(target_dir, draft_dir, tokens, max_model_len=PROMPT_TOKENS + max_tokens + 8,
                      max_num_seqs=max(1, n_prompts), seed=SEED, disable_log_stats=False, **tensor_parallel(tp))
        built = time.perf_counter()
        vocab = int(llm.llm_engine.model_config.get_vocab_size())
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True, seed=SEED)
        outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts(vocab, n_prompts)], params,
                               use_tqdm=False)
    except Exception as e:  # noqa: BLE001  (reported as the engine's own error)
        return {"refused": f"{type(e).__name__}: {str(e)[:400]}"}
    done = time.perf_counter()
    counters = _counters(llm.get_metrics())
    drafts = int(counters.get("num_drafts") or 0)
    accepted = int(counters.get("num_accepted_tokens") or 0)
    per_pos = [int(x) for x in counters.get("num_accepted_tokens_per_pos") or []]
    return {
        "mean_acceptance_length": (1 + accepted / drafts) if drafts else None,
        "acceptance_rate_per_position": [a / drafts for a in per_pos] if drafts else [],
        "rounds": drafts, "draft_tokens": int(counters.get("num_draft_tokens") or 0), "accepted_tokens": accepted,
        "generated_tokens": sum(len(o.outputs[0].token_ids) for o in outputs),
        "num_speculative_tokens": tokens, "prompts": n_prompts, "prompt_tokens": PROMPT_TOKENS,
        "max_tokens": max_tokens, "temperature": temperature, "model_runner": _model_runner(llm, tp),
        "tensor_parallel_size": tp, **({"_shm_ident": _dist_ident(llm)} if tp > 1 else {}),
        "seconds_build": round(built - start, 2), "seconds_generate": round(done - built, 2),
    }


def _dist_ident(llm) -> str | None:
    """The name vLLM's CPU ranks gave their shared-memory all-reduce segments (``VLLM_DIST_IDENT``, set in each worker
    from its rendezvous), so the job removes what a rank's exit leaves in /dev/shm."""
    try:
        return llm.collective_rpc(lambda self: os.environ.get("VLLM_DIST_IDENT"))[0]
    except Exception:  # noqa: BLE001  (then nothing is removed)
        return None


def _model_runner(llm, tp: int = 1) -> str | None:
    """The class of the model runner that served (``CPUModelRunner``: V1 on the CPU build), where this release lets
    it be read (it is reported, never relied on); at TP ranks, each worker process's, asked over the executor."""
    try:
        if tp > 1:
            names = llm.collective_rpc(lambda self: type(self.model_runner).__name__)
            return names[0] if len(set(names)) == 1 else ",".join(names)
        return type(llm.llm_engine.model_executor.driver_worker.worker.model_runner).__name__
    except Exception:  # noqa: BLE001  (reported, never relied on)
        return None


def main(argv: list[str]) -> int:
    draft_dir, target_dir, options = argv
    from contracts.engines.channel import result_channel

    result_line = result_channel()  # the engine's prints (its rank processes' too) go to stderr
    result = measure(draft_dir, target_dir, **json.loads(options))
    ident = result.pop("_shm_ident", None)
    result_line.write(json.dumps(result) + "\n")
    result_line.flush()
    if ident:  # the ranks' all-reduce segments, past the engine's shutdown (it leaves them when a rank is killed)
        import gc
        from pathlib import Path

        gc.collect()
        for segment in Path("/dev/shm").glob(f"{ident}*"):
            segment.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
