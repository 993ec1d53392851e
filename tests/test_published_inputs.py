"""Drafts as people publish them are judged, not refused: a config.json with a key given twice, a config the
engine itself refuses, pickle ``pytorch_model.bin`` weights (single and sharded), a draft published under the
base architecture, and a speculators checkpoint that the engine can serve only after conversion."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from contracts.cli import main
from tests.conftest import DELETE, DRAFTS, TARGET, errors_in, tree_digest


def run_json(capsys, *args):
    code = main(["check", *map(str, args), "--format", "json"])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err
    return code, (json.loads(out) if out else None), err


def by_contract(doc) -> dict:
    return {r["contract"]: r for r in doc["results"]}


def test_duplicate_config_key_is_read_as_the_engine_reads_it_and_warned(tmp_path, capsys):
    d = tmp_path / "dup"
    shutil.copytree(DRAFTS["specforge"], d)
    text = (d / "config.json").read_text().rstrip().rstrip("}")
    # as a published Llama-3 drafter has it: float16 first, bfloat16 last (json keeps the last)
    (d / "config.json").write_text(text + ',\n  "torch_dtype": "float16",\n  "torch_dtype": "bfloat16"\n}\n')
    code, doc, err = run_json(capsys, d, "--target", TARGET)
    assert code == 0 and errors_in(err) == ""
    config = by_contract(doc)["config"]
    assert config["status"] == "warn"
    assert "'torch_dtype' twice" in config["summary"] and '"float16" is shadowed' in config["summary"]
    assert config["evidence"]["duplicate_keys"] == [{"key": "torch_dtype", "shadowed": "float16", "read": "bfloat16"}]
    assert by_contract(doc)["tensor-shapes"]["status"] == "pass"  # judged with bfloat16, the value the engine reads


def test_config_the_engine_refuses_is_a_verdict_naming_its_error_and_the_fix(broken, capsys):
    path = broken("specforge", config={"draft_vocab_size": DELETE})
    code, doc, err = run_json(capsys, path, "--target", TARGET)
    assert code == 1 and errors_in(err) == ""
    failed = [r for r in doc["results"] if r["status"] == "fail"]
    # a refusal of the draft config is config's finding; the contracts that need the draft point at it
    assert [r["contract"] for r in failed] == ["config"] and failed[0]["root_cause"]
    assert "AttributeError" in failed[0]["evidence"]["engine_error"]
    assert "draft_vocab_size" in failed[0]["evidence"]["engine_error"]
    assert failed[0]["fix"].startswith("add `draft_vocab_size` to config.json: 64 (the rows of lm_head.weight)")
    for r in doc["results"]:
        if r["contract"] in ("key-naming", "tensor-shapes", "d2t-semantics", "hidden-width", "embed-head"):
            assert r["status"] == "skip" and r["summary"].endswith("(see config)")
    # without config, the first contract that meets it fails with the same fix (never a silent exit 0)
    code, doc, _ = run_json(capsys, path, "--only", "key-naming")
    assert code == 1 and doc["results"][0]["status"] == "fail" and "draft_vocab_size" in doc["results"][0]["fix"]


def _as_bin(src, dst, shards: int = 1):
    """SRC's tensors saved with torch.save, as pytorch_model.bin or sharded with pytorch_model.bin.index.json."""
    dst.mkdir()
    shutil.copy(src / "config.json", dst)
    tensors = load_file(src / "model.safetensors")
    keys = sorted(tensors)
    if shards == 1:
        torch.save(tensors, dst / "pytorch_model.bin")
        return dst
    weight_map = {}
    for i in range(shards):
        name = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = keys[i::shards]
        torch.save({k: tensors[k] for k in part}, dst / name)
        weight_map.update(dict.fromkeys(part, name))
    (dst / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dst


@pytest.mark.parametrize("shards", [1, 2])
def test_pickle_weights_are_judged_like_safetensors(tmp_path, capsys, shards, broken):
    # a copy, as a user holds it: forward-parity against SpecForge's own forward made on the spot for each
    safetensors = shutil.copytree(DRAFTS["specforge"], tmp_path / "safetensors")
    reference = by_contract(run_json(capsys, safetensors, "--target", TARGET)[1])
    path = _as_bin(DRAFTS["specforge"], tmp_path / f"bin{shards}", shards)
    before = tree_digest(path)
    code, doc, err = run_json(capsys, path, "--target", TARGET)
    assert code == 0 and errors_in(err) == ""
    assert {c: r["status"] for c, r in by_contract(doc).items()} == {c: r["status"] for c, r in reference.items()}
    assert by_contract(doc)["embed-head"]["evidence"]["head"]["from"] == "checkpoint"
    assert tree_digest(path) == before
    # and a broken one fails as its safetensors twin does
    bad = _as_bin(broken("specforge", remove=["midlayer.mlp.down_proj.weight"]), tmp_path / f"badbin{shards}", shards)
    code, doc, _ = run_json(capsys, bad, "--only", "key-naming")
    assert code == 1 and "model.layers.0.mlp.down_proj.weight" in doc["results"][0]["summary"]


def test_draft_published_under_the_base_architecture_fails_config(broken, capsys):
    path = broken("specforge", config={"architectures": ["LlamaForCausalLM"]})
    code, doc, err = run_json(capsys, path, "--target", TARGET)
    assert code == 1 and errors_in(err) == ""
    results = by_contract(doc)
    config = results["config"]
    assert config["status"] == "fail" and config["root_cause"]
    assert "to LlamaForCausalLM, a non-draft class" in config["summary"]
    assert 'architectures: ["LlamaForCausalLMEagle3"]' in config["fix"]
    # the contracts that read the loaded draft would only restate it: they point at config
    for cid in ("key-naming", "tensor-shapes", "d2t-semantics", "hidden-width", "embed-head"):
        assert results[cid]["status"] == "skip" and "(see config)" in results[cid]["summary"]
    # without config selected, the first contract that meets it fails with the same fix (never a silent exit 0)
    code, doc, _ = run_json(capsys, path, "--only", "key-naming")
    assert code == 1 and doc["results"][0]["status"] == "fail"
    assert "LlamaForCausalLMEagle3" in doc["results"][0]["fix"]


def test_speculators_checkpoint_says_it_is_judged_in_its_converted_form(capsys):
    path = DRAFTS["speculators-default"]
    code, doc, _ = run_json(capsys, path, "--target", TARGET, "--only", "config")
    assert code == 0
    config = doc["results"][0]
    assert config["status"] == "warn"
    assert "cannot serve this checkpoint as saved (architectures ['Eagle3DraftModel']" in config["summary"]
    assert "verbatim conversion" in config["summary"]
    command = f"eagle3-contracts convert --to sglang --verbatim {path} {path}-sglang"
    deploy = f"eagle3-contracts convert --to sglang {path} {path}-sglang --target {TARGET}"
    assert command in config["summary"] and deploy in config["fix"]
    assert doc["judged_as"] == {"form": "converted", "conversion": "verbatim", "command": command, "to_deploy": deploy}
    for fmt in ("text", "markdown"):
        assert main(["check", str(path), "--target", str(TARGET), "--only", "config", "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "verbatim conversion" in out and command in out
    # a flat config is judged as saved
    _, doc, _ = run_json(capsys, DRAFTS["specforge"], "--only", "key-naming")
    assert "judged_as" not in doc
