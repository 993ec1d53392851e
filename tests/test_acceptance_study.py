"""The acceptance study's breaks: each makes, on a converged draft, exactly the break its contract exists for (the
study's measurements themselves run in `tox -e acceptance`; tests/test_vllm.py measures the d2t break)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from contracts.tables.acceptance_study import BREAKS, agreement
from contracts.bundled import converged_subjects

BY_NAME = {b.name: b for b in BREAKS}


@pytest.fixture
def draft(tmp_path):
    (base,) = [s for s in converged_subjects() if s.name == "converged-speculators"]
    copy = tmp_path / "draft"
    shutil.copytree(base.checkpoint_path, copy)
    return base.checkpoint_path, copy


def _changed(src, dst):
    a, b = load_file(str(src / "model.safetensors")), load_file(str(dst / "model.safetensors"))
    return a, b, json.loads((src / "config.json").read_text()), json.loads((dst / "config.json").read_text())


def test_every_break_names_a_contract_and_applies_to_a_speculators_draft(draft):
    src, dst = draft
    for brk in BREAKS[1:]:
        shutil.rmtree(dst)
        shutil.copytree(src, dst)
        assert brk.contract in {"d2t-semantics", "hidden-width", "forward-parity", "key-naming"}
        assert brk.make(dst), brk.name
        a, b, ca, cb = _changed(src, dst)
        assert (a.keys() != b.keys() or any(not torch.equal(a[k], b[k]) for k in a) or ca != cb), brk.name


def test_the_d2t_breaks_are_the_three_known_mistakes(draft):
    src, dst = draft
    d2t = load_file(str(src / "model.safetensors"))["d2t"]
    for name, want in (("d2t zeroed", torch.zeros_like(d2t)), ("d2t absolute", d2t + torch.arange(d2t.shape[0]))):
        shutil.rmtree(dst)
        shutil.copytree(src, dst)
        BY_NAME[name].make(dst)
        assert torch.equal(load_file(str(dst / "model.safetensors"))["d2t"], want)
    BY_NAME["d2t missing"].make(dst)
    assert "d2t" not in load_file(str(dst / "model.safetensors"))


def test_the_aux_ids_move_one_layer_and_the_layer_moves_under_a_prefix_no_loader_maps(draft):
    src, dst = draft
    BY_NAME["aux ids one layer off"].make(dst)
    ids = json.loads((src / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    assert json.loads((dst / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [i + 1 for i in ids]
    BY_NAME["layer under a dropped prefix"].make(dst)
    keys = load_file(str(dst / "model.safetensors")).keys()
    assert not [k for k in keys if k.startswith("layers.0.")] and [k for k in keys if k.startswith("decoder.layers.0.")]


def _row(brk, length, root_causes, contract="d2t-semantics"):
    return {"draft": "d", "break": brk, "contract": contract, "acceptance": {"mean_acceptance_length": length},
            "verdict_v1": {"root_causes": root_causes}}


def test_agreement_counts_a_predicted_drop_and_names_each_disagreement():
    rows = [_row("pristine", 3.9, []), _row("d2t zeroed", 1.03, ["d2t-semantics"]),
            _row("head replaced", 1.0, []), _row("norm flipped", 3.8, ["config"])]
    result = agreement(rows)
    assert (result["variants"], result["agree"]) == (3, 1)
    assert result["disagreements"] == ["d / head replaced: all pass, yet acceptance dropped",
                                       "d / norm flipped: a root-cause failure, yet acceptance held"]


def test_a_variant_check_could_not_judge_or_not_measured_is_not_counted_either_way():
    unjudged = _row("d2t absolute", 1.0, [])
    unjudged["verdict_v1"]["error"] = "vllm==0.32.0:v1 worker exited (1): IndexError"
    failed_job = _row("d2t missing", None, ["d2t-semantics"])
    failed_job["acceptance"] = {"error": "the acceptance job in vLLM 0.32.0's environment failed: OSError"}
    result = agreement([_row("pristine", 3.9, []), unjudged, failed_job, _row("d2t zeroed", 1.03, ["d2t-semantics"])])
    assert (result["variants"], result["agree"], result["disagreements"]) == (1, 1, [])
    assert [u.split(":")[0] for u in result["unjudged"]] == ["d / d2t absolute", "d / d2t missing"]


def test_a_break_is_predicted_only_by_a_root_cause_its_pristine_draft_does_not_have():
    """Model Optimizer's converged draft already fails forward-parity (the yarn rope its export writes) and, on
    Model Runner V1, hidden-width: a break of forward-parity cannot show whether it is caught, and a break that adds
    d2t-semantics is predicted by that alone."""
    pristine = _row("pristine", 3.69, ["hidden-width", "forward-parity"])
    head = _row("head replaced", 1.0, ["hidden-width", "forward-parity"], "forward-parity")
    zeroed = _row("d2t zeroed", 1.02, ["d2t-semantics", "hidden-width", "forward-parity"])
    prefix = _row("layer under a dropped prefix", 3.6, ["hidden-width", "forward-parity"], "key-naming")
    result = agreement([pristine, head, zeroed, prefix])
    assert (result["variants"], result["agree"]) == (2, 2)
    assert result["unjudged"] == ["d / head replaced: forward-parity already fails on the pristine draft"]
    assert result["pristine"] == [{"draft": "d", "root_causes": ["hidden-width", "forward-parity"],
                                   "mean_acceptance_length": 3.69, "trainer_expectation": None, "gap": None}]


def test_the_loop_beside_is_compared_collapse_for_collapse_and_each_parting_named():
    from contracts.tables.acceptance_study import beside_agreement

    def row(brk, ours, theirs, third=3.0):
        r = _row(brk, ours, [])
        r["beside"] = {"llamacpp==X": {"refused": "llama.cpp X did not serve the draft: x"} if theirs is None else
                       {"mean_acceptance_length": theirs}, "openvino==Y": {"mean_acceptance_length": third}}
        return r

    rows = [row("pristine", 3.9, 3.8, 3.86), row("d2t zeroed", 1.03, 1.03, 1.03), row("aux ids one layer off", 3.9, 1.2),
            row("layer under a dropped prefix", 1.0, None), row("norm flipped", 3.85, 3.79)]
    unmeasured = row("d2t missing", 1.0, 1.0)
    unmeasured["beside"]["llamacpp==X"] = {"error": "the acceptance job failed"}
    result = beside_agreement([*rows, unmeasured], "llamacpp==X", "vllm==Z")
    assert (result["variants"], result["same"]) == (4, 3)
    assert result["parted"] == ["d / aux ids one layer off: llamacpp==X collapses, vllm==Z holds"]
    other = beside_agreement([*rows, unmeasured], "openvino==Y", "vllm==Z")  # each engine beside on its own
    assert (other["variants"], other["same"]) == (5, 3)
    assert other["parted"][0] == "d / aux ids one layer off: openvino==Y collapses, vllm==Z holds"


def test_a_draft_the_loop_beside_already_serves_collapsed_is_not_compared():
    """OpenVINO GenAI serves Model Optimizer's pristine converged draft on a random layer (1.13): none of its
    variants can collapse further, so none is counted as 'holds'."""
    from contracts.tables.acceptance_study import beside_agreement

    def row(brk, ours, theirs):
        r = _row(brk, ours, [])
        r["beside"] = {"openvino==Y": {"mean_acceptance_length": theirs}}
        return r

    result = beside_agreement([row("pristine", 3.69, 1.13), row("d2t zeroed", 1.0, 1.0), row("head replaced", 1.02, 1.0)],
                              "openvino==Y", "vllm==Z")
    assert (result["variants"], result["parted"]) == (0, [])
    assert result["not_compared"] == ["d: openvino==Y's loop serves the pristine draft at 1.13 (vllm==Z: 3.69)"]
