"""The tokenizer llama.cpp's converter needs beside a target (it writes the target's vocabulary into the draft's
GGUF, and a GGUF without one does not load), made locally for a target that has none: the bundled tiny targets
are weights and a config only, and nothing is downloaded.

A SentencePiece word model: ``<unk>``, ``<s>``, ``</s>`` at ids 0, 1, 2 (the tiny targets' own) and the words
``t3`` ... ``t<vocab-1>``, trained from a fixed corpus with one thread: the same file on every run. What the tokenizer says
does not reach any contract: the checks feed token ids, never text.
"""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json")


def has_tokenizer(target: Path) -> bool:
    return any((Path(target) / f).is_file() for f in TOKENIZER_FILES)


def sentencepiece_model(vocab_size: int) -> bytes:
    """A SentencePiece word model with VOCAB_SIZE pieces (deterministic)."""
    import sentencepiece as spm

    words = [f"t{i}" for i in range(3, vocab_size)]
    rng = random.Random(0)
    lines = [" ".join(rng.sample(words, min(20, len(words)))) for _ in range(400)]
    lines += [" ".join(words[i:i + 200]) for i in range(0, len(words), 200)]  # every word, in sentences SP accepts
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=vocab_size,
                                   model_type="word", unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   hard_vocab_limit=False, num_threads=1, minloglevel=2)
    return out.getvalue()


def target_with_tokenizer(target: Path, scratch: Path) -> Path:
    """TARGET itself when it has a tokenizer; else a folder in SCRATCH with links to TARGET's files and a
    tokenizer.model made here (the target's folder is never written)."""
    target = Path(target)
    if has_tokenizer(target):
        return target
    dest = Path(scratch) / "target-with-tokenizer"
    dest.mkdir(parents=True, exist_ok=True)
    for f in target.iterdir():
        os.symlink(f.resolve(), dest / f.name)
    config = json.loads((target / "config.json").read_text())
    text = config.get("text_config", config)
    (dest / "tokenizer.model").write_bytes(sentencepiece_model(int(text["vocab_size"])))
    return dest
