"""``accept --engine openvino``: acceptance on OpenVINO GenAI's own pipeline on a CPU (the IRs its exporter writes,
``LLMPipeline`` with the draft model, its counters), the deployment itself, beside the trainer's expectation; the
exporter's refusal is a finding (exit 1)."""

from __future__ import annotations

import json

import torch
from conftest import FIXTURES, make_copy

from contracts.cli import main

CONVERGED = FIXTURES / "converged"
RELEASE = "openvino==2026.4.1.0"


def _accept(capsys, tmp_path, draft, *options, code=0, target=CONVERGED / "target") -> dict:
    out = tmp_path / f"accept-{draft.name}.json"
    got = main(["accept", str(draft), "--target", str(target), "--engine", RELEASE, "--format", "json",
                "--output", str(out), *options])
    assert got == code, capsys.readouterr().err
    return json.loads(out.read_text()) if out.is_file() else {}


def test_a_converged_draft_is_accepted_on_genais_pipeline_as_its_trainer_expects(capsys, tmp_path):
    from contracts.accept import NOISE

    result = _accept(capsys, tmp_path, CONVERGED / "specforge")
    assert result["engine"] == {"name": "openvino", "version": "2026.4.1.0"} and result["runner"] is None
    assert "LLMPipeline" in result["path"]
    assert result["mean_acceptance_length"] == 1 + result["accepted_tokens"] / result["rounds"]
    assert result["mean_acceptance_length"] >= 3.5 and result["generated_tokens"] == 4 * 64
    assert result["layers"]["hidden_layers_list"] == [1, 3, 4]
    assert result["trainer_expectation"]["trainer"] == "specforge"
    assert abs(result["gap"]) <= NOISE and "verdict" not in result


def test_a_zeroed_d2t_collapses_acceptance_on_genai_and_check_names_d2t_semantics(capsys, tmp_path):
    """GenAI's sampler adds d2t to each draft id: zeroed, draft id i proposes target id i, and the target rejects
    nearly every draft; check on OpenVINO names d2t-semantics."""
    draft = make_copy(CONVERGED / "specforge", tmp_path / "zeroed", replace={"d2t": torch.zeros(64, dtype=torch.int64)})
    result = _accept(capsys, tmp_path, draft, code=1)
    assert result["mean_acceptance_length"] < 1.1 and result["verdict"] == "collapsed"
    assert "d2t-semantics" in result["explained_by"], result["check"]


def test_a_speculators_draft_as_saved_is_refused_by_the_exporter(capsys, tmp_path):
    """The exporter cannot read speculators' nested config: the engine's refusal is the finding (exit 1)."""
    _accept(capsys, tmp_path, CONVERGED / "speculators", "--no-expectation", code=1)
    assert "optimum-intel's exporter cannot read this draft" in capsys.readouterr().err
