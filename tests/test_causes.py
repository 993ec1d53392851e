"""Root causes vs consequences: a failure that follows from another contract's failure says so."""

from contracts.checks import mark_causes
from contracts.registry import FAIL, PASS, Result
from contracts.report import render_text


def _results(**statuses):
    return [Result(cid.replace("_", "-"), status, f"{cid} {status}") for cid, status in statuses.items()]


def test_forward_parity_follows_from_dropped_weights_and_hidden_width_is_its_own_cause():
    results = mark_causes(_results(key_naming=FAIL, tensor_shapes=PASS, d2t_semantics=PASS, hidden_width=FAIL,
                                   embed_head=PASS, config=PASS, forward_parity=FAIL))
    by = {r.contract: r.to_dict() for r in results}
    assert by["key-naming"]["root_cause"] is True and by["key-naming"]["follows_from"] == []
    assert by["hidden-width"]["root_cause"] is True
    assert by["forward-parity"]["root_cause"] is False
    assert by["forward-parity"]["follows_from"] == ["key-naming"]
    assert "follows_from" not in by["config"] and "root_cause" not in by["config"]  # a pass carries neither


def test_consequences_are_transitive_through_failing_contracts():
    results = mark_causes(_results(key_naming=FAIL, embed_head=FAIL, config=FAIL, forward_parity=FAIL))
    by = {r.contract: r.follows_from for r in results}
    assert by["embed-head"] == ["key-naming"]
    assert by["forward-parity"] == ["key-naming", "embed-head", "config"]
    assert by["config"] == []


def test_a_lone_forward_parity_failure_is_a_root_cause():
    (result,) = mark_causes(_results(forward_parity=FAIL))
    assert result.to_dict()["root_cause"] is True


def test_the_text_report_labels_each_failure():
    results = mark_causes(_results(key_naming=FAIL, forward_parity=FAIL))
    text = render_text([{"checkpoint": "d", "target": None, "engine": {"name": "sglang", "version": "0.5.9"},
                         "trainer_format": "speculators", "results": [r.to_dict() for r in results],
                         "duration_s": 0.1}])
    assert "FAIL  key-naming [root cause]: key_naming fail" in text
    assert "FAIL  forward-parity [follows from key-naming]: forward_parity fail" in text
