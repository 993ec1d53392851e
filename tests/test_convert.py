"""`eagle3-contracts convert`: the copy an engine release serves as trained (aux ids read off the engine's own
capture of the target class, per engine, release and class), proven by the contracts on that copy; `--verbatim`: the
flat config a hand conversion writes. Tensors unchanged, SRC untouched, bad input exit 2."""

from __future__ import annotations

import json
import shutil

import pytest

from contracts.engine_spec import EngineSpec
from contracts.cli import main
from contracts.hand_conversion import speculators_to_sglang_config
from tests.conftest import DRAFTS, FIXTURES, TARGET, tree_digest


def test_verbatim_copies_the_train_defaults_and_is_judged(tmp_path, capsys):
    src = DRAFTS["speculators-train"]
    before = tree_digest(src)
    assert main(["convert", "--to", "sglang", "--verbatim", "--link", str(src), str(tmp_path / "out"),
                 "--target", str(TARGET)]) == 1  # judged: the verbatim copy is not served as trained
    err = capsys.readouterr().err
    assert "NOT served as trained by sglang 0.5.23" in err and "hidden-width" in err
    assert tree_digest(src) == before
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}
    assert cfg["draft_vocab_size"] == 64 and cfg["num_hidden_layers"] == 1 and cfg["hidden_size"] == 64
    # every key that changes the math is carried over for the contracts to judge
    assert (cfg["norm_before_residual"], cfg["norm_before_fc"], cfg["norm_output"], cfg["fc_norm"]) == (
        True, True, True, False)
    assert cfg["dtype"] == "bfloat16"
    assert cfg["rope_parameters"] == {"rope_theta": 10000.0, "rope_type": "default"}
    assert "target_hidden_size" not in cfg  # null in the source: same as hidden_size
    # tensors linked unchanged
    out = tmp_path / "out" / "model.safetensors"
    assert out.is_symlink() and out.resolve() == (src / "model.safetensors").resolve()


def test_weights_are_copied_by_default(tmp_path):
    assert main(["convert", "--to", "sglang", "--verbatim", str(DRAFTS["speculators-default"]),
                 str(tmp_path / "o"), "--target", str(TARGET)]) == 1
    out = tmp_path / "o" / "model.safetensors"
    assert not out.is_symlink()
    assert out.read_bytes() == (DRAFTS["speculators-default"] / "model.safetensors").read_bytes()


def test_target_hidden_size_is_written_where_it_differs():
    cfg = json.loads((DRAFTS["speculators-default"] / "config.json").read_text())
    cfg["target_hidden_size"] = 128
    assert speculators_to_sglang_config(cfg)["target_hidden_size"] == 128


@pytest.mark.parametrize("case", ["flat source, no trainer", "no target", "dst inside src", "dst not empty",
                                  "engine of the other kind", "missing source"])
def test_refusals_are_exit_2(case, tmp_path, capsys):
    src, dst, more = DRAFTS["speculators-default"], tmp_path / "dst", ["--target", str(TARGET)]
    if case == "flat source, no trainer":  # a draft converted by hand: its flat config names no trainer
        src = tmp_path / "by-hand"
        shutil.copytree(DRAFTS["speculators-default"], src)
        cfg = speculators_to_sglang_config(json.loads((src / "config.json").read_text()))
        (src / "config.json").write_text(json.dumps(cfg))
    elif case == "no target":
        more = []
    elif case == "dst inside src":
        dst = src / "converted"
    elif case == "dst not empty":
        dst.mkdir()
        (dst / "x").write_text("x")
    elif case == "engine of the other kind":
        more += ["--engine", "vllm==0.32.0"]
    else:
        src = tmp_path / "absent"
    before = tree_digest(src) if src.exists() else None
    assert main(["convert", "--to", "sglang", str(src), str(dst), *more]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (dst.exists() and case != "dst not empty" and any(dst.iterdir()))
    if before is not None:
        assert tree_digest(src) == before


RECORD_KEY = "eagle3_contracts_conversion"


def _convert(capsys, src, dst, *more, target=TARGET):
    code = main(["convert", str(src), str(dst), "--target", str(target), "--format", "json", *more])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err, json.loads((dst / "config.json").read_text())


def _ids(cfg):
    return (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids", cfg.get(
        "eagle_aux_hidden_state_layer_ids"))


def _status(doc, contract):
    return next(r for r in doc["results"] if r["contract"] == contract)["status"]


@pytest.mark.parametrize("name", ["speculators-default", "speculators-default-hd32"])
def test_speculators_ids_are_shifted_for_sglang_and_it_serves_them_as_trained(name, tmp_path, capsys):
    """speculators trained on hidden_states[k]; SGLang 0.5.23's explicit id k captures hidden_states[k+1] on a
    Llama target: convert writes the ids the engine's own hook reports for hidden_states [2, 4, 5]."""
    src = DRAFTS.get(name) or FIXTURES / "drafts" / name
    target = TARGET if name in DRAFTS else FIXTURES / "targets" / "llama-tiny-hd32"
    code, doc, err, cfg = _convert(capsys, src, tmp_path / "out", "--to", "sglang", target=target)
    assert code == 0, err
    assert _ids(cfg) == [1, 3, 4]
    assert _status(doc, "hidden-width") == "pass"
    assert doc["judged_as"] == {"form": "after convert", "directory": str(tmp_path / "out")}
    assert "wrote [1, 3, 4] (sglang 0.5.23 then captures hidden_states [2, 4, 5]" in err


def test_the_kimi_k25_replay_keeps_its_ids_on_0_5_23_and_shifts_them_on_0_5_12(tmp_path, capsys):
    """The DeepSeek-family rule changed (sglang#25454: +1 only when the first id is 1): the same draft needs its
    ids as saved on 0.5.23 and shifted on 0.5.12, and no fixed formula gives both."""
    src, target = DRAFTS["speculators-kimi-k25"], FIXTURES / "targets" / "kimi-k25-tiny"
    code, doc, err, cfg = _convert(capsys, src, tmp_path / "new", "--to", "sglang", target=target)
    assert code == 0, err
    assert _ids(cfg) == [2, 4, 5] and "kept as [2, 4, 5]" in err
    code, doc, err, cfg = _convert(capsys, src, tmp_path / "old", "--engine", "sglang==0.5.12", target=target)
    assert code == 0, err
    assert _ids(cfg) == [1, 3, 4] and _status(doc, "hidden-width") == "pass"


def test_an_older_release_gets_its_own_ids(tmp_path, capsys):
    src = DRAFTS["speculators-default"]
    code, doc, err, cfg = _convert(capsys, src, tmp_path / "out", "--engine", "sglang==0.5.12")
    assert code == 0, err
    assert _ids(cfg) == [1, 3, 4] and _status(doc, "hidden-width") == "pass"


def test_a_specforge_draft_with_explicit_ids_is_shifted_for_vllm(broken, tmp_path, capsys):
    """SpecForge trained on SGLang's capture (id k -> hidden_states[k+1]); vLLM's id k captures hidden_states[k]."""
    src = broken("specforge", config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}})
    code, doc, err, cfg = _convert(capsys, src, tmp_path / "out", "--to", "vllm", "--trainer", "specforge")
    assert code == 0, err
    assert _ids(cfg) == [2, 4, 5] and _status(doc, "hidden-width") == "pass"
    assert doc["engine"]["name"] == "vllm"


def test_a_speculators_draft_needs_nothing_for_vllm(tmp_path, capsys):
    code, doc, err, cfg = _convert(capsys, DRAFTS["speculators-default"], tmp_path / "out", "--to", "vllm")
    assert code == 0, err
    record = cfg.pop(RECORD_KEY)
    assert cfg == json.loads((DRAFTS["speculators-default"] / "config.json").read_text())  # read as saved
    assert "kept as [2, 4, 5]" in err
    assert record["trainer"] == "speculators" and record["trained_hidden_states"] == [2, 4, 5]
    assert record["made_for"] == "vllm==0.32.0" and record["proven_on"] == ["v2", "v1"]
    # proven on both runners: the default path's document, and Model Runner V1's inside it
    assert doc["path"]["label"] == "Model Runner V2" and doc["path"]["is_default"]
    assert [o["path"]["label"] for o in doc["other_paths"]] == ["Model Runner V1"]
    assert all(r["status"] != "fail" for o in [doc, *doc["other_paths"]] for r in o["results"])


@pytest.mark.parametrize("name,hf", [("modelopt-default-hd32", [2, 4, 5]), ("modelopt-explicit-hd32", [2, 5, 7])])
def test_model_optimizer_drafts_get_top_level_ids_both_vllm_runners_read(name, hf, tmp_path, capsys):
    """Model Optimizer writes its ids under eagle_config: Model Runner V1 reads them one layer early, V2 never reads
    them (its default happens to be the default draft's layers, not the explicit draft's). The copy carries the ids
    at the top level, where both runners read them first, and is proven on both."""
    src = FIXTURES / "drafts" / name
    code, doc, err, cfg = _convert(capsys, src, tmp_path / "out", "--to", "vllm",
                                   target=FIXTURES / "targets" / "llama-tiny-hd32")
    assert cfg["eagle_aux_hidden_state_layer_ids"] == hf and cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == hf
    assert f"wrote {hf} (vllm 0.32.0 on Model Runner V2, vllm 0.32.0 on Model Runner V1 then capture" in err
    for judged in [doc, *doc["other_paths"]]:
        assert _status(judged, "hidden-width") == "pass", judged["path"]
    # the ids are right on both runners; what no config can fix is its first layer (no engine computes Model
    # Optimizer's hidden_norm(input_layernorm(fc(h)))), judged against the bundled draft's reference forward
    assert code == 1 and "NOT served as trained by vllm 0.32.0 (Model Runner V2 and Model Runner V1)" in err, err
    assert all(_status(judged, "forward-parity") == "fail" for judged in [doc, *doc["other_paths"]])


def test_a_copy_made_for_sglang_is_judged_by_what_it_was_trained_on(tmp_path, capsys):
    """A speculators draft converted for SGLang carries SGLang's ids ([1, 3, 4]), no longer speculators' convention:
    `check COPY --trainer speculators` (the truth) used to read them as speculators' ids and print a fix that shifted
    them again. The copy's record says what it was trained on, so it gets the same verdict with or without --trainer."""
    src = DRAFTS["speculators-default"]
    code, _, err, cfg = _convert(capsys, src, tmp_path / "copy", "--to", "sglang")
    assert code == 0, err
    assert _ids(cfg) == [1, 3, 4]
    for trainer in (["--trainer", "speculators"], []):
        code = main(["check", str(tmp_path / "copy"), "--target", str(TARGET), "--format", "json", *trainer])
        out = capsys.readouterr().out
        doc = json.loads(out)
        assert code == 0 and not any(r.get("fix") for r in doc["results"] if r["status"] == "fail"), out
        width = next(r for r in doc["results"] if r["contract"] == "hidden-width")
        assert width["status"] == "pass" and width["evidence"]["trainer"]["hf_hidden_states"] == [2, 4, 5]
        assert "the conversion record" in width["evidence"]["trainer"]["hf_hidden_states_from"]
    code = main(["check", str(tmp_path / "copy"), "--target", str(TARGET), "--trainer", "specforge"])
    err = capsys.readouterr().err
    assert code == 2 and "records that speculators trained it" in err and err.count("\n") == 1


def test_a_layer_no_ids_make_the_engine_capture_exits_1_naming_it(tmp_path, capsys):
    """speculators trained on the last layer's output (id 8 of 8); SGLang's Llama capture never reaches it: no
    config is written as if it did."""
    from tests.conftest import make_copy

    src = make_copy(DRAFTS["speculators-default"], tmp_path / "src", config={"eagle_aux_hidden_state_layer_ids": [2, 4, 8]})
    code, doc, err, cfg = _convert(capsys, src, tmp_path / "out", "--to", "sglang")
    assert code == 1
    assert "no ids make LlamaForCausalLM capture hidden_states [2, 4, 8]" in err
    assert _status(doc, "hidden-width") == "fail"


def test_a_switch_the_engine_lacks_makes_it_exit_1_naming_the_switch(tmp_path, capsys):
    """speculators' `train` defaults set norm_before_residual: true; SGLang has no such switch."""
    code, doc, err, cfg = _convert(capsys, DRAFTS["speculators-train"], tmp_path / "out", "--to", "sglang")
    assert code == 1
    assert _ids(cfg) == [1, 3, 4] and _status(doc, "hidden-width") == "pass"  # the ids are right ...
    assert _status(doc, "config") == "fail"  # ... but the math is not
    assert "NOT served as trained" in err and "norm_before_residual" in err



def test_the_matrix_has_a_row_for_the_copy_convert_writes(tmp_path, capsys):
    src = DRAFTS["speculators-default"]
    out = tmp_path / "matrix.json"
    code = main(["matrix", str(src), "--target", str(TARGET), "--engines", "sglang==0.5.23", "--format", "json",
                 "--output", str(out)])
    assert code == 0, capsys.readouterr().err  # served as trained after convert
    doc = json.loads(out.read_text())
    assert doc["deployable"] == {str(src): {"sglang==0.5.23": False}, f"{src} after convert": {"sglang==0.5.23": True}}
    assert doc["judged_as"][f"{src} after convert"]["sglang==0.5.23"] == "after convert"
    converted = next(r for r in doc["reports"] if r.get("converted_from"))
    assert converted["conversion"]["not_faithful"] == []
    assert "--engine sglang==0.5.23" in converted["judged_as"]["command"]
    from contracts.tables import matrix

    table = matrix.markdown(doc)
    assert f"| {src} | sglang 0.5.23 | EAGLEWorkerV2 (its default worker) | verbatim conversion |" in table
    assert f"| {src} after convert | sglang 0.5.23 | EAGLEWorkerV2 (its default worker) | after convert |" in table


def test_tensors_a_release_loads_under_another_name_are_renamed(tmp_path, capsys):
    """SGLang 0.5.9 names the draft layer `midlayer`: its loader drops speculators' `layers.0.*` without a word.
    convert renames what the engine's own probe shows it loads under another name (a safetensors header change)."""
    from safetensors.torch import load_file

    src = DRAFTS["speculators-default"]
    code, doc, err, cfg = _convert(capsys, src, tmp_path / "out", "--engine", "sglang==0.5.9")
    assert code == 0, err
    assert _status(doc, "key-naming") == "pass" and _status(doc, "hidden-width") == "pass"
    assert "renamed 10 tensor(s) (layers.0.hidden_norm.weight -> midlayer.hidden_norm.weight" in err
    saved, written = load_file(src / "model.safetensors"), load_file(tmp_path / "out" / "model.safetensors")
    assert {k.replace("layers.0.", "midlayer."): v for k, v in saved.items()}.keys() == written.keys()
    assert all(written[k.replace("layers.0.", "midlayer.")].equal(v) for k, v in saved.items())


@pytest.mark.parametrize("engine", ["sglang==0.5.23", "sglang==0.5.9", "vllm==0.32.0"])
def test_every_bundled_draft_after_convert_gets_its_documented_verdicts(engine):
    """fixtures/expected.json `after_convert`: what each bundled draft still fails in the copy convert writes for the
    release (the trainers' own step-0 references included, so forward-parity proves the trained math where judged);
    a change in either direction fails here."""
    from contracts.tables import matrix
    from contracts.bundled import EXPECTED, bundled_subjects, documented_key

    documented = json.loads(EXPECTED.read_text())["after_convert"]
    got = {}
    for subject in bundled_subjects(engine=EngineSpec.parse(engine)):
        try:
            reps = matrix.converted_report(subject, EngineSpec.parse(engine))
        finally:
            subject.close()
        for rep in reps:  # the release's default path, then (vLLM) its other runner: convert proves the copy on both
            got.setdefault(str(documented_key(rep)), {})[subject.name] = sorted(
                r["contract"] for r in rep["results"] if r["status"] == "fail")
    assert sorted(got) == ([engine, f"{engine}:v1"] if engine.startswith("vllm") else [engine])
    for key, by in got.items():
        assert by == {name: sorted(documented[key].get(name, {})) for name in by}, key
        # the speculators drafts (and, for vLLM, the SGLang-convention ones) are aligned wherever the class captures
        assert all("hidden-width" not in fails for name, fails in by.items() if name != "speculators-kimi-k25")


def test_an_automodel_checkpoint_gets_the_class_its_serve_helpers_write_and_the_layers_it_holds(tmp_path, capsys):
    """NeMo Automodel's recipe saves its own draft class (no engine registers it) and the target's num_hidden_layers
    (8) over a one-layer draft: SGLang 0.5.23 builds eight and serves seven on random weights. convert writes
    LlamaForCausalLMEagle3 and the layer count SGLang's own rebuild loads whole, and the ids the recipe trained on."""
    src = FIXTURES / "drafts" / "automodel-raw-hd32"
    code, doc, err, cfg = _convert(capsys, src, tmp_path / "out", "--to", "sglang", "--trainer", "automodel",
                                   target=FIXTURES / "targets" / "llama-tiny-hd32")
    assert code == 0, err
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert "num_hidden_layers: 8 -> 1" in err and "LlamaEagle3DraftModel" in err
    assert all(_status(doc, c) == "pass" for c in ("key-naming", "config", "d2t-semantics"))
    assert json.loads((src / "config.json").read_text())["num_hidden_layers"] == 8  # SRC untouched
