"""vLLM's embed-head against a target whose embedding and head are loaded on ``meta`` (above
``held_tensors.META_VOCAB_BYTES``: a Llama-3.1-8B target's are 2 GB, and loading them, with the draft's to compare,
peaked at 9.9 GB). vLLM's sharing compares the draft's vocabulary tensors with the target's by value; there it is
handed stand-ins whose constants are equal exactly where the file tensors are, and its own code decides. Forced on
the tiny target through the CLI (a fresh engine worker): the verdicts, sources and checksums of the loaded way."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import DRAFTS, TARGET

VLLM = "vllm==0.32.0"


def judged(draft, meta: bool) -> dict:
    env = {**os.environ, "EAGLE3_CONTRACTS_META_VOCAB_MB": "0" if meta else "1000000"}
    done = subprocess.run([sys.executable, "-m", "contracts.cli", "check", str(draft), "--target", str(TARGET),
                           "--engine", VLLM, "--only", "embed-head", "--format", "json"],
                          capture_output=True, text=True, env=env)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return json.loads(done.stdout)["results"][0]


def essence(result: dict) -> dict:
    ev = result["evidence"]
    return {"status": result["status"], "summary": result["summary"],
            **{f"{role}.{k}": ev[role].get(k) for role in ("embedding", "head")
               for k in ("from", "same_object_as", "checksum", "served_equals_target", "served_equals_checkpoint")},
            "calls": ev["wiring"]["calls"]}


@pytest.mark.parametrize("case", ["speculators-default", "speculators-embedding-changed", "specforge"])
def test_a_target_on_meta_gets_the_verdicts_of_its_loaded_values(case, broken):
    if case == "speculators-embedding-changed":  # no longer the target's: vLLM keeps the draft's own
        from safetensors.torch import load_file

        tensors = load_file(str(DRAFTS["speculators-default"] / "model.safetensors"))
        embed = next(k for k in tensors if k.endswith("embed_tokens.weight"))
        changed = tensors[embed].clone()
        changed[:100] += 1.0
        draft = broken("speculators-default", replace={embed: changed})
    else:
        draft = DRAFTS[case]
    loaded, meta = judged(draft, meta=False), judged(draft, meta=True)
    assert essence(meta) == essence(loaded)
    if case == "speculators-default":
        assert loaded["evidence"]["embedding"]["same_object_as"] == "target:model.embed_tokens.weight"
    if case == "speculators-embedding-changed":
        assert loaded["evidence"]["embedding"]["same_object_as"] is None
