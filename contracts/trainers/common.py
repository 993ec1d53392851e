"""What every trainer's fixture builder shares: the fixed token-frequency table, the tiny target's
geometry, and the manifest that records how each committed fixture was made (trainer, version,
command, sha256 of every file, the vocab ids the trainer selected).

Runs in any fixtures-<trainer> environment; needs only the standard library.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "fixtures"
MANIFEST = FIXTURES / "manifest.json"
TOKEN_FREQ = FIXTURES / "vocab" / "token_freq.json"
TARGET_DIR = FIXTURES / "targets" / "llama-tiny"

SEED = 20261130
TARGET_VOCAB = 512
DRAFT_VOCAB = 64
TARGET_GEOMETRY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=TARGET_VOCAB,
    max_position_embeddings=2048,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)


def token_frequencies() -> dict[int, int]:
    """The one fixed token-frequency table every trainer's mapping function is fed.

    Made so that the traps of `d2t` are present: ids 0..19 are among the most frequent (so a correct
    `d2t` starts with twenty zero offsets), some counts tie, and many ids never occur (zeros). Written once to fixtures/vocab/token_freq.json and read from there after.
    """
    if TOKEN_FREQ.exists():
        return {int(k): v for k, v in json.loads(TOKEN_FREQ.read_text()).items()}
    rng = random.Random(SEED)
    counts = {}
    for tid in range(TARGET_VOCAB):
        if tid < 20:
            counts[tid] = 10_000 - 7 * tid
        elif rng.random() < 0.4:
            counts[tid] = 0
        else:
            counts[tid] = int(rng.paretovariate(1.2) * 50)
    for tid in (101, 202, 303, 404):  # a four-way tie (at draft vocab 64 all four are selected; the
        counts[tid] = 900             # property tests of issue 3 put ties across the cut)
    TOKEN_FREQ.parent.mkdir(parents=True, exist_ok=True)
    TOKEN_FREQ.write_text(json.dumps({str(k): v for k, v in sorted(counts.items())}, indent=0) + "\n")
    return counts


def sha256_files(directory: Path) -> dict[str, str]:
    out = {}
    for p in sorted(Path(directory).rglob("*")):
        if p.is_file():
            out[str(p.relative_to(directory))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def record_fixture(name: str, directory: Path, *, trainer: str, trainer_version: str, command: str,
                   **details) -> dict:
    """Add or replace one fixture's entry in fixtures/manifest.json (paths relative to the repo)."""
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    if trainer != "transformers":
        details.setdefault("target", "target-llama-tiny")  # every draft here is paired with the tiny target
    entry = {
        "path": os.path.relpath(directory, REPO_ROOT),
        "trainer": trainer,
        "trainer_version": trainer_version,
        "command": command,
        "seed": SEED,
        "files": sha256_files(directory),
        **details,
    }
    manifest[name] = entry
    MANIFEST.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
    return entry
