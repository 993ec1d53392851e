"""The failure this project was born from, replayed: a speculators draft for a Kimi-K2.5 target, converted to
SGLang's config as a user would (fixtures/drafts/speculators-kimi-k25, built by speculators 0.9.0 against the
scaled-down fixtures/targets/kimi-k25-tiny).

On SGLang 0.5.9 the server's own code drops the `layers.0.*` weights (its draft has one `midlayer`) and the
Kimi-K2.5 target class cannot capture aux hidden states: both are root causes. The two suspects of the
original investigation, `d2t` and the embedding/head wiring, hold. On 0.5.23 all four contracts hold.
0.5.9 runs in its own cached environment through an engine worker, as `--engine sglang==0.5.9` does.
"""

from __future__ import annotations

import json

import pytest
from conftest import DRAFTS, KIMI_TARGET, OLD_ENGINE

from contracts.engine_spec import EngineSpec
from contracts.cli import main
from contracts.subject import Subject

REPLAY = ["key-naming", "hidden-width", "d2t-semantics", "embed-head"]


def _verdicts(engine: str) -> dict:
    subject = Subject("kimi-replay", DRAFTS["speculators-kimi-k25"], KIMI_TARGET, engine=EngineSpec.parse(engine))
    try:
        return {r.contract: r.to_dict() for r in subject.run()}
    finally:
        subject.close()


@pytest.fixture(scope="module")
def on_old():
    return _verdicts(OLD_ENGINE)


def test_on_0_5_9_the_layer_weights_are_dropped(on_old):
    r = on_old["key-naming"]
    assert r["status"] == "fail" and r["root_cause"] is True
    dropped = {k for k in r["evidence"]["dropped"]}
    assert {f"layers.0.{n}" for n in ("self_attn.q_proj.weight", "mlp.down_proj.weight", "hidden_norm.weight")} <= dropped
    assert "model.midlayer.self_attn.qkv_proj.weight" in r["summary"]


def test_on_0_5_9_the_kimi_target_cannot_capture_aux_layers(on_old):
    r = on_old["hidden-width"]
    assert r["status"] == "fail" and r["root_cause"] is True
    assert "KimiK25ForConditionalGeneration" in r["summary"]
    assert "set_eagle3_layers_to_capture" in r["summary"]


def test_on_0_5_9_the_false_alarms_hold(on_old):
    assert on_old["d2t-semantics"]["status"] == "pass"
    assert on_old["embed-head"]["status"] == "pass"
    assert "head: checkpoint (trained [64, 64] kept)" in on_old["embed-head"]["summary"]


def test_on_0_5_9_the_report_names_the_engine_release(on_old):
    subject = Subject("kimi-replay", DRAFTS["speculators-kimi-k25"], KIMI_TARGET, engine=EngineSpec.parse(OLD_ENGINE))
    assert subject.engine_info() == {"name": "sglang", "version": "0.5.9"}


def test_on_the_pinned_release_all_four_hold():
    verdicts = _verdicts("sglang")
    assert {c: verdicts[c]["status"] for c in REPLAY} == dict.fromkeys(REPLAY, "pass")


def test_matrix_names_the_release_that_serves_it(capsys, tmp_path):
    out = tmp_path / "matrix.json"
    code = main(["matrix", str(DRAFTS["speculators-kimi-k25"]), "--target", str(KIMI_TARGET),
                 "--engines", f"{OLD_ENGINE},sglang==0.5.23", "--format", "json", "--output", str(out)])
    assert code == 0, capsys.readouterr().err  # 0.5.23 serves it as trained
    doc = json.loads(out.read_text())
    assert doc["deployable"][str(DRAFTS["speculators-kimi-k25"])] == {"sglang==0.5.9": False, "sglang==0.5.23": True}
    judged = str(DRAFTS["speculators-kimi-k25"])  # (its copy after convert has rows of its own)
    cells = {(c["engine"], c["contract"]): c for c in doc["cells"] if c["subject"] == judged}
    assert cells[("sglang==0.5.9", "key-naming")]["root_cause"] is True
    assert cells[("sglang==0.5.23", "key-naming")]["status"] == "pass"


def test_a_consequence_is_marked_as_one():
    """speculators-default on 0.5.9: forward-parity fails only because key-naming dropped the layer weights."""
    from conftest import TARGET

    from contracts.bundled import manifest

    entry = manifest()["speculators-default"]
    subject = Subject("default", DRAFTS["speculators-default"], TARGET, trainer="speculators",
                      reference_path=DRAFTS["speculators-default"].parents[2] / entry["reference"]["path"],
                      engine=EngineSpec.parse(OLD_ENGINE))
    try:
        results = {r.contract: r.to_dict() for r in subject.run(["key-naming", "forward-parity"])}
    finally:
        subject.close()
    assert results["key-naming"]["root_cause"] is True
    assert results["forward-parity"]["status"] == "fail"
    assert results["forward-parity"]["follows_from"] == ["key-naming"]


def test_the_kimi_targets_embedding_and_head_are_tied_to_their_own_keys(run_contract):
    """SGLang's DeepSeek loader runs each weight loader on a pool thread: the embed-head evidence still names the
    target tensor that wrote the served embedding, so its values are compared with the draft's."""
    result = run_contract(DRAFTS["speculators-kimi-k25"], "embed-head", KIMI_TARGET)
    emb = result.evidence["embedding"]
    assert emb["same_object_as"] == "target:language_model.model.embed_tokens.weight"
    assert emb["served_equals_target"] is True
    assert emb["checkpoint_vs_target"]["rows_differing"] == 0
