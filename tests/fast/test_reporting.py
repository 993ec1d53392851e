"""What a report says and how a run ends, judged without an engine: a contract left unjudged for want of an input the
user could give is not a pass (exit 3, with the input named), a failure's reproduce line runs as printed for the way
the tool was invoked, a draft judged in its hand conversion gets one fix (convert) for its aux ids rather than two,
a collapse in ``accept`` is a failure whatever the trainer expected, and a first run's setup time is said apart."""

from __future__ import annotations

import pytest
from test_checks_on_recordings import verdict

from contracts.accept import collapsed, render_text
from contracts.report import FAILED, NOT_JUDGED, OK, command_prefix, exit_code, not_judged_lines, render


def _report(*results, setup=0.0):
    return {"checkpoint": "my-drafter", "target": None, "engine": {"name": "sglang", "version": "0.5.23"},
            "engine_spec": "sglang", "path": None, "trainer_format": "specforge", "duration_s": 12.0 + setup,
            "setup_s": setup, "results": [dict(r) for r in results]}


SKIP_NEEDS = {"contract": "hidden-width", "status": "skip", "summary": "not judged: no --target", "evidence": {},
              "fix": None, "needs": "--target DIR"}
SKIP_HERE = {"contract": "forward-parity", "status": "skip", "summary": "not judged: beyond the bound", "evidence": {},
             "fix": None}
FAILURE = {"contract": "config", "status": "fail", "summary": "ignored", "evidence": {}, "fix": "retrain",
           "follows_from": [], "root_cause": True}


def test_a_contract_unjudged_for_want_of_an_input_is_exit_3_unless_allowed():
    assert exit_code([_report(SKIP_NEEDS)]) == NOT_JUDGED == 3
    assert exit_code([_report(SKIP_NEEDS)], allow_not_judged=True) == OK
    assert exit_code([_report(SKIP_HERE)]) == OK  # nothing the user could give would judge it
    assert exit_code([_report(SKIP_NEEDS, FAILURE)]) == FAILED  # a failure says more than a gap
    assert not_judged_lines([_report(SKIP_NEEDS)]) == [
        "NOT JUDGED for want of --target DIR: hidden-width (give it, or --allow-not-judged to accept this)"]
    assert "NOT JUDGED for want of --target DIR: hidden-width" in render([_report(SKIP_NEEDS)], "text")


@pytest.mark.parametrize("argv0,env,expected", [
    ("/work/.tox/check/bin/eagle3-contracts", {"TOX_ENV_NAME": "check", "TOX_ENV_DIR": "{root}/.tox/check"},
     "tox -e check --"),
    ("/somewhere/python3.11/site-packages/contracts/cli.py", {}, "{python} -m contracts.cli"),
    ("/usr/lib/python3/dist-packages/pytest", {}, "eagle3-contracts"),
])
def test_the_reproduce_line_runs_as_the_tool_was_invoked(monkeypatch, tmp_path, argv0, env, expected):
    import sys

    (tmp_path / "tox.ini").write_text("[tox]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOX_ENV_NAME", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(root=tmp_path))
    monkeypatch.setattr(sys, "argv", [argv0])
    assert command_prefix() == expected.format(python=sys.executable)
    text = render([_report(FAILURE)], "text")
    assert f"reproduce: {expected.format(python=sys.executable)} check my-drafter --only config" in text


def test_a_console_script_off_the_path_is_named_by_its_path(monkeypatch, tmp_path):
    import sys

    monkeypatch.delenv("TOX_ENV_NAME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/eagle3-contracts"])
    assert command_prefix() == "/opt/venv/bin/eagle3-contracts"


def test_a_hand_converted_draft_gets_one_fix_for_its_aux_ids_convert():
    """speculators' library-default draft on SGLang is judged in its verbatim conversion: hidden-width's fix is what
    convert writes (before: "write eagle_config..." beside config's "deploy what convert writes")."""
    result = verdict("speculators-default-hd32", "hidden-width")
    assert result.status == "fail"
    assert result.fix.startswith("deploy what `eagle3-contracts convert --to sglang "), result.fix
    assert "eagle_config.eagle_aux_hidden_state_layer_ids: [1, 3, 4]" in result.fix


ACCEPTED = {"draft": "zeroed", "engine": {"name": "vllm", "version": "0.32.0"}, "path": "vLLM Model Runner V1",
            "num_speculative_tokens": 3, "temperature": 0.0, "prompts": 4, "max_tokens": 64, "rounds": 250,
            "accepted_tokens": 8, "draft_tokens": 750, "acceptance_rate_per_position": [0.03, 0.0, 0.0],
            "seconds_wall": 20, "seconds_build": 5}


def test_a_collapse_is_a_failure_even_when_the_trainer_expected_it():
    result = {**ACCEPTED, "mean_acceptance_length": 1.03, "gap": 0.0, "noise": 0.25, "verdict": "collapsed",
              "trainer_expectation": {"trainer": "speculators", "version": "0.9.0", "mean_acceptance_length": 1.03},
              "check": {"engine": "vllm==0.32.0:v1", "root_causes": ["d2t-semantics"], "failed": ["d2t-semantics"],
                        "warnings": [], "not_judged": []}}
    assert collapsed(result)
    text = render_text(result)
    assert "FAIL: acceptance collapsed (1.03" in text and "explained by d2t-semantics" in text
    assert "the break is in the checkpoint itself" in text
    assert not collapsed({"mean_acceptance_length": 2.4})
    assert collapsed({"mean_acceptance_length": None, "draft_tokens": 90, "accepted_tokens": 0})  # no rounds counted


def test_a_report_says_its_check_time_and_its_setup_time_apart():
    text = render([_report(FAILURE, setup=95.0)], "text")
    assert "(specforge checkpoint, target -, engine sglang 0.5.23, 12.0s checking + 95s making environments and " \
           "references once, kept for later runs)" in text
