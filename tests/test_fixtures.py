"""The committed fixtures are what their manifest says the real trainers wrote."""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from contracts.bundled import bundled_subjects, manifest
from contracts.trainers.common import sha256_files
from tests.conftest import FIXTURES, REPO

MANIFEST = manifest()


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_files_match_their_manifest(name):
    entry = MANIFEST[name]
    assert sha256_files(REPO / entry["path"]) == entry["files"]
    assert entry["command"].startswith("tox -e fixtures-") or entry["command"].startswith("python -m")


def test_every_trainer_is_represented():
    trainers = {(e["trainer"], e["trainer_version"]) for e in MANIFEST.values()}
    assert {("speculators", "0.9.0"), ("specforge", "0.2.0")} <= trainers
    assert [s.name for s in bundled_subjects()] == ["specforge", "speculators-default", "speculators-train"]


@pytest.mark.parametrize("name", ["specforge", "speculators-default", "speculators-train"])
def test_d2t_holds_the_selected_ids_as_offsets(name):
    """Each trainer's own mapping function built d2t from the one frequency table; d2t holds offsets."""
    entry = MANIFEST[name]
    with safe_open(str(REPO / entry["path"] / "model.safetensors"), framework="pt") as f:
        d2t, t2d = f.get_tensor("d2t"), f.get_tensor("t2d")
    selected = entry["selected_target_ids"]
    assert len(selected) == 64
    assert (d2t + __import__("torch").arange(64)).tolist() == selected
    assert t2d.nonzero().flatten().tolist() == sorted(selected)


def test_both_trainers_selected_the_same_ids_from_the_same_table():
    assert MANIFEST["specforge"]["selected_target_ids"] == MANIFEST["speculators-default"]["selected_target_ids"]
    freq = json.loads((FIXTURES / "vocab" / "token_freq.json").read_text())
    assert all(freq[str(i)] > 0 for i in MANIFEST["specforge"]["selected_target_ids"])


def test_train_defaults_differ_from_library_defaults_as_documented():
    flags = MANIFEST["speculators-train"]["config_flags"]
    assert flags["norm_before_residual"] and flags["norm_before_fc"] and flags["norm_output"]
    assert not MANIFEST["speculators-default"]["config_flags"]["norm_before_residual"]
    assert MANIFEST["speculators-train"]["dtype"] == "bfloat16"
