"""Acceptance measured on llama.cpp's own speculative decoding loop: the target and the draft converted by the
release's own converter, served by ``xllamacpp.Server`` (llama.cpp's server, in process) with the EAGLE-3 draft type,
and llama.cpp's own counters (``handle_metrics``: draft tokens, accepted tokens, verification steps).

The whole loop is llama.cpp's and runs on a CPU as it does on a GPU (the same graph, ggml's CPU backend): the
target extracts the hidden states of the layers the GGUF names, the draft encodes and decodes them, the server
verifies. Draft settings: ``n_max`` = the tokens asked for, ``n_min`` 0, ``p_min`` 0 (llama.cpp's defaults but
``n_max``), so every round drafts as many tokens as vLLM's does for the same ``--tokens``.

    python -m contracts.engines.llamacpp.acceptance DRAFT_DIR TARGET_DIR JSON_OPTIONS   (one JSON line on stdout)
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from pathlib import Path

from contracts.engines.llamacpp.converter import convert, convert_target
from contracts.engines.llamacpp.log import captured, first_error
from contracts.engines.serving_prompts import PROMPT_TOKENS, SEED, prompts

COUNTER = re.compile(r"^llamacpp:(spec_decode_num_(?:draft_tokens|accepted_tokens|drafts)_total)\s+(\S+)$", re.M)


def _counters(text: str) -> dict:
    """llama.cpp's speculative counters from its Prometheus metrics text."""
    return {name.removeprefix("spec_decode_num_").removesuffix("_total"): int(float(value))
            for name, value in COUNTER.findall(text)}


def serve(target_gguf: Path, draft_gguf: Path, tokens: int, context: int):
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = str(target_gguf)
    params.speculative.draft.mparams.path = str(draft_gguf)
    params.speculative.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3]
    params.speculative.draft.n_max = tokens
    params.speculative.draft.n_min = 0
    params.speculative.draft.p_min = 0.0
    params.n_ctx = context
    params.n_parallel = 1
    params.endpoint_metrics = True
    return xlc.Server(params)


def measure(draft_dir: str, target_dir: str, *, tokens: int = 3, n_prompts: int = 4, max_tokens: int = 64,
            temperature: float = 0.0) -> dict:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-llamacpp-") as scratch:
        target = convert_target(Path(target_dir), Path(scratch) / "target")
        if not target["converted"]:
            return {"refused": f"llama.cpp's converter refused the target: {target['refusal']}"}
        draft = convert(Path(draft_dir), Path(target_dir), Path(scratch) / "draft")
        if not draft["converted"]:
            return {"refused": f"llama.cpp's converter refused the draft: {draft['refusal']}",
                    "decisions": draft["decisions"]}
        converted = time.perf_counter()
        log = Path(scratch) / "server.log"
        try:  # llama.cpp loading and serving the pair: an exception here is the engine's refusal
            with captured(log, echo=True):
                server = serve(Path(target["gguf"]), Path(draft["gguf"]), tokens, PROMPT_TOKENS + max_tokens + 16)
            built = time.perf_counter()
            config = json.loads((Path(target_dir) / "config.json").read_text())
            vocab = int(config.get("text_config", config)["vocab_size"])
            generated, timings = 0, {"draft_n": 0, "draft_n_accepted": 0}
            for prompt in prompts(vocab, n_prompts):
                out = server.handle_completions({"prompt": prompt, "n_predict": max_tokens, "temperature": temperature,
                                                 "seed": SEED, "ignore_eos": True, "cache_prompt": False})
                if "code" in out or "error" in out:
                    return {"refused": f"llama.cpp's server answered {json.dumps(out)[:400]}"}
                generated += int(out["usage"]["completion_tokens"])
                for key in timings:
                    timings[key] += int(out.get("timings", {}).get(key, 0))
            counters = _counters(server.handle_metrics())
            del server
        except Exception as e:  # noqa: BLE001  (reported as the engine's own error, with the cause its log names)
            cause = first_error(log.read_text(errors="replace")) if log.is_file() else None
            return {"refused": f"{type(e).__name__}: {str(e)[:300]}" + (f" ({cause[:300]})" if cause else "")}
    done = time.perf_counter()
    out = {"acceptance_rate_per_position": [], "response_draft_counters": timings,
           "acceptance_rate_per_position_unavailable": "llama.cpp counts it only in its trace log"}
    if counters:
        rounds, accepted = counters.get("drafts", 0), counters.get("accepted_tokens", 0)
        out.update(mean_acceptance_length=(1 + accepted / rounds) if rounds else None, rounds=rounds,
                   draft_tokens=counters.get("draft_tokens", 0), accepted_tokens=accepted)
    else:  # no verification-step count to divide by: the responses' own draft counters, and why no length
        out.update(mean_acceptance_length=None, rounds=None, draft_tokens=timings["draft_n"],
                   accepted_tokens=timings["draft_n_accepted"],
                   unavailable="this release's metrics count no speculative verification steps "
                               "(spec_decode_num_drafts_total); its responses count only drafted and accepted tokens")
    return {
        **out,
        "generated_tokens": generated, "num_speculative_tokens": tokens, "prompts": n_prompts,
        "prompt_tokens": PROMPT_TOKENS, "max_tokens": max_tokens, "temperature": temperature,
        "decisions": draft["decisions"],
        "seconds_convert": round(converted - start, 2), "seconds_build": round(built - converted, 2),
        "seconds_generate": round(done - built, 2),
    }


def main(argv: list[str]) -> int:
    draft_dir, target_dir, options = argv
    sys.stdout.write(json.dumps(measure(draft_dir, target_dir, **json.loads(options))) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
