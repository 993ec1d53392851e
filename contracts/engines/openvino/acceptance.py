"""Acceptance measured on OpenVINO GenAI's own speculative decoding loop on a CPU, which is the deployment itself:
the target and the draft exported by its exporter (optimum-intel, as ``optimum-cli export openvino`` runs it),
``LLMPipeline`` with the ``draft_model`` (continuous batching, ``Eagle3DecodingImpl``), greedy, and GenAI's own
counters (``extended_perf_metrics``: draft tokens and accepted tokens per ``generate``).

The exporter writes no target layer ids, and GenAI refuses a target under 10 layers without them; the loop is run on
the draft IR with the ids its trainer trained on written into its rt_info (``hidden_layers_list``, GenAI's id k being
the output of target layer k), as ``convert --to openvino`` writes it; a folder holding its own IR (what convert
writes) is served with the ids that IR names. Whether the draft as exported serves
without them is ``check``'s verdict (hidden-width). Prompts are token ids (``contracts.engines.serving_prompts``): a
target folder without a tokenizer gets an empty one from the exporter. A round drafts ``num_assistant_tokens``.

    python -m contracts.engines.openvino.acceptance DRAFT_DIR TARGET_DIR JSON_OPTIONS   (one JSON line on stdout)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from contracts.engines.errors import EngineBuildError
from contracts.engines.serving_prompts import PROMPT_TOKENS, SEED, prompts


def measure(draft_dir: str, target_dir: str, *, tokens: int = 3, n_prompts: int = 4, max_tokens: int = 64,
            temperature: float = 0.0) -> dict:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    from contracts.engines.openvino.export import export, export_target
    from contracts.engines.openvino.pipeline import build, served_layers, trained_ids

    start = time.perf_counter()
    try:
        target_ir = export_target(target_dir)
        draft = export(draft_dir)
    except EngineBuildError as e:
        return {"refused": str(e)}
    layers = served_layers(draft_dir)  # a folder holding its own IR is served with the ids it names
    layers, layers_from = (layers, "the draft folder's own IR (rt_info)") if layers is not None else \
        trained_ids(draft_dir, target_dir)
    exported = time.perf_counter()
    pair = build(target_ir, draft.ir, layers)
    if pair.pipeline is None:
        return {"refused": f"OpenVINO GenAI refused the pair: {pair.refusal}"}
    built = time.perf_counter()
    config = ov_genai.GenerationConfig()
    config.max_new_tokens, config.num_assistant_tokens, config.ignore_eos = max_tokens, tokens, True
    if temperature > 0:
        config.do_sample, config.temperature, config.rng_seed = True, temperature, SEED
    else:
        config.do_sample = False
    vocab = int(json.loads((Path(target_dir) / "config.json").read_text()).get("vocab_size"))
    generated = drafted = accepted = 0
    for prompt in prompts(vocab, n_prompts):
        out = pair.pipeline.generate(ov.Tensor(np.array([prompt], dtype=np.int64)), config)
        metrics = out.extended_perf_metrics
        drafted += int(metrics.get_num_draft_tokens())
        accepted += int(metrics.get_num_accepted_tokens())
        generated += len(out.tokens[0])
    done = time.perf_counter()
    rounds = drafted / tokens
    return {
        "mean_acceptance_length": (1 + accepted / rounds) if rounds else None, "rounds": int(rounds) if rounds.is_integer() else round(rounds, 2),
        "draft_tokens": drafted, "accepted_tokens": accepted, "acceptance_rate_per_position": [],
        "acceptance_rate_per_position_unavailable": "GenAI counts accepted tokens per generate, not per position",
        "generated_tokens": generated, "num_speculative_tokens": tokens, "prompts": n_prompts,
        "prompt_tokens": PROMPT_TOKENS, "max_tokens": max_tokens, "temperature": temperature,
        "layers": {"hidden_layers_list": layers, "from": layers_from},
        "seconds_export": round(exported - start, 2), "seconds_build": round(built - exported, 2),
        "seconds_generate": round(done - built, 2),
    }


def main(argv: list[str]) -> int:
    draft_dir, target_dir, options = argv
    sys.stdout.write(json.dumps(measure(draft_dir, target_dir, **json.loads(options))) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
