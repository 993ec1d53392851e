"""The pytest plugin as a training repository uses it: `pytest -m contracts --checkpoint DIR --target DIR`
in a directory that knows nothing of this repo (the plugin comes from the installed entry point)."""

from __future__ import annotations

import subprocess
import sys

import torch

from tests.conftest import DRAFTS, TARGET


def run_pytest(cwd, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def outcome(out: str, test_id: str) -> str | None:
    """PASSED/FAILED for ``contracts::<test_id>`` in the -rA summary (node ids may carry a relative prefix)."""
    for line in out.splitlines():
        word, _, rest = line.partition(" ")
        if f"contracts::{test_id}" in rest.split(" - ")[0]:
            return word
    return None


def test_user_checkpoints_become_contract_items(tmp_path, broken):
    bad = broken("specforge", add={"layers.1.mlp.up_proj.weight": torch.randn(128, 64)})
    proc = run_pytest(tmp_path, "-m", "contracts", "--checkpoint", bad, "--target", TARGET,
                      "--checkpoint", DRAFTS["speculators-default"], "--target", TARGET)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert outcome(out, f"key-naming[0-{bad.name}]") == "FAILED"
    assert outcome(out, f"tensor-shapes[0-{bad.name}]") == "PASSED"
    assert outcome(out, "key-naming[1-speculators-default]") == "PASSED"
    assert "1 tensor(s) dropped by the engine's loader: `layers.1.mlp.up_proj.weight`" in out
    assert "fix: rename `layers.1.mlp.up_proj.weight`" in out


def test_contracts_only_and_deselection(tmp_path):
    proc = run_pytest(tmp_path, "-m", "contracts", "--checkpoint", DRAFTS["specforge"], "--contracts-only", "key-naming")
    assert proc.returncode == 0, proc.stdout
    assert "1 passed" in proc.stdout
    proc = run_pytest(tmp_path, "-m", "not contracts", "--checkpoint", DRAFTS["specforge"])
    assert proc.returncode == 5  # everything deselected: no tests ran


def test_one_engine_release_is_judged_by_one_xdist_worker(tmp_path):
    """`-n N --dist loadgroup` must keep each engine release on one worker (one environment, one engine start): the
    sweep depends on it. pytest 9.2 broke pytest-xdist's own marker silently (3.8 still sets item._nodeid), so the
    plugin names each item's group itself (tests/test_build_tiny.py runs it on the newest pytest too)."""
    proc = run_pytest(tmp_path, "-m", "contracts", "--checkpoint", DRAFTS["specforge"], "--target", TARGET,
                      "--checkpoint", DRAFTS["speculators-kimi-k25"], "--contracts-only", "key-naming,tensor-shapes",
                      "-n", "2", "--dist", "loadgroup", "-v")
    ran = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("[gw") and "contracts::" in line]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(ran) == 4 and len(set(ran)) == 1, proc.stdout
    assert all(line.rstrip().endswith("@sglang") for line in proc.stdout.splitlines()
               if line.startswith("[gw") and "contracts::" in line), proc.stdout


def test_accept_without_a_build_is_a_usage_error(tmp_path):
    """--accept measures what --build-with trains; alone it would silently measure nothing."""
    proc = run_pytest(tmp_path, "-m", "contracts", "--checkpoint", DRAFTS["specforge"], "--accept")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--accept measures what --build-with TRAINER trains: give --build-with" in proc.stderr
