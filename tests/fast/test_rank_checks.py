"""The fast tier's ``rank-consistency``: the check judged on a drafter two ranks of each engine really built
(``fixtures/observed/ranks``, recorded by ``python -m contracts.recordings --ranks``; the engine tier keeps it equal to
a fresh run), beside that example's recorded one-rank answers. The pristine recording passes; each hand edit is the
observation of a real failure (vLLM's per-rank share decision, vllm#50158; SGLang's embedding looked up by another
vocabulary's ranges) and must fail with its message."""

from __future__ import annotations

import json

import pytest

from contracts.bundled import bundled_subjects
from contracts.engine_spec import EngineSpec
from contracts.observations import RankObservation
from contracts.recordings import RANKS_RECORDED, RANKS_TP, load_recordings, ranks_recording, replay_subject
from contracts.registry import FAIL, PASS, SKIP

CID = "rank-consistency"


def judged(release: str, edit=None, tp: int = RANKS_TP):
    name = RANKS_RECORDED[release]
    observation = json.loads(ranks_recording(release).read_text())
    if edit is not None:
        edit(observation)
    subject = next(s for s in bundled_subjects(EngineSpec.parse(release)) if s.name == name)
    replay_subject(subject, load_recordings(EngineSpec.parse(release))[name])
    subject.tp = tp
    subject.__dict__["_ranks"] = (RankObservation(**observation), None)
    try:
        return subject.result(CID, [CID])
    finally:
        subject.close()


def _set(role: str, key: str, values: list):
    def edit(observation):
        for rank, value in zip(observation["ranks"], values):
            rank[role][key] = value
    return edit


@pytest.mark.parametrize("release", sorted(RANKS_RECORDED))
def test_the_recorded_ranks_pass(release):
    r = judged(release)
    assert r.status == PASS, r.summary
    assert "every rank builds the drafter one rank builds" in r.summary and "equal one rank's" in r.summary


@pytest.mark.parametrize("release", sorted(RANKS_RECORDED))
def test_ranks_that_decide_apart_fail_naming_each(release):
    r = judged(release, _set("embed", "decision", ["kept", "shared"]))
    assert r.status == FAIL
    assert ("the ranks build different drafters: rank 0 keeps the draft's own embed_tokens (rows 0-255); "
            "rank 1 shares the target's embed_tokens (rows 256-511)") in r.summary
    assert r.evidence["embed_diverging_ranks"] == {"kept": [0], "shared": [1]}


def test_every_rank_deciding_otherwise_than_one_rank_fails():
    r = judged("vllm==0.32.0", _set("embed", "decision", ["kept", "kept"]))
    assert r.status == FAIL and "every rank keeps the draft's own embed_tokens; one rank (TP=1) shares the target's" \
        in r.summary


def test_rows_served_together_that_are_not_one_ranks_fail():
    def shifted(observation):
        for rank in observation["ranks"]:
            rank["embed"]["served"]["digest"] = "0" * 32
        observation["ranks"][0]["embed"]["differs"] = {"target": {"rows": 288, "of": 512, "first": 224}}
        observation["ranks"][1]["embed"]["rows"] = [224, 448]
    r = judged("sglang==0.5.23", shifted)
    assert r.status == FAIL
    assert "the ranks together serve other embed_tokens rows than one rank does (288 of 512 rows differ, the first " \
           "224)" in r.summary and "rank 1 holds rows 224-447 (the target's shard: 256-511)" in r.summary
    assert r.fix == "set the draft config's vocab_size to the target's (512)"


def test_ranks_serving_each_other_different_rows_fail():
    def apart(observation):
        observation["ranks"][1]["lm_head"]["served"]["digest"] = "1" * 32
    r = judged("vllm==0.32.0", apart)
    assert r.status == FAIL and "the ranks serve different lm_head rows to each other" in r.summary


def test_judged_from_shard_ranges_a_lookup_by_other_rows_fails():
    def from_shards(observation):
        observation["how"] = "shard-ranges"
        for rank in observation["ranks"]:
            for role in ("embed", "lm_head"):
                rank[role].pop("served")
        observation["ranks"][1]["embed"]["rows"] = [224, 448]
    r = judged("sglang==0.5.23", from_shards)
    assert r.status == FAIL and "judged in one process from the engine's shard-range functions" in r.summary
    assert "looks it up by other rows: rank 1 rows 224-447 (the target's shard: 256-511)" in r.summary


def test_one_rank_is_not_judged_unless_asked():
    subject = next(s for s in bundled_subjects(EngineSpec.parse("vllm==0.32.0")) if s.name == "speculators-default-hd32")
    replay_subject(subject, load_recordings(EngineSpec.parse("vllm==0.32.0"))["speculators-default-hd32"])
    try:
        assert CID not in {r.contract for r in subject.run(["config"])}
        assert CID not in {r.contract for r in subject.run()}  # (tp=1: not a contract of this run)
    finally:
        subject.close()
    r = judged("vllm==0.32.0", tp=1)
    assert r.status == SKIP and r.needs == "--tp N (the deployment's tensor-parallel size)"
