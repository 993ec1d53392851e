"""Hypothesis strategies for vocab mappings, and a writer for minimal draft checkpoints that carry them.

The checkpoints reuse the specforge fixture's layer tensors (hidden 64) and change only what a vocab
mapping touches: ``vocab_size``, ``draft_vocab_size``, ``lm_head`` rows, ``d2t`` and ``t2d``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from hypothesis import strategies as st

from tests.conftest import DRAFTS

H = 64


@st.composite
def vocab_sizes(draw, min_vocab=32, max_vocab=1024):
    """(target vocab, draft vocab): draft ≤ target, including draft == target."""
    vocab = draw(st.integers(min_vocab, max_vocab))
    draft = draw(st.one_of(st.just(vocab), st.integers(1, vocab)))
    return vocab, draft


@st.composite
def token_frequencies(draw, vocab: int):
    """A token-frequency table over [0, vocab): ties, zeros, heavy skew, and ids 0..19 among the most
    frequent (the zero-offset trap) each appear with good probability."""
    shape = draw(st.sampled_from(["skew", "ties", "zeros", "trap", "sparse"]))
    if shape == "sparse":  # fewer distinct tokens than a draft vocab may need
        ids = draw(st.lists(st.integers(0, vocab - 1), unique=True, max_size=min(vocab, 40)))
        return {i: draw(st.integers(1, 50)) for i in ids}
    counts = {}
    for tid in range(vocab):
        if shape == "ties":
            counts[tid] = draw(st.integers(0, 3))
        elif shape == "zeros":
            counts[tid] = draw(st.sampled_from([0, 0, 0, 1, 7]))
        else:
            counts[tid] = draw(st.integers(0, 10))
    if shape == "skew":
        for tid in draw(st.lists(st.integers(0, vocab - 1), unique=True, max_size=8)):
            counts[tid] = draw(st.integers(10_000, 10 ** 9))
    if shape == "trap":
        for tid in range(min(20, vocab)):
            counts[tid] = 100_000 - tid
    return counts


@st.composite
def selections(draw, vocab: int, draft: int):
    """A trainer's intended selection: ``draft`` distinct target ids, ascending (sometimes 0..k first)."""
    if draw(st.booleans()):
        head = list(range(min(draft, draw(st.integers(0, 20)))))
    else:
        head = []
    rest = draw(st.lists(st.integers(0, vocab - 1), unique=True, min_size=draft, max_size=draft))
    ids = list(dict.fromkeys(head + rest))[:draft]
    return sorted(ids)


def write_draft(directory: Path, *, vocab: int, draft: int, d2t=None, t2d=None) -> Path:
    """A minimal SGLang-format draft with this vocab mapping (``None`` leaves a tensor out)."""
    from safetensors.torch import load_file, save_file

    base = DRAFTS["specforge"]
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v for k, v in load_file(base / "model.safetensors").items() if k not in ("d2t", "t2d", "lm_head.weight")}
    tensors["lm_head.weight"] = torch.zeros(draft, H, dtype=torch.bfloat16)
    if d2t is not None:
        tensors["d2t"] = d2t
    if t2d is not None:
        tensors["t2d"] = t2d
    save_file({k: v.contiguous() for k, v in tensors.items()}, directory / "model.safetensors")
    cfg = json.loads((base / "config.json").read_text())
    cfg.update(vocab_size=vocab, draft_vocab_size=draft)
    (directory / "config.json").write_text(json.dumps(cfg))
    return directory
