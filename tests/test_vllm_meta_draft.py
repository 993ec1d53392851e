"""vLLM's load traced on ``meta`` (a draft whose checkpoint or config is real-size: the elements each loader call
copies are counted, the small parameters given storage) reaches the verdicts of the exact CPU tracing. Forced on a
bundled draft through the CLI (a fresh engine worker each way), pristine and with a silently padded shard. Before,
the small parameters were given storage as plain Parameters: vLLM's fused qkv and gate_up parameters serve their
``weight_loader`` as a property of their own class, so every shard fell to ``default_weight_loader``, which refused
it, and a pristine draft whose config asked for a 2,000,000-token vocabulary failed tensor-shapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import TARGET

VLLM = "vllm==0.32.0"
CONTRACTS = "key-naming,tensor-shapes,d2t-semantics"


def judged(draft, meta: bool) -> dict:
    env = {**os.environ, "EAGLE3_CONTRACTS_META_ABOVE_ELEMENTS": "0" if meta else str(10**12)}
    done = subprocess.run([sys.executable, "-m", "contracts.cli", "check", str(draft), "--target", str(TARGET),
                           "--engine", VLLM, "--only", CONTRACTS, "--format", "json"],
                          capture_output=True, text=True, env=env)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return {r["contract"]: (r["status"], r["summary"]) for r in json.loads(done.stdout)["results"]}


@pytest.mark.parametrize("case", ["pristine", "silently padded shard"])
def test_a_draft_traced_on_meta_gets_the_cpu_tracings_verdicts(case, broken):
    draft = broken("specforge") if case == "pristine" else \
        broken("specforge", replace={"midlayer.mlp.up_proj.weight": torch.randn(96, 64)})
    cpu, meta = judged(draft, meta=False), judged(draft, meta=True)
    assert meta == cpu
    assert cpu["tensor-shapes"][0] == ("pass" if case == "pristine" else "fail"), cpu
