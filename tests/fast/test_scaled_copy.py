"""The scaled copy a real-size pair is given to llama.cpp as: when one is made, that every width is divided by one
factor and every vocabulary kept, that what is read back is in the checkpoint's numbers, and that the copy's
tensors are the real ones' top-left blocks, read without mapping the file (a mapped 1 GB embedding is 1 GB of
resident memory)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import DRAFTS, FIXTURES, TARGET
from safetensors.torch import save_file

from contracts.checkpoint import Checkpoint, tensor_rows
from contracts.engines import scaled
from contracts.engines.llamacpp.pair import later_layer, pair_bytes, scaled_pair

sys.path.insert(0, str(FIXTURES.parent / "benchmarks"))


@pytest.fixture(scope="module")
def real_size(tmp_path_factory):
    """A Llama-3.1-8B-sized SpecForge drafter and a target of its shape holding its vocabulary tensors and first
    layer, sparse (zeros) on disk."""
    from bench_check import drafter, weighted_target

    root = tmp_path_factory.mktemp("real-size")
    drafter(root / "draft", hidden=4096, vocab=128256, draft_vocab=32000, heads=32, kv_heads=8, inter=14336,
            layer_prefix="midlayer", with_embed=False, ids=[2, 16, 29])
    weighted_target(root / "target")
    return root / "draft", root / "target"


def llamacpp_plan(draft, target):
    return scaled.plan(draft, target, pair_bytes, target_given=lambda name: not later_layer(name))


def test_a_small_pair_is_judged_at_full_size():
    assert llamacpp_plan(DRAFTS["specforge"], TARGET) is None


def test_a_pair_whose_vocabulary_equals_a_width_is_not_scaled(monkeypatch):
    """The bundled drafts' draft vocabulary (64) is their hidden size: an axis of 64 could be either, so no copy."""
    monkeypatch.setenv("EAGLE3_CONTRACTS_SCALE_ABOVE_MB", "0")
    assert llamacpp_plan(DRAFTS["specforge"], TARGET) is None


def test_a_real_size_pair_divides_every_width_by_one_factor_and_keeps_the_vocabularies(real_size, tmp_path):
    draft, target = real_size
    scale = llamacpp_plan(draft, target)
    assert (scale.width, scale.heads, scale.head_dim) == (64, 8, 8)
    assert {32000, 128256} <= scale.kept
    copy, target_copy = scaled_pair(draft, target, scale, tmp_path)
    shapes = {k: list(t.shape) for k, t in Checkpoint.open(copy).tensors.items()}
    assert shapes["fc.weight"] == [64, 192] and shapes["lm_head.weight"] == [32000, 64]
    assert shapes["d2t"] == [32000] and shapes["t2d"] == [128256]
    assert shapes["midlayer.self_attn.k_proj.weight"] == [16, 128]  # 8 KV heads x 128 -> 1 x 16, over 2 x hidden
    config = json.loads((copy / "config.json").read_text())
    assert (config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"],
            config["vocab_size"], config["draft_vocab_size"]) == (64, 4, 1, 16, 128256, 32000)
    assert config["eagle_config"] == json.loads((draft / "config.json").read_text())["eagle_config"]
    target_config = json.loads((target_copy / "config.json").read_text())
    assert (target_config["hidden_size"], target_config["num_hidden_layers"]) == (64, 32)  # layer count kept
    real_d2t = tensor_rows(draft / "model.safetensors", "d2t")[:]
    assert torch.equal(tensor_rows(copy / "model.safetensors", "d2t")[:], real_d2t)


def test_what_is_read_back_is_in_the_checkpoints_numbers(real_size):
    scale = llamacpp_plan(*real_size)
    assert scale.up_shape([192, 64]) == [12288, 4096]
    assert scale.up_shape([32000, 64]) == [32000, 4096]  # a vocabulary axis stays
    line = "check_tensor_dims: tensor 'fc.weight' has wrong shape; expected   192,    64, got   128,    64,     1,     1"
    assert scale.up_text(line).endswith("expected 12288, 4096, got 8192, 4096, 1, 1")
    meta = scale.up_metadata({"eagle3.embedding_length": 64, "eagle3.attention.head_count": 4,
                              "eagle3.attention.key_length": 16, "eagle3.vocab_size": 128256}, "eagle3")
    assert meta == {"eagle3.embedding_length": 4096, "eagle3.attention.head_count": 32,
                    "eagle3.attention.key_length": 128, "eagle3.vocab_size": 128256}


def test_rows_are_read_from_the_file_exactly_as_safetensors_holds_them(tmp_path):
    tensors = {"w": torch.randn(7, 5).bfloat16(), "ids": torch.arange(9), "flag": torch.tensor([True, False, True]),
               "scalar": torch.tensor(3.0)}
    save_file(tensors, str(tmp_path / "m.safetensors"))
    for name, value in tensors.items():
        rows = tensor_rows(tmp_path / "m.safetensors", name)
        assert tuple(rows.shape) == tuple(value.shape)
        if value.dim():
            for index in (slice(1, 3), slice(None), -1, slice(None, None, 2)):
                assert torch.equal(rows[index], value[index])
        else:
            assert torch.equal(rows[()], value)
    assert torch.equal(tensor_rows(tmp_path / "m.safetensors", "w")[2:6, :3], tensors["w"][2:6, :3])
