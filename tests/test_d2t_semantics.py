"""d2t-semantics on SGLang 0.5.23, judged on the engine's own hot_token_id: every known way to break the
vocab map fails with side-by-side evidence and a diagnosis; a correct map passes, including the trap."""

from __future__ import annotations

import json

import pytest
import torch

from contracts.bundled import manifest
from tests.conftest import DRAFTS, FIXTURES, TARGET, judge_contract

SELECTED = manifest()["specforge"]["selected_target_ids"]
VOCAB = 512
DRAFT_VOCAB, VOCAB = 64, 512
FREQ = {int(k): v for k, v in json.loads((FIXTURES / "vocab" / "token_freq.json").read_text()).items()}


def judge(path, intended=SELECTED, target=TARGET, **fields):
    return judge_contract("d2t-semantics", path, target, intended_ids=intended, **fields)


def offsets(ids):
    return torch.tensor(ids, dtype=torch.int64) - torch.arange(len(ids))


def t2d_for(ids, vocab=VOCAB):
    t = torch.zeros(vocab, dtype=torch.bool)
    t[torch.tensor(ids)] = True
    return t


@pytest.mark.parametrize("name", ["specforge", "speculators-default", "speculators-train"])
def test_zero_leading_offsets_trap_is_not_flagged(name):
    """Target ids 0..19 are selected, so the first 20 offsets of a correct d2t are 0: that is right."""
    d2t = torch.tensor(manifest()[name]["selected_target_ids"]) - torch.arange(64)
    assert d2t[:20].tolist() == [0] * 20  # the trap is present in every fixture
    result = judge(DRAFTS[name], intended=manifest()[name]["selected_target_ids"])
    assert result.status == "pass", result
    assert "first 20 offsets are 0 because target ids 0..19 are selected" in result.summary


def test_without_recorded_selection_t2d_supplies_the_intent_of_a_trainer_that_sorts():
    result = judge(DRAFTS["specforge"], intended=None, trainer="specforge")
    assert result.status == "pass"
    assert result.evidence["intended_from"] == "t2d, in specforge's ascending order"


def test_without_a_trainer_t2d_supplies_the_set_not_an_order():
    result = judge(DRAFTS["specforge"], intended=None)  # midlayer.* makes SpecForge a guess, not a fact
    assert result.status == "pass" and result.evidence["intended_from"] is None
    assert "strictly increasing" in result.summary


def test_d2t_as_absolute_ids(broken):
    path = broken("specforge", replace={"d2t": torch.tensor(SELECTED, dtype=torch.int64)})
    result = judge(path)
    assert result.status == "fail"
    assert result.evidence["diagnosis"][0].startswith("absolute ids")
    first = result.evidence["first_differences"][0]
    # draft id 1 is the first to differ: the engine adds arange, so draft id i reaches ids[i] + i
    assert first == {"draft_id": 1, "engine_target": 2, "intended": 1}
    assert "d2t[i] = target_id[i] - i" in result.fix


def test_d2t_as_absolute_ids_is_caught_through_t2d_alone(broken):
    path = broken("specforge", replace={"d2t": torch.tensor(SELECTED, dtype=torch.int64)})
    result = judge(path, intended=None)
    assert result.status == "fail" and result.evidence["diagnosis"][0].startswith("absolute ids")


def test_missing_d2t_with_reduced_vocab(broken):
    result = judge(broken("specforge", remove=["d2t"]))
    assert result.status == "fail"
    assert "no d2t although the draft vocab (64) is smaller than the target's (512)" in result.summary
    assert result.evidence["diagnosis"] == ["missing: no d2t, so the engine maps draft id i to target id i"]
    assert result.evidence["first_differences"][0] == {"draft_id": 20, "engine_target": 20, "intended": 22}


def test_duplicate_targets(broken):
    ids = list(SELECTED)
    ids[40] = ids[39]  # two draft ids reach the same target id
    result = judge(broken("specforge", replace={"d2t": offsets(ids), "t2d": t2d_for(SELECTED)}))
    assert result.status == "fail"
    assert "map to a target id another draft id already maps to" in result.summary
    assert any(h.startswith("duplicates") for h in result.evidence["diagnosis"])
    assert result.evidence["first_differences"] == [{"draft_id": 40, "engine_target": ids[39], "intended": SELECTED[40]}]


def test_id_out_of_range(broken):
    ids = list(SELECTED)
    ids[-1] = VOCAB + 3
    result = judge(broken("specforge", replace={"d2t": offsets(ids)}))
    assert result.status == "fail"
    assert result.evidence["out_of_range"] == [{"draft_id": 63, "engine_target": VOCAB + 3}]
    assert "outside the target vocab [0, 512)" in result.summary


def test_t2d_disagreeing_with_d2t(broken):
    other = sorted(set(range(VOCAB)) - set(SELECTED))[:64]
    result = judge(broken("specforge", replace={"t2d": t2d_for(other)}), intended=None)
    assert result.status == "fail"
    assert "d2t and t2d disagree" in result.summary
    assert "64 engine target(s) are not selected in t2d (first: draft id 0 → 0)" in result.evidence["t2d_disagrees"]


def test_t2d_selecting_too_many(broken):
    result = judge(broken("specforge", replace={"t2d": t2d_for(SELECTED + [500])}))
    assert result.status == "fail"
    assert "t2d selects 65 target ids, the draft vocab is 64" in result.evidence["t2d_disagrees"]


def test_d2t_as_floats(broken):
    result = judge(broken("specforge", replace={"d2t": offsets(SELECTED).float()}))
    assert result.status == "fail"
    assert "d2t is float32, not an integer tensor" in result.summary
    assert result.evidence["engine_hot_token_id_dtype"] == "float32"


def test_d2t_with_nan(broken):
    d2t = offsets(SELECTED).float()
    d2t[5] = float("nan")
    result = judge(broken("specforge", replace={"d2t": d2t}))
    assert result.status == "fail"
    assert "NaN" in result.summary


@pytest.mark.parametrize("length", [32, 65])
def test_wrong_length(length, broken):
    ids = (SELECTED + [510])[:length]
    result = judge(broken("specforge", replace={"d2t": offsets(ids)}))
    assert result.status == "fail"
    assert f"hot_token_id has {length} entries but the engine's draft head has 64 logits" in result.summary


def test_shifted_map(broken):
    result = judge(broken("specforge", replace={"d2t": offsets(SELECTED) + 1}))
    assert result.status == "fail"
    assert "shifted: every engine target is the intended one +1" in result.evidence["diagnosis"]


def test_full_vocab_draft_without_d2t_passes(broken):
    """draft vocab = target vocab: no d2t is the identity, which is right."""
    path = broken("specforge", remove=["d2t", "t2d", "lm_head.weight"], config={"draft_vocab_size": None})
    result = judge(path, intended=None)
    assert result.status == "pass", result


def test_config_without_draft_vocab_size_is_an_engine_refusal(broken):
    """SGLang 0.5.23 reads config.draft_vocab_size unconditionally: a config without the key cannot be built."""
    from tests.conftest import DELETE

    result = judge(broken("specforge", config={"draft_vocab_size": DELETE}))
    assert result.status == "fail"
    assert "'LlamaConfig' object has no attribute 'draft_vocab_size'" in result.evidence["engine_error"]


def test_a_frequency_ordered_d2t_without_t2d_is_served_as_trained(broken):
    """Model Optimizer saves no t2d and orders d2t by frequency (calibrate_frequent_vocab): draft id i is the i-th
    most frequent target id. The engines only index through the map, so the order is the trainer's to choose."""
    by_frequency = sorted(SELECTED, key=lambda i: (-FREQ[i], i))
    path = broken("specforge", replace={"d2t": offsets(by_frequency)}, remove=["t2d"])
    result = judge(path, intended=by_frequency)
    assert result.status == "pass", result
    assert "in the trainer's order" in result.summary and result.evidence["not_increasing_at"]


def test_a_non_ascending_d2t_contradicts_a_trainer_that_sorts(broken):
    by_frequency = sorted(SELECTED, key=lambda i: (-FREQ[i], i))
    result = judge(broken("specforge", replace={"d2t": offsets(by_frequency)}), intended=None, trainer="specforge")
    assert result.status == "fail"
    assert "while specforge lays out its draft vocabulary ascending" in result.summary


def test_a_frequency_ordered_d2t_beside_its_t2d_is_served_as_trained(broken):
    """NeMo Automodel saves d2t in frequency order and t2d (a mask: the set, no order) beside it: the engines serve
    it as trained; without the trainer the order is not judged, with a trainer that orders by frequency it passes."""
    by_frequency = sorted(SELECTED, key=lambda i: (-FREQ[i], i))
    path = broken("specforge", replace={"d2t": offsets(by_frequency)})
    unknown = judge(path, intended=None)
    assert unknown.status == "pass", unknown
    assert "not judged" in unknown.summary and "a guess" in unknown.evidence["order"]
    automodel = judge(path, intended=None, trainer="automodel")
    assert automodel.status == "pass" and "in the trainer's order" in automodel.summary
    assert automodel.evidence["order"].startswith("not ascending: automodel's order")


def test_a_permuted_d2t_off_the_t2d_set_still_fails_without_a_trainer(broken):
    wrong = sorted(SELECTED, key=lambda i: (-FREQ[i], i))[:-1] + [max(set(range(VOCAB)) - set(SELECTED))]
    result = judge(broken("specforge", replace={"d2t": offsets(wrong)}), intended=None)
    assert result.status == "fail" and "d2t and t2d disagree" in result.summary
