"""A fourth engine is one folder: `tests/data/engines/replayed_sglang/` (a profile and an adapter that answers the nine
observations from SGLang 0.5.23's recordings) is found through ``EAGLE3_CONTRACTS_ENGINE_PATH``, and the CLI, the
plugin, `matrix` and the compatibility table judge with it, with no file outside that folder naming it. Each run is a
fresh process: the registry of engines is read once, at import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from contracts.engine_spec import EngineSpec
from contracts.recordings import load_recordings

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "tests" / "data" / "engines"
DRAFTS, TARGETS = REPO / "fixtures" / "drafts", REPO / "fixtures" / "targets"
RECORDED = load_recordings(EngineSpec("sglang", "0.5.23"))


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "EAGLE3_CONTRACTS_ENGINE_PATH": str(FOLDER)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_cli_judges_with_an_engine_from_a_folder(tmp_path):
    """A flat draft as saved, and a speculators draft in the flat form the replayed engine's profile says it reads:
    every contract's verdict is the one SGLang 0.5.23 gave when it was recorded."""
    for name, target in (("specforge", "llama-tiny"), ("speculators-default", "llama-tiny")):
        done = _run(["-m", "contracts.cli", "check", str(DRAFTS / name), "--target", str(TARGETS / target),
                     "--engine", "replayed", "--format", "json"], tmp_path)
        assert done.returncode in (0, 1), done.stderr
        got = {r["contract"]: r["status"] for r in json.loads(done.stdout)["results"]}
        assert got == RECORDED[name]["verdicts"], name
    listed = _run(["-m", "contracts.cli", "check", str(DRAFTS / "specforge"), "--engine", "tgi"], tmp_path)
    assert listed.returncode == 2 and "replayed==VERSION" in listed.stderr


def test_the_plugin_and_matrix_judge_with_it(tmp_path):
    results = tmp_path / "results.json"
    done = _run(["-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "-m", "contracts", "--engine",
                 "replayed", f"--contracts-results={results}", "--rootdir", str(tmp_path), "-k",
                 "specforge-hd32 or modelopt-default-hd32"], REPO)
    rows = json.loads(results.read_text())
    assert {r["engine"] for r in rows} == {"replayed"}, done.stdout[-2000:]
    for r in rows:
        assert r["status"] == RECORDED[r["subject"]]["verdicts"][r["contract"]], r
    assert {r["subject"] for r in rows} == {"specforge-hd32", "modelopt-default-hd32"} and len(rows) == 14
    matrix = _run(["-m", "contracts.cli", "matrix", str(DRAFTS / "specforge-hd32"), "--target",
                   str(TARGETS / "llama-tiny-hd32"), "--engines", "replayed", "--format", "json"], tmp_path)
    assert matrix.returncode in (0, 1), matrix.stderr
    assert "replayed" in matrix.stdout and "key-naming" in matrix.stdout


def test_the_compatibility_table_holds_its_row(tmp_path):
    data = tmp_path / "part.json"
    done = _run(["-m", "contracts.tables.compatibility", "sweep", "--engines", "replayed", "--data", str(data)],
                tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    render = _run(["-c", f"from contracts.tables import compatibility as c; print(c.render(c.load({str(data)!r})))"],
                  tmp_path)
    rows = [line for line in render.stdout.splitlines() if line.startswith("| Replayed SGLang")]
    assert rows and "1 Replayed SGLang releases judged" in render.stdout
    entry = json.loads(data.read_text())["releases"]["replayed"]
    assert "error" not in entry
    assert {c: v["status"] for c, v in entry["cells"]["specforge"].items()} == RECORDED["specforge"]["verdicts"]


def test_nothing_outside_its_folder_names_it():
    """The engine needed no change anywhere else in the code: only its folder and this test say its name."""
    named = []
    for folder in ("contracts", "tests", "benchmarks"):
        for p in (REPO / folder).rglob("*"):
            if p.is_file() and p.suffix in (".py", ".md", ".json", ".toml", ".ini", ".txt") \
                    and FOLDER not in p.parents and p != Path(__file__).resolve():
                if "replayed_sglang" in p.read_text(errors="replace") or "Replayed SGLang" in p.read_text(
                        errors="replace"):
                    named.append(str(p.relative_to(REPO)))
    assert named == []
