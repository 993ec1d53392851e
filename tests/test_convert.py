"""`eagle3-contracts convert --to sglang`: the flat config a user would write, tensors unchanged, SRC untouched."""

from __future__ import annotations

import json

import pytest

from contracts.cli import main
from contracts.convert import speculators_to_sglang_config
from tests.conftest import DRAFTS, tree_digest


def test_convert_train_defaults(tmp_path, capsys):
    src = DRAFTS["speculators-train"]
    before = tree_digest(src)
    assert main(["convert", "--to", "sglang", str(src), str(tmp_path / "out")]) == 0
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


def test_copy_instead_of_link(tmp_path):
    assert main(["convert", "--to", "sglang", str(DRAFTS["speculators-default"]), str(tmp_path / "o"), "--copy"]) == 0
    out = tmp_path / "o" / "model.safetensors"
    assert not out.is_symlink()
    assert out.read_bytes() == (DRAFTS["speculators-default"] / "model.safetensors").read_bytes()


def test_target_hidden_size_is_written_where_it_differs():
    cfg = json.loads((DRAFTS["speculators-default"] / "config.json").read_text())
    cfg["target_hidden_size"] = 128
    assert speculators_to_sglang_config(cfg)["target_hidden_size"] == 128


@pytest.mark.parametrize("case", ["flat source", "dst inside src", "dst not empty"])
def test_refusals_are_exit_2(case, tmp_path, capsys):
    src, dst = DRAFTS["speculators-default"], tmp_path / "dst"
    if case == "flat source":
        src = DRAFTS["specforge"]
    elif case == "dst inside src":
        dst = src / "converted"
    else:
        dst.mkdir()
        (dst / "x").write_text("x")
    before = tree_digest(src)
    assert main(["convert", "--to", "sglang", str(src), str(dst)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert tree_digest(src) == before
