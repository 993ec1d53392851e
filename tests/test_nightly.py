"""The nightly run: the matrix over every bundled fixture and engine release, drift of the newest release's
contract surface against the committed snapshot of the pinned one, and a failure when a contract newly fails."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import OLD_ENGINE

from contracts.engine_spec import EngineSpec
from contracts.tables import nightly
from contracts.engines.inprocess import InProcess
from contracts.engines.surface_drift import drift, drift_markdown


@pytest.fixture(scope="module")
def snapshot():
    return json.loads(nightly.snapshot_path(EngineSpec("sglang", "0.5.23")).read_text())


def test_the_committed_snapshot_is_the_pinned_releases_surface(snapshot):
    """Keeps fixtures/surface honest: refresh with `python -m contracts.tables.nightly --write-snapshot` after review."""
    surface = json.loads(json.dumps(InProcess(EngineSpec("sglang")).surface()))
    assert drift(snapshot, surface) == []
    assert surface == snapshot


def test_the_committed_vllm_snapshot_is_the_pinned_vllms_surface():
    """vLLM's surface is tracked as SGLang's is: the pinned release's, observed by running it, is the snapshot the
    nightly compares each new vLLM release with."""
    from contracts.engine_spec import PINNED
    from contracts.engines import engine_for

    snapshot = json.loads(nightly.snapshot_path(EngineSpec("vllm", PINNED["vllm"])).read_text())
    surface = json.loads(json.dumps(engine_for(EngineSpec("vllm")).surface()))
    assert drift(snapshot, surface) == []
    assert snapshot["renames"]["d2t"] == ["draft_id_to_target_id"]
    assert "LlamaForCausalLM" in snapshot["aux_capture"]


def test_the_committed_llamacpp_snapshot_is_the_pinned_llamacpps_surface():
    """llama.cpp's surface (its converter's EAGLE-3 config keys and special tensors) is snapshotted as the others are,
    so the nightly's drift report compares each new llama.cpp release too."""
    from contracts.engine_spec import PINNED
    from contracts.engines import engine_for

    release = EngineSpec("llamacpp", PINNED["llamacpp"])
    snapshot = json.loads(nightly.snapshot_path(release).read_text())
    surface = json.loads(json.dumps(engine_for(release).surface()))
    assert drift(snapshot, surface) == []
    assert "eagle_aux_hidden_state_layer_ids" in snapshot["config_keys"] and "d2t" in snapshot["special_tensors"]


def test_the_committed_openvino_snapshot_is_the_pinned_openvinos_surface():
    """OpenVINO GenAI's surface (the draft architectures its exporter builds as EAGLE-3 drafts, its draft module's
    parameters for the canonical draft, the IR's outputs and EAGLE-3 rt_info keys) is snapshotted as the others are."""
    from contracts.engine_spec import PINNED
    from contracts.engines import engine_for

    release = EngineSpec("openvino", PINNED["openvino"])
    snapshot = json.loads(nightly.snapshot_path(release).read_text())
    surface = json.loads(json.dumps(engine_for(release).surface()))
    assert drift(snapshot, surface) == []
    assert "LlamaForCausalLMEagle3" in snapshot["draft_architectures"] and "d2t" in snapshot["ir_outputs"]


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


def test_an_engine_whose_surface_has_other_aspects_drifts_on_them():
    """llama.cpp's surface is its converter's EAGLE-3 config keys and special tensors: a key it stops reading is
    drift, never "no drift" because the aspects SGLang's and vLLM's surfaces have are absent."""
    pinned = {"engine": {"name": "llamacpp", "version": "1"}, "converter": "conversion/llama.py",
              "config_keys": ["draft_vocab_size", "target_hidden_size"], "special_tensors": ["d2t", "fc.weight"]}
    newer = {**pinned, "engine": {"name": "llamacpp", "version": "2"}, "config_keys": ["draft_vocab_size"],
             "special_tensors": ["d2t", "fc.weight", "t2d"]}
    assert drift(pinned, copy.deepcopy(pinned)) == []
    assert {(r["aspect"], r["item"], r["pinned"], r["newest"]) for r in drift(pinned, newer)} == {
        ("config_keys", "target_hidden_size", "present", None), ("special_tensors", "t2d", None, "present")}


def test_a_contract_failing_where_the_release_before_held_is_newly_failing():
    cell = lambda status: {"status": status, "summary": status}  # noqa: E731
    doc = {"releases": {
        "sglang==0.5.22": {"cells": {"speculators-kimi-k25": {"key-naming": cell("pass"), "hidden-width": cell("fail")}}},
        "sglang==9.9.9": {"cells": {"speculators-kimi-k25": {"key-naming": cell("fail"), "hidden-width": cell("fail")}}},
        "vllm==9.9.9": {"cells": {"speculators-default": {"hidden-width": cell("fail"), "config": cell("fail")}}},
    }}
    found = [(c["engine"], c["subject"], c["contract"], c["before"]) for c in nightly.newly_failing(
        doc, [EngineSpec("sglang", "9.9.9"), EngineSpec("vllm", "9.9.9")])]
    # sglang: against 0.5.22 (hidden-width already failed there); vllm's first row: against the pinned release's
    # documented verdicts (hidden-width is documented there for speculators-default, config is not)
    assert found == [("sglang==9.9.9", "speculators-kimi-k25", "key-naming", "sglang==0.5.22"),
                     ("vllm==9.9.9", "speculators-default", "config", None)]


def test_nightly_judges_the_releases_it_is_given_and_writes_its_report(tmp_path, capsys):
    data = tmp_path / "compatibility.json"
    code = nightly.main(["--out", str(tmp_path / "out"), "--engines", OLD_ENGINE, "--data", str(data),
                         "--only", "key-naming,hidden-width"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(data.read_text())
    cells = doc["releases"][OLD_ENGINE]["cells"]
    assert cells["speculators-kimi-k25"]["key-naming"]["status"] == "fail"  # the replayed Kimi-K2.5 failure
    assert cells["specforge"]["key-naming"]["status"] == "pass"
    assert json.loads((tmp_path / "out" / "newly_failing.json").read_text()) == []  # all documented on 0.5.9
    assert "| SGLang 0.5.9, EAGLEWorker |" in (tmp_path / "out" / "matrix.md").read_text()  # its default worker
    assert json.loads((tmp_path / "out" / "drift.json").read_text())["drift"] == []
    assert "No drift" in (tmp_path / "out" / "drift.md").read_text()


def test_the_releases_new_to_the_table_are_every_release_since_eagle3_it_lacks():
    from contracts.tables import compatibility

    have = {f"sglang=={v}": {} for v in compatibility.releases(EngineSpec("sglang").profile) if v != "0.5.23"}
    new = [str(s) for s in nightly.new_releases({"releases": have}, "0.5.23")]
    assert "sglang==0.5.23" in new and "vllm==0.32.0" in new and "sglang==0.5.9" not in new
    assert "sglang==0.4.4" in have and all(not s.startswith("sglang==0.4.3") for s in new)


def test_the_nightly_runs_the_acceptance_study_on_each_vllm_release_it_judged(tmp_path):
    """Once per vLLM release, whatever paths were judged (SGLang's serving loop does not run on a CPU); here the
    speculators draft and its zeroed d2t, which the verdicts and the measurement agree on."""
    from contracts.tables.acceptance_study import BREAKS

    found = nightly.acceptance_report(tmp_path, [EngineSpec.parse(s) for s in ("sglang==0.5.9", "vllm==0.32.0",
                                                                             "vllm==0.32.0:v1")],
                                      drafts=["converged-speculators"], breaks=BREAKS[:2])
    assert found == []
    doc = json.loads((tmp_path / "acceptance-vllm-0.32.0.json").read_text())
    assert [r["break"] for r in doc["rows"]] == ["pristine", "d2t zeroed"]
    assert (doc["agreement"]["variants"], doc["agreement"]["agree"]) == (1, 1)
    assert "| converged-speculators | d2t zeroed | d2t-semantics |" in (tmp_path / "acceptance-vllm-0.32.0.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acceptance-vllm-0.32.0.json", "acceptance-vllm-0.32.0.md"]


def test_a_refusal_reported_by_another_contract_is_the_documented_config_failure():
    """`--only key-naming` on a draft the release refuses: key-naming meets the refusal first; documented as config's
    (automodel-vllm-hd32 on SGLang 0.5.9: "EAGLE3 currently only supports 1 layer"), it is not new."""
    refused = {"status": "fail", "summary": "the engine cannot build this draft: SGLang could not build the model"}
    other = {"status": "fail", "summary": "3 tensor(s) dropped by the engine's loader"}
    doc = {"releases": {"sglang==0.5.9": {"cells": {"automodel-vllm-hd32": {"key-naming": refused},
                                                     "specforge": {"key-naming": other}}}}}
    found = [(c["subject"], c["contract"]) for c in nightly.newly_failing(doc, [EngineSpec("sglang", "0.5.9")])]
    assert found == [("specforge", "key-naming")]
