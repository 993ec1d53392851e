"""``eagle3-contracts envs``: what the environments' cache holds, and removing what is old, never what a build is
making (``contracts.environments.cache``)."""

from __future__ import annotations

import fcntl
import json
import os
import time

import pytest

from contracts.cli import main
from contracts.environments import cache


def _env(root, name, used_days_ago, linked=None):
    env = root / name
    (env / "lib").mkdir(parents=True)
    (env / "ready").write_text("")
    (env / "lib" / "own.py").write_bytes(b"x" * 10_000)
    if linked is not None:
        os.link(linked, env / "lib" / "linked.so")
    (root / f"{name}.lock").write_text("")
    (root / f"{name}.log").write_text("built")
    when = time.time() - used_days_ago * 86400
    (env / cache.USED).touch()
    os.utime(env / cache.USED, (when, when))
    return env


@pytest.fixture
def root(tmp_path, monkeypatch):
    root = tmp_path / "envs"
    (root / "uv-cache").mkdir(parents=True)
    wheel_file = root / "uv-cache" / "torch.so"
    wheel_file.write_bytes(b"t" * 100_000)
    _env(root, "vllm-0.32.0-py311-aaaaaaaaaa", 40, wheel_file)
    _env(root, "vllm-0.32.0-py311-bbbbbbbbbb", 1, wheel_file)
    _env(root, "trainer-speculators-0.9.0-py311-cccccccccc", 2, wheel_file)
    build = root / cache.BUILDS / "0123456789abcdef" / "draft"
    build.mkdir(parents=True)
    (build / "model.safetensors").write_bytes(b"w")
    monkeypatch.setenv("EAGLE3_CONTRACTS_ENVS", str(root))
    return root


def test_the_listing_names_each_release_its_own_and_shared_bytes(root):
    found = {e.name: e for e in cache.entries(root)}
    assert set(found) == {"vllm-0.32.0-py311-aaaaaaaaaa", "vllm-0.32.0-py311-bbbbbbbbbb",
                          "trainer-speculators-0.9.0-py311-cccccccccc", "converged-builds/0123456789abcdef"}
    newer = found["vllm-0.32.0-py311-bbbbbbbbbb"]
    assert (newer.kind, newer.release, newer.ready) == ("engine", "vllm==0.32.0", True)
    assert found["trainer-speculators-0.9.0-py311-cccccccccc"].release == "speculators==0.9.0"
    assert newer.shared_bytes >= 100_000 > newer.own_bytes >= 10_000  # the uv-linked file is shared, not its own
    # each block once, however many environments link it
    assert cache.disk_bytes(root) < 3 * 100_000


def test_superseded_and_unused_entries_are_removed_and_the_rest_kept(root, capsys):
    assert main(["envs", "--remove-superseded", "--dry-run"]) == 0
    assert "would remove vllm-0.32.0-py311-aaaaaaaaaa" in capsys.readouterr().out
    assert (root / "vllm-0.32.0-py311-aaaaaaaaaa").is_dir()
    assert main(["envs", "--remove-unused", "30"]) == 0
    assert "removed vllm-0.32.0-py311-aaaaaaaaaa" in capsys.readouterr().out
    assert not (root / "vllm-0.32.0-py311-aaaaaaaaaa").exists()
    assert not (root / "vllm-0.32.0-py311-aaaaaaaaaa.lock").exists()
    assert not (root / "vllm-0.32.0-py311-aaaaaaaaaa.log").exists()
    assert (root / "uv-cache" / "torch.so").is_file()  # what the others link to stays
    assert main(["envs", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(e["name"] for e in listed["entries"]) == [
        "converged-builds/0123456789abcdef", "trainer-speculators-0.9.0-py311-cccccccccc", "vllm-0.32.0-py311-bbbbbbbbbb"]


def test_an_environment_being_built_is_kept(root, capsys):
    with open(root / "trainer-speculators-0.9.0-py311-cccccccccc.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build of it is under way (as environment_for holds it)
        assert main(["envs", "--remove", "trainer-speculators-0.9.0-py311-cccccccccc"]) == 0
    assert "kept trainer-speculators-0.9.0-py311-cccccccccc: a build of it is running" in capsys.readouterr().out
    assert (root / "trainer-speculators-0.9.0-py311-cccccccccc" / "ready").is_file()


def test_a_name_not_in_the_cache_is_a_usage_error(root, capsys):
    assert main(["envs", "--remove", "sglang-0.5.23-py311-nothing"]) == 2
    err = capsys.readouterr().err
    assert "not in" in err and "sglang-0.5.23-py311-nothing" in err and len(err.strip().splitlines()) == 1
