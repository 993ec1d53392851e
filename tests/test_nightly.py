"""The nightly run: the matrix over every bundled fixture and engine release, drift of the newest release's
contract surface against the committed snapshot of the pinned one, and a failure when a contract newly fails."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import OLD_ENGINE

from contracts import nightly
from contracts.engines.inprocess import InProcessSGLang
from contracts.engines.sglang.surface import drift, drift_markdown


@pytest.fixture(scope="module")
def snapshot():
    return json.loads(nightly.snapshot_path("0.5.23").read_text())


def test_the_committed_snapshot_is_the_pinned_releases_surface(snapshot):
    """Keeps fixtures/surface honest: refresh with `python -m contracts.nightly --write-snapshot` after review."""
    surface = json.loads(json.dumps(InProcessSGLang().surface()))
    assert drift(snapshot, surface) == []
    assert surface == snapshot


def test_the_surface_holds_what_the_contracts_depend_on(snapshot):
    assert snapshot["renames"]["midlayer.self_attn.q_proj.weight"] == ["model.layers.0.self_attn.qkv_proj.weight[q]"]
    assert snapshot["renames"]["d2t"] == ["side channel: hot_token_id"]
    assert snapshot["renames"]["t2d"] == ["dropped"]
    assert snapshot["aux_capture"]["KimiK25ForConditionalGeneration"] == "delegates to the inner language model"
    assert "norm_before_fc" in snapshot["config_keys_read"]["speculators-train"]
    assert snapshot["draft_params"]["speculators-train"]["model.input_norm.weight"] == [192]


def test_drift_names_each_kind_of_change(snapshot):
    newer = copy.deepcopy(snapshot)
    newer["renames"]["midlayer.mlp.down_proj.weight"] = ["dropped"]
    newer["draft_params"]["specforge"]["model.fc.weight"] = [64, 128]
    del newer["aux_capture"]["KimiK25ForConditionalGeneration"]
    newer["config_keys_read"]["speculators-train"].remove("norm_output")
    newer["engine"]["version"] = "9.9.9"
    rows = drift(snapshot, newer)
    assert {(r["aspect"], r["item"], json.dumps(r["newest"])) for r in rows} == {
        ("renames", "midlayer.mlp.down_proj.weight", '["dropped"]'),
        ("draft_params", "specforge: model.fc.weight", "[64, 128]"),
        ("aux_capture", "KimiK25ForConditionalGeneration", "null"),
        ("config_keys_read", "speculators-train: norm_output", "null"),
    }
    assert "SGLang 9.9.9 against the committed snapshot of 0.5.23: 4 difference(s)" in drift_markdown(
        snapshot, newer, rows)


def test_a_contract_failing_where_the_pinned_release_passes_is_newly_failing():
    doc = {"cells": [
        {"engine": "sglang==9.9.9", "subject": "speculators-kimi-k25", "contract": "key-naming", "status": "fail",
         "summary": "dropped"},
        {"engine": "sglang==9.9.9", "subject": "speculators-default", "contract": "hidden-width", "status": "fail",
         "summary": "documented on the pinned release"},
        {"engine": "sglang==0.5.9", "subject": "speculators-kimi-k25", "contract": "key-naming", "status": "fail",
         "summary": "an old release"},
    ]}
    assert [(c["subject"], c["contract"]) for c in nightly.newly_failing(doc, "sglang==9.9.9")] == [
        ("speculators-kimi-k25", "key-naming")]


def test_nightly_writes_the_matrix_and_the_drift_report(tmp_path, capsys):
    code = nightly.main(["--out", str(tmp_path), "--engines", OLD_ENGINE])
    assert code == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "matrix.json").read_text())
    assert doc["engines"] == ["sglang==0.5.23", "sglang==0.5.9"]
    assert doc["newly_failing"] == []
    assert doc["deployable"]["speculators-kimi-k25"] == {"sglang==0.5.23": True, "sglang==0.5.9": False}
    table = (tmp_path / "matrix.md").read_text()
    assert "| speculators-kimi-k25 | sglang 0.5.9 | converted | FAIL (root cause) |" in table
    assert json.loads((tmp_path / "drift.json").read_text())["drift"] == []
    assert "No drift" in (tmp_path / "drift.md").read_text()


def test_the_nightly_matrix_covers_both_engines_by_default():
    specs = nightly.engine_specs("0.5.24", None)
    assert specs[:2] == ["sglang==0.5.24", "sglang==0.5.23"]
    assert "sglang==0.5.3" in specs and "vllm==0.32.0" in specs
    assert nightly.engine_specs("0.5.23", ["0.5.9", "vllm==0.32.0"]) == ["sglang==0.5.23", "sglang==0.5.9",
                                                                       "vllm==0.32.0"]
