"""The tiny targets the fixture drafts are paired with:

  fixtures/targets/llama-tiny     a random Llama (8 layers, hidden 64, 4 heads / 2 KV heads, vocab 512) built
                                  and saved by transformers itself, seeded; every Llama draft's target.
  fixtures/targets/llama-tiny-hd32  the same with 2 heads of 32 / 1 KV head: a head size vLLM's CPU attention
                                  kernel takes, so its drafts' forwards can be replayed on vLLM too.
  fixtures/targets/kimi-k25-tiny  the scaled-down Kimi-K2.5 config (contracts.trainers.target_configs: a
                                  DeepSeek-V3 text model of the same width and vocab inside
                                  KimiK25ForConditionalGeneration) with its two vocabulary tensors only, under
                                  Kimi-K2.5's own key names (seeded, bf16 as published): what speculators reads
                                  from a verifier (embed_tokens, lm_head) and what an engine's wiring shares.
                                  The draft of the replayed Kimi-K2.5 failure is built against it.

    python -m contracts.trainers.target        (run by `tox -e fixtures-speculators`)
"""

from __future__ import annotations

import sys

from contracts.trainers.common import LLAMA_TINY, LLAMA_TINY_HD32, SEED, TARGET_DIR, TinyTarget, record_fixture


def build_target(target: TinyTarget = LLAMA_TINY, record: bool = True):
    """The tiny Llama of ``target``'s geometry, seeded, saved by transformers (``record``: in the manifest, as a
    fixture; ``build-tiny`` makes one outside the fixtures)."""
    import torch
    import transformers

    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(**target.geometry, dtype="float32")
    config.architectures = ["LlamaForCausalLM"]
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    directory = target.directory
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    for extra in ("generation_config.json",):
        (directory / extra).unlink(missing_ok=True)
    if not record:
        return {"path": str(directory), "architecture": "LlamaForCausalLM", "transformers": transformers.__version__}
    return record_fixture(
        target.name, directory, trainer="transformers", trainer_version=transformers.__version__,
        command="python -m contracts.trainers.target", architecture="LlamaForCausalLM",
    )


KIMI_DIR = TARGET_DIR.parent / "kimi-k25-tiny"
KIMI_VOCAB_KEYS = ("language_model.model.embed_tokens.weight", "language_model.lm_head.weight")


def build_kimi_target(directory=KIMI_DIR):
    import json

    import torch
    from safetensors.torch import save_file

    from contracts.trainers.target_configs import KIMI_K25

    text = KIMI_K25["text_config"]
    gen = torch.Generator().manual_seed(SEED)
    shape = (text["vocab_size"], text["hidden_size"])
    tensors = {k: (torch.randn(shape, generator=gen) * 0.02).to(torch.bfloat16) for k in KIMI_VOCAB_KEYS}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(KIMI_K25, indent=2, sort_keys=True) + "\n")
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return record_fixture(
        "target-kimi-k25-tiny", directory, trainer="hand-written", trainer_version="-",
        command="python -m contracts.trainers.target", architecture="KimiK25ForConditionalGeneration",
        role="target", source="fixtures/targets/kimi-k25-tiny-config (scaled down from moonshotai/Kimi-K2.5) "
        "with seeded embed_tokens / lm_head only",
    )


if __name__ == "__main__":
    for entry in (build_target(), build_target(LLAMA_TINY_HD32), build_kimi_target()):
        print(f"target written to {entry['path']}: {sorted(entry['files'])}", file=sys.stderr)
