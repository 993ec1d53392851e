"""``rank-consistency`` on the engines' own code in two gloo ranks on this CPU (``contracts.engines.ranks``).

vLLM 0.32.0 (vllm#50158, both model runners): each rank decides on its own vocabulary shard whether the draft keeps its
embedding, so a draft equal to the target except in rows 0-99 is kept by rank 0 and shared by rank 1: a failure naming
both; equal everywhere (every rank shares) and different everywhere (every rank keeps) pass. SGLang 0.5.23: a draft
config whose ``vocab_size`` is smaller than the target's, sharing the target's embedding, looks up shifted rows at
TP=2 (288 of 512 wrong) and the right ones at TP=1. Each rank stays under 1 GB."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import FIXTURES, HD32_TARGET, make_copy

from contracts.checkpoint import Checkpoint
from contracts.engine_spec import EngineSpec
from contracts.judging import observe_ranks_together
from contracts.recordings import RANKS_RECORDED, ranks_recording, record_ranks
from contracts.registry import FAIL, PASS, SKIP
from contracts.subject import Subject

SPECULATORS = FIXTURES / "drafts" / "speculators-default-hd32"  # its embed_tokens equals the target's
SPECFORGE = FIXTURES / "drafts" / "specforge-hd32"  # no embed_tokens: SGLang and vLLM share the target's
CID = "rank-consistency"


def _judged(drafts: dict, engine: str) -> dict:
    subjects = {name: Subject(name, path, HD32_TARGET, engine=EngineSpec.parse(engine), tp=2)
                for name, path in drafts.items()}
    try:
        observe_ranks_together(list(subjects.values()))  # one set of ranks for every draft
        return {name: s.result(CID, [CID]) for name, s in subjects.items()}
    finally:
        for s in subjects.values():
            s.close()


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory):
    """speculators-default-hd32 as saved, with rows 0-99 changed (all in rank 0's shard [0, 256)), and changed
    everywhere."""
    tmp = tmp_path_factory.mktemp("embeddings")
    embed = Checkpoint.open(SPECULATORS).load_tensor("embed_tokens.weight")
    assert torch.equal(embed, Checkpoint.open(HD32_TARGET, require_weights=True).load_tensor(
        "model.embed_tokens.weight").to(embed.dtype))
    partly = embed.clone()
    partly[:100] += 0.5
    return {"equal": SPECULATORS,
            "partly": make_copy(SPECULATORS, tmp / "partly", replace={"embed_tokens.weight": partly}),
            "different": make_copy(SPECULATORS, tmp / "different", replace={"embed_tokens.weight": embed + 0.5})}


@pytest.mark.parametrize("runner", ["v2", "v1"])
def test_vllm_ranks_that_decide_apart_fail_naming_the_rank_that_keeps_its_embedding(embeddings, runner):
    results = _judged(embeddings, f"vllm==0.32.0:{runner}")
    partly = results["partly"]
    assert partly.status == FAIL, partly.summary
    label = {"v1": "Model Runner V1", "v2": "Model Runner V2"}[runner]
    assert f"vLLM 0.32.0, {label} at TP=2: the ranks build different drafters" in partly.summary
    assert "rank 0 keeps the draft's own embed_tokens (rows 0-255)" in partly.summary
    assert "rank 1 shares the target's embed_tokens (rows 256-511)" in partly.summary
    assert partly.evidence["embed_diverging_ranks"] == {"kept": [0], "shared": [1]}
    assert partly.evidence["tp1"]["embed"] == "kept"  # one rank compares the whole table: it keeps the draft's
    assert partly.fix and "vllm#50280" in partly.fix
    for name, decision in (("equal", "shared"), ("different", "kept")):
        r = results[name]
        assert r.status == PASS, (name, r.summary)
        assert [rank["embed"]["decision"] for rank in r.evidence["ranks"]] == [decision, decision]
        assert r.evidence["embed_served"] == r.evidence["embed_tp1"]  # the gathered rows are one rank's
    for r in results.values():
        assert [rank["rank"] for rank in r.evidence["ranks"]] == [0, 1]
        assert all(rank["peak_rss_mb"] < 1024 for rank in r.evidence["ranks"]), r.evidence["ranks"]


def test_sglang_ranks_that_look_up_another_vocabulary_fail(tmp_path):
    small = make_copy(SPECFORGE, tmp_path / "vocab-448", config={"vocab_size": 448})
    results = _judged({"pristine": SPECFORGE, "small": small}, "sglang==0.5.23")
    assert results["pristine"].status == PASS, results["pristine"].summary
    r = results["small"]
    assert r.status == FAIL, r.summary
    assert "SGLang 0.5.23 at TP=2: the ranks together serve other embed_tokens rows than one rank does" in r.summary
    assert "(288 of 512 rows differ, the first 224)" in r.summary
    assert "rank 1 holds rows 224-447 (the target's shard: 256-511)" in r.summary
    assert r.evidence["tp1"]["embed"] == "shared" and r.fix == "set the draft config's vocab_size to the target's (512)"
    assert all(rank["peak_rss_mb"] < 1024 for rank in r.evidence["ranks"])


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "contracts.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=900)


def test_the_cli_judges_ranks_only_when_asked_and_says_what_it_needs(tmp_path):
    done = _cli("check", SPECFORGE, "--target", HD32_TARGET, "--tp", "2", "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["tp"] == 2 and doc["results"][-1]["contract"] == CID and doc["results"][-1]["status"] == PASS
    one = json.loads(_cli("check", SPECFORGE, "--target", HD32_TARGET, "--only", "config", "--format", "json").stdout)
    assert one["tp"] == 1 and CID not in [r["contract"] for r in one["results"]]  # one rank: not a contract to judge
    asked = _cli("check", SPECFORGE, "--target", HD32_TARGET, "--only", CID)
    assert asked.returncode == 3 and "NOT JUDGED for want of --tp N" in asked.stdout, asked.stdout
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    (config_only / "config.json").write_text((HD32_TARGET / "config.json").read_text())
    no_weights = _cli("check", SPECFORGE, "--target", config_only, "--tp", "2", "--only", CID, "--format", "json")
    assert no_weights.returncode == 3
    assert json.loads(no_weights.stdout)["results"][0]["needs"] == "the target's weights"
    bad = _cli("check", SPECFORGE, "--target", HD32_TARGET, "--tp", "0")
    assert bad.returncode == 2 and "is no tensor-parallel size" in bad.stderr


def test_llamacpp_has_no_ranks_to_judge():
    done = _cli("check", SPECFORGE, "--target", HD32_TARGET, "--engine", "llamacpp==2026.10.11549", "--tp", "2",
                "--only", CID, "--format", "json")
    r = json.loads(done.stdout)["results"][0]
    assert done.returncode == 0 and r["status"] == SKIP and "llama.cpp has no tensor-parallel ranks" in r["summary"]


@pytest.mark.parametrize("engine", ["sglang==0.5.23", "vllm==0.32.0", "vllm==0.32.0:v1"])
def test_every_bundled_draft_gets_its_documented_verdicts_at_tp2(engine):
    spec = EngineSpec.parse(engine)
    runner = ["--runner", spec.runner] if spec.runner else []
    done = _cli("check", "--examples", "--engine", str(spec.with_runner(None)), *runner, "--tp", "2",
                "--only", f"config,{CID}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Every example got its documented verdicts." in done.stdout


def test_vllm_at_tp8_is_judged_from_its_shard_functions_in_one_process(embeddings):
    """TP=8 is more ranks than this machine runs as processes: vLLM's own ``_get_indices`` and ``_should_share`` per
    rank, in one process; rows 0-99 now span ranks 0 and 1 (shards of 64 rows)."""
    import os

    env = {**os.environ, "EAGLE3_CONTRACTS_MAX_RANKS": "2"}
    docs = {}
    for name in ("partly", "equal"):
        done = subprocess.run([sys.executable, "-m", "contracts.cli", "check", str(embeddings[name]), "--target",
                               str(HD32_TARGET), "--engine", "vllm==0.32.0", "--tp", "8", "--only", CID, "--format",
                               "json"], capture_output=True, text=True, timeout=900, env=env)
        docs[name] = (done.returncode, json.loads(done.stdout)["results"][0])
    code, partly = docs["partly"]
    assert code == 1 and partly["evidence"]["how"] == "shard-ranges", partly["summary"]
    assert "judged in one process from the engine's shard-range functions" in partly["summary"]
    assert "ranks 0, 1 keep the draft's own embed_tokens (rows 0-127)" in partly["summary"]
    assert "ranks 2, 3, 4, 5, 6, 7 share the target's embed_tokens (rows 128-511)" in partly["summary"]
    assert "_should_share" in partly["evidence"]["wiring"]
    code, equal = docs["equal"]
    assert code == 0 and equal["status"] == PASS and len(equal["evidence"]["ranks"]) == 8


def test_accept_serves_at_tp2_on_vllms_cpu_serving_loop():
    """vLLM's own serving loop at TP=2 on this CPU (its multiprocessing executor, a worker per rank over gloo): the
    bundled converged draft keeps its acceptance (3.91 at TP=1)."""
    done = _cli("accept", FIXTURES / "converged" / "speculators", "--target", FIXTURES / "converged" / "target",
                "--tp", "2", "--no-expectation", "--format", "json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["tensor_parallel_size"] == 2 and result["model_runner"] == "CPUModelRunner"
    assert result["mean_acceptance_length"] > 3.5 and result["rounds"] > 0
    no_ranks = _cli("accept", FIXTURES / "converged" / "speculators", "--target", FIXTURES / "converged" / "target",
                    "--engine", "llamacpp", "--tp", "2")
    assert no_ranks.returncode == 2 and "llama.cpp has no tensor-parallel ranks" in no_ranks.stderr


@pytest.mark.parametrize("release", sorted(RANKS_RECORDED))
def test_the_recorded_ranks_are_what_the_engine_builds_now(release):
    """The fast tier's recording (``tests/fast/test_rank_checks.py``) is only as true as this: re-record with
    ``python -m contracts.recordings --ranks`` when a release's wiring changes what it says."""
    assert json.loads(json.dumps(record_ranks(release))) == json.loads(ranks_recording(release).read_text())


def test_a_tensor_parallel_size_the_engine_refuses_is_a_finding_in_its_own_words():
    """Three ranks of a target with 4 attention heads: SGLang's own bare ``assert`` refuses in every rank; the verdict
    quotes the statement (an empty "AssertionError:" said nothing), exit 1."""
    done = _cli("check", SPECFORGE, "--target", HD32_TARGET, "--tp", "3", "--only", CID, "--format", "json")
    r = json.loads(done.stdout)["results"][0]
    assert done.returncode == 1 and r["status"] == FAIL, r
    assert "rank 0 of 3" in r["summary"] and "assert self.total_num_heads % tp_size == 0" in r["summary"]
