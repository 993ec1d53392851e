"""The tiny target every fixture draft is paired with: a random Llama (8 layers, hidden 64, 4 heads /
2 KV heads, vocab 512) built and saved by transformers itself, seeded.

    python -m contracts.trainers.target        (run by `tox -e fixtures-speculators`)
"""

from __future__ import annotations

import sys

from contracts.trainers.common import SEED, TARGET_DIR, TARGET_GEOMETRY, record_fixture


def build_target(directory=TARGET_DIR):
    import torch
    import transformers

    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(**TARGET_GEOMETRY, dtype="float32")
    config.architectures = ["LlamaForCausalLM"]
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    for extra in ("generation_config.json",):
        (directory / extra).unlink(missing_ok=True)
    return record_fixture(
        "target-llama-tiny", directory, trainer="transformers", trainer_version=transformers.__version__,
        command="python -m contracts.trainers.target", architecture="LlamaForCausalLM",
    )


if __name__ == "__main__":
    entry = build_target()
    print(f"target written to {entry['path']}: {sorted(entry['files'])}", file=sys.stderr)
