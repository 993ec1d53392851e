"""The fixed prompts every acceptance measurement decodes: the same token ids in every engine's environment and in
the trainer's expectation, so two measurements of one draft differ only by what the engines compute."""

from __future__ import annotations

import random

PROMPT_TOKENS = 16
SEED = 20261130


def prompts(vocab_size: int, n: int, length: int = PROMPT_TOKENS, seed: int = SEED) -> list[list[int]]:
    """``n`` fixed prompts of target-vocab ids (stdlib random, so every environment draws the same ones)."""
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(length)] for _ in range(n)]
