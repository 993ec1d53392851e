"""A converged build is reused only when nothing that decides its weights moved, and only as it was kept
(``contracts.trainers.converged_cache``)."""

from __future__ import annotations

import json
import sys

import pytest

from contracts.builds import RECORD
from contracts.trainers import converged_cache
from contracts.trainers.common import sha256_files


@pytest.fixture
def editable_trainer(tmp_path, monkeypatch):
    """A distribution installed editable from a source tree, as a training repository installs its trainer."""
    source = tmp_path / "repo" / "src" / "faketrainer"
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("LOSS_MASK_SHIFT = 0\n")
    site = tmp_path / "site"
    info = site / "faketrainer-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faketrainer\nVersion: 1.0\n")
    (info / "RECORD").write_text("")
    (info / "direct_url.json").write_text(json.dumps({"url": (tmp_path / "repo").as_uri(),
                                                      "dir_info": {"editable": True}}))
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    return source


def test_the_key_moves_with_the_trainers_code_and_not_with_its_caches(editable_trainer, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text("{}")
    first = converged_cache.build_key(converged_cache.key_parts("faketrainer", "faketrainer", [target]))
    (editable_trainer / "__pycache__").mkdir()
    (editable_trainer / "__pycache__" / "x.pyc").write_bytes(b"stale")
    assert converged_cache.build_key(converged_cache.key_parts("faketrainer", "faketrainer", [target])) == first
    (editable_trainer / "__init__.py").write_text("LOSS_MASK_SHIFT = 1\n")  # a training change
    changed = converged_cache.build_key(converged_cache.key_parts("faketrainer", "faketrainer", [target]))
    assert changed != first
    (target / "config.json").write_text('{"hidden_size": 32}')  # another target
    third = converged_cache.build_key(converged_cache.key_parts("faketrainer", "faketrainer", [target]))
    assert third not in (first, changed)
    site = editable_trainer.parents[2] / "site"
    _dist(site, "sidetool", "2.0")  # a test tool installed beside the trainer: not what training imports
    assert converged_cache.build_key(converged_cache.key_parts("faketrainer", "faketrainer", [target])) == third
    metadata_file = site / "faketrainer-1.0.dist-info" / "METADATA"
    metadata_file.write_text(metadata_file.read_text() + "Requires-Dist: helperlib>=1\n"
                             "Requires-Dist: docsonly; extra == 'docs'\n")
    _dist(site, "helperlib", "1.0")
    _dist(site, "docsonly", "1.0")
    with_helper = converged_cache.build_key(converged_cache.key_parts("faketrainer", "faketrainer", [target]))
    assert converged_cache.requirement_closure("faketrainer") == ["faketrainer==1.0", "helperlib==1.0"]
    (site / "helperlib-1.0.dist-info").rename(site / "helperlib-1.1.dist-info")
    (site / "helperlib-1.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: helperlib\nVersion: 1.1\n")  # what training imports moved
    assert converged_cache.build_key(converged_cache.key_parts("faketrainer", "faketrainer", [target])) != with_helper


def _dist(site, name, version):
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _build(out):
    (out / "draft").mkdir(parents=True)
    (out / "draft" / "model.safetensors").write_bytes(b"weights")
    (out / "reference.safetensors").write_bytes(b"reference")
    record = {"trainer": "faketrainer", "draft": "draft", "files": sha256_files(out / "draft")}
    (out / RECORD).write_text(json.dumps(record))


def test_a_kept_build_is_reused_as_kept_and_a_damaged_one_is_not(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_CONTRACTS_ENVS", str(tmp_path / "envs"))
    monkeypatch.delenv("EAGLE3_CONTRACTS_RETRAIN", raising=False)
    _build(tmp_path / "first")
    converged_cache.keep("k1", tmp_path / "first")
    again = tmp_path / "again"
    again.mkdir()
    record = converged_cache.reuse("k1", again, here={"target": "/this/checkout/target"})
    assert record["reused"]["key"] == "k1" and record["target"] == "/this/checkout/target"
    assert (again / "draft" / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((again / RECORD).read_text())["reused"]["key"] == "k1"
    assert converged_cache.reuse("another-key", tmp_path / "none") is None
    monkeypatch.setenv("EAGLE3_CONTRACTS_RETRAIN", "1")
    assert converged_cache.reuse("k1", tmp_path / "none") is None
    monkeypatch.delenv("EAGLE3_CONTRACTS_RETRAIN")
    (tmp_path / "envs" / "converged-builds" / "k1" / "draft" / "model.safetensors").write_bytes(b"damaged")
    assert converged_cache.reuse("k1", tmp_path / "third") is None
    assert not (tmp_path / "third").exists()


def test_two_installs_of_one_wheel_have_one_trainer_digest():
    """What differs between two environments' installs of the same wheel (the console script's shebang names each
    environment's interpreter, the installer's marks) is not the trainer's code: counted, each CI run trained again."""
    package = "faketrainer/__init__.py,sha256=abc,20\nfaketrainer-1.0.dist-info/METADATA,sha256=def,60\n"
    first = package + ("../../../bin/faketrainer,sha256=one,200\nfaketrainer-1.0.dist-info/INSTALLER,sha256=uv,2\n"
                       "faketrainer-1.0.dist-info/RECORD,,\nfaketrainer/__pycache__/__init__.cpython-311.pyc,,\n")
    second = ("faketrainer-1.0.dist-info/INSTALLER,sha256=pip,3\n../../../bin/faketrainer,sha256=two,210\n"
              + package + "faketrainer-1.0.dist-info/REQUESTED,,\n")
    assert converged_cache._record_lines(first) == converged_cache._record_lines(second)
    assert converged_cache._record_lines(package.replace("abc", "abd")) != converged_cache._record_lines(package)
