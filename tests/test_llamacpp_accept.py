"""``accept --engine llamacpp``: acceptance on llama.cpp's own server (xllamacpp, the GGUFs its release's converter
writes, its EAGLE-3 loop and counters), beside the trainer's expectation; the converter's and the server's refusals
are findings (exit 1), what cannot be asked is a usage error (exit 2)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import FIXTURES, make_copy

from contracts.cli import main

CONVERGED = FIXTURES / "converged"
RELEASE = "llamacpp==2026.10.11549"


def _accept(capsys, tmp_path, draft, *options, code=0, target=CONVERGED / "target") -> dict:
    out = tmp_path / f"accept-{draft.name}.json"
    got = main(["accept", str(draft), "--target", str(target), "--engine", RELEASE, "--format", "json",
                "--output", str(out), *options])
    assert got == code, capsys.readouterr().err
    return json.loads(out.read_text())


def test_a_converged_draft_is_accepted_on_llamacpps_loop_as_its_trainer_expects(capsys, tmp_path):
    from contracts.accept import NOISE

    result = _accept(capsys, tmp_path, CONVERGED / "speculators")
    assert result["engine"] == {"name": "llamacpp", "version": "2026.10.11549"} and result["runner"] is None
    assert "llama.cpp's server" in result["path"]
    assert result["rounds"] > 0 and result["mean_acceptance_length"] == 1 + result["accepted_tokens"] / result["rounds"]
    assert result["response_draft_counters"] == {"draft_n": result["draft_tokens"],
                                                 "draft_n_accepted": result["accepted_tokens"]}
    assert result["mean_acceptance_length"] >= 3.0 and result["generated_tokens"] == 4 * 64
    assert any("target_layers = [2, 4, 5]" in d for d in result["decisions"])
    expected = result["trainer_expectation"]
    assert (expected["trainer"], expected["version"]) == ("speculators", "0.9.0")
    assert abs(result["gap"]) <= NOISE and "verdict" not in result


def test_a_zeroed_d2t_collapses_acceptance_on_llamacpp_as_in_the_trainers_own_forward(capsys, tmp_path):
    """The converter turns the offsets into absolute ids as they stand: zeroed, draft id i proposes target id i. The
    trainer's own forward collapses on the same weights too; the collapse is still a failure, and check on llama.cpp
    names d2t-semantics."""
    draft = make_copy(CONVERGED / "speculators", tmp_path / "zeroed", replace={"d2t": torch.zeros(64, dtype=torch.int64)})
    result = _accept(capsys, tmp_path, draft, code=1)
    assert result["mean_acceptance_length"] <= 1.2
    assert result["trainer_expectation"]["mean_acceptance_length"] <= 1.2 and result["verdict"] == "collapsed"
    assert "d2t-semantics" in result["explained_by"], result["check"]


def test_a_rope_the_export_changed_is_served_below_the_trainers_expectation_and_check_says_what_it_sees(capsys,
                                                                                                    tmp_path):
    """Model Optimizer's converged draft with its declared rope base changed: its own speculative generation drafts
    as trained, llama.cpp's converter writes the declared base (``eagle3.rope.freq_base``); the gap is a verdict, and
    check on llama.cpp names forward-parity for it, judged against Model Optimizer's own forward made on the spot for
    the copy (before, no reference travelled with a copy and check named no root cause), and warns that the base
    differs from the target's."""
    from contracts.accept import NOISE

    draft = make_copy(CONVERGED / "modelopt", tmp_path / "rope", config={"rope_theta": 100.0})
    result = _accept(capsys, tmp_path, draft, code=1)
    assert result["gap"] > NOISE and result["verdict"] == "below the trainer's expectation"
    assert "forward-parity" in result["explained_by"], result["check"]
    assert any(w.startswith("config: ") and "rope base 100.0 differs from the target's" in w for w in result["warned_by"])


def test_the_converters_refusal_is_a_finding_with_its_own_words(capsys):
    code = main(["accept", str(FIXTURES / "drafts" / "specforge-eagle31-hd32"), "--target",
                 str(FIXTURES / "targets" / "llama-tiny-hd32"), "--engine", RELEASE, "--no-expectation"])
    err = capsys.readouterr().err
    assert code == 1
    assert "llama.cpp 2026.10.11549 did not serve the draft: llama.cpp's converter refused the draft: " \
           "ValueError: Can not map tensor 'fc_norm" in err


def test_a_draft_without_d2t_is_refused_by_llamacpps_loader_with_the_cause_it_logs(capsys, tmp_path):
    """Without d2t llama.cpp takes the draft's vocabulary for the target's (512) and its loader refuses the 64-row
    head: the refusal carries the first error llama.cpp logged, not only xllamacpp's generic one."""
    draft = make_copy(CONVERGED / "speculators", tmp_path / "no-d2t", remove=["d2t"])
    code = main(["accept", str(draft), "--target", str(CONVERGED / "target"), "--engine", RELEASE, "--no-expectation",
                 "--prompts", "1"])
    err = capsys.readouterr().err
    assert code == 1 and "Failed to init server" in err
    assert "(llama_model_load: error loading model: check_tensor_dims: tensor 'output.weight' has wrong shape; " \
           "expected 64, 512, got 64, 64, 1, 1)" in err


@pytest.mark.parametrize("args,why", [(["--engine", "llamacpp", "--runner", "v1"], "llama.cpp is judged on its one speculative loop"),
                                      (["--engine", "llamacpp=="], "give a version after '=='")])
def test_what_llamacpp_cannot_be_asked_is_one_line(capsys, args, why):
    code = main(["accept", str(CONVERGED / "speculators"), "--target", str(CONVERGED / "target"), *args])
    err = capsys.readouterr().err
    assert code == 2 and why in err and len(err.strip().splitlines()) == 1


def test_a_release_whose_metrics_count_no_verification_steps_says_so_instead_of_a_length(capsys, tmp_path):
    """xllamacpp 2026.8.10229 (the first that converts ``norm_before_fc``) serves the draft, and its responses count
    drafted and accepted tokens, but nothing counts the verification steps a mean length divides by."""
    out = tmp_path / "accept.json"
    code = main(["accept", str(CONVERGED / "speculators"), "--target", str(CONVERGED / "target"), "--engine",
                 "llamacpp==2026.8.10229", "--no-expectation", "--prompts", "2", "--format", "json", "--output", str(out)])
    assert code == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    assert result["mean_acceptance_length"] is None and "spec_decode_num_drafts_total" in result["unavailable"]
    assert 0 < result["accepted_tokens"] <= result["draft_tokens"]
