"""vLLM's per-rank decisions on an EAGLE-3 draft's embedding and head at tensor parallelism 2, on a CPU with two gloo
ranks (``contracts.engines.vllm.tensor_parallel``: the release's own V1 proposer and V2 loader in each rank): each
rank compares only its own vocabulary shard (vllm#50158), so a draft equal to the target except in rows 0-99 is kept
by rank 0 and shared by rank 1; equal everywhere, both share; different everywhere, both keep."""

from __future__ import annotations

import json

import torch
from conftest import FIXTURES, HD32_TARGET, make_copy

from contracts.checkpoint import Checkpoint
from contracts.engine_spec import EngineSpec
from contracts.engines.remote import run_module
from contracts.environments.engines import environment_for

DRAFT = FIXTURES / "drafts" / "speculators-default-hd32"  # its embed_tokens equals the target's


def test_each_rank_decides_on_its_own_shard(tmp_path):
    embed = Checkpoint.open(DRAFT).load_tensor("embed_tokens.weight")
    assert torch.equal(embed, Checkpoint.open(HD32_TARGET, require_weights=True).load_tensor(
        "model.embed_tokens.weight").to(embed.dtype))
    partly = embed.clone()
    partly[:100] += 0.5  # rows 0-99: all in rank 0's shard [0, 256) of the 512-token vocabulary
    drafts = {"equal": DRAFT,
              "partly": make_copy(DRAFT, tmp_path / "partly", replace={"embed_tokens.weight": partly}),
              "different": make_copy(DRAFT, tmp_path / "different", replace={"embed_tokens.weight": embed + 0.5})}
    python = environment_for(EngineSpec.parse("vllm").canonical())
    done = run_module(python, "contracts.engines.vllm.tensor_parallel", str(HD32_TARGET), json.dumps({"tp": 2}),
                      *map(str, drafts.values()), engine="vllm")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["tp_size"] == 2 and [r["rank"] for r in result["ranks"]] == [0, 1]
    assert [r["drafts"][str(DRAFT)]["embed_shard"] for r in result["ranks"]] == [[0, 256], [256, 512]]

    def embed_decisions(name: str, runner: str) -> list[str]:
        return [r["drafts"][str(drafts[name])][runner]["embed"] for r in result["ranks"]]

    for runner in ("v1", "v2"):
        assert embed_decisions("equal", runner) == ["shared", "shared"], runner
        assert embed_decisions("partly", runner) == ["kept", "shared"], runner  # the ranks serve different drafters
        assert embed_decisions("different", runner) == ["kept", "kept"], runner
    assert all(r["peak_rss_mb"] < 1024 for r in result["ranks"])
