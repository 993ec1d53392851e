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
    assert {("speculators", "0.9.0"), ("specforge", "0.2.0"), ("modelopt", "0.47.0"), ("automodel", "0.7.0")} <= trainers
    assert [s.name for s in bundled_subjects()] == [
        *AUTOMODEL, "modelopt-default-hd32", "modelopt-explicit-hd32", "specforge", "specforge-eagle31-hd32", "specforge-hd32",
        "speculators-default", "speculators-default-hd32", "speculators-kimi-k25", "speculators-train",
        "speculators-train-hd32"]


AUTOMODEL = ["automodel-explicit31-hd32", "automodel-raw-hd32", "automodel-sglang-hd32", "automodel-vllm-hd32"]
WITH_REFERENCES = ["specforge", "speculators-default", "speculators-train",
                   "specforge-hd32", "speculators-default-hd32", "speculators-train-hd32"]


@pytest.mark.parametrize("name", [*WITH_REFERENCES, "speculators-kimi-k25"])
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


# forward-parity (issue 6): each trainer-built draft has its trainer's step-0 reference forward committed.
REFERENCE_TENSORS = {
    "input_ids": ("torch.int64", [8]),
    "positions": ("torch.int64", [8]),
    "hidden_states": ("torch.float32", [8, 3 * 64]),
    "logits": ("torch.float32", [8, 64]),
}
REFERENCE_METADATA = {"trainer", "version", "functions_called", "attn_implementation", "dtype", "fixture",
                      "weights", "embed_tokens", "hidden_states_source", "prompt", "alignment"}


def _reference(name):
    ref = MANIFEST[name]["reference"]
    with safe_open(str(REPO / ref["path"]), framework="pt") as f:
        return ref, {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


@pytest.mark.parametrize("name", [*WITH_REFERENCES, "specforge-eagle31-hd32", "modelopt-default-hd32",
                                  "modelopt-explicit-hd32", *AUTOMODEL])
def test_reference_forward_is_committed_with_its_draft(name):
    import hashlib

    import torch

    entry = MANIFEST[name]
    ref, tensors, meta = _reference(name)
    path = REPO / ref["path"]
    assert path == FIXTURES / "references" / f"{name}.safetensors"
    raw = path.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == ref["sha256"]
    # the builder sorts the metadata keys so a rebuild is byte-identical
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert list(header["__metadata__"]) == sorted(header["__metadata__"])

    # logits over the draft vocabulary: 64, or the full 512 of Model Optimizer's default (it keeps the vocabulary)
    vocab = len(entry["selected_target_ids"])
    # each trainer's TTT steps: three recorded (two where the draft was trained for two)
    steps = entry.get("ttt_length", 3)
    want = {**REFERENCE_TENSORS, "logits": ("torch.float32", [8, vocab]),
            "step_logits": ("torch.float32", [steps, 8, vocab])}
    assert {k: (str(t.dtype), list(t.shape)) for k, t in tensors.items()} == want
    chain = tensors["step_logits"]
    assert torch.equal(chain[0], tensors["logits"]) and meta["steps"] == str(steps)
    for k in range(1, steps):  # rows past the ground truth are NaN, the rest finite and not step 0's
        assert torch.isnan(chain[k, 8 - k:]).all() and torch.isfinite(chain[k, :8 - k]).all()
        assert not torch.allclose(chain[k, :8 - k], chain[0, :8 - k])
    assert ref["tensors"] == {k: {"dtype": d.removeprefix("torch."), "shape": s} for k, (d, s) in sorted(want.items())}
    assert tensors["positions"].tolist() == list(range(8))
    assert 0 <= int(tensors["input_ids"].min()) and int(tensors["input_ids"].max()) < 512
    assert json.loads(meta["prompt"])[1:] == tensors["input_ids"].tolist()
    for k in ("hidden_states", "logits"):
        assert torch.isfinite(tensors[k]).all() and tensors[k].abs().max() > 0

    assert REFERENCE_METADATA <= set(meta)
    assert (meta["fixture"], meta["trainer"], meta["version"]) == (name, entry["trainer"], entry["trainer_version"])
    assert meta["dtype"] == ref["dtype"] == "float32"
    assert meta["attn_implementation"] == ref["attn_implementation"]
    assert json.loads(meta["functions_called"]) == ref["functions_called"]
    assert json.loads(meta["aux_layer_ids"]) == entry["aux_layer_ids"]


def test_references_share_their_inputs():
    """One prompt through the one target; both trainers' default aux layers are HF hidden_states[2, 4, 5]
    of the 8-layer target (speculators ids [2, 4, 5], specforge ids [1, 3, 4] + 1), so the inputs agree."""
    import torch

    for names in (WITH_REFERENCES[:3], WITH_REFERENCES[3:]):  # per target (llama-tiny, llama-tiny-hd32)
        inputs = {n: _reference(n)[1] for n in names}
        for n in names[1:]:
            for k in ("input_ids", "positions", "hidden_states"):
                assert torch.equal(inputs[n][k], inputs[names[0]][k]), (n, k)


def test_the_head_size_32_twins_differ_from_their_originals_only_in_the_attention_geometry():
    """The -hd32 drafts are the same builds for fixtures/targets/llama-tiny-hd32 (2 heads of 32, 1 KV head): a
    head size vLLM's CPU attention kernel takes, so forward-parity is judged on both engines."""
    for name in ("specforge", "speculators-default", "speculators-train"):
        a, b = MANIFEST[name], MANIFEST[f"{name}-hd32"]
        assert b["target"] == "target-llama-tiny-hd32" and a["target"] == "target-llama-tiny"
        assert a["selected_target_ids"] == b["selected_target_ids"] and a["aux_layer_ids"] == b["aux_layer_ids"]
        cfg = json.loads((REPO / b["path"] / "config.json").read_text())
        layer = cfg.get("transformer_layer_config", cfg)
        assert (layer["num_attention_heads"], layer["num_key_value_heads"], layer["head_dim"]) == (2, 1, 32)


def test_model_optimizer_saves_d2t_in_frequency_order_and_no_t2d():
    """calibrate_frequent_vocab: draft id i is the i-th most frequent target id (ties: the lower id first)."""
    import torch

    entry = MANIFEST["modelopt-explicit-hd32"]
    freq = {int(k): v for k, v in json.loads((FIXTURES / "vocab" / "token_freq.json").read_text()).items()}
    with safe_open(str(REPO / entry["path"] / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        d2t = f.get_tensor("d2t")
    assert "t2d" not in keys and "embed_tokens.weight" not in keys
    selected = (d2t + torch.arange(64)).tolist()
    assert selected == entry["selected_target_ids"]
    assert selected == sorted(freq, key=lambda i: (-freq[i], i))[:64]
    assert selected != sorted(selected)  # not ascending: the engines serve it as trained all the same
    assert sorted(selected) == MANIFEST["specforge"]["selected_target_ids"]  # the same 64 ids as the others
    assert "d2t" not in set(safe_open(str(REPO / MANIFEST["modelopt-default-hd32"]["path"] / "model.safetensors"),
                                      framework="pt").keys())


def test_each_trainer_records_what_its_switches_mean():
    """Observed on each trainer's own forward (flipped on the same weights): SpecForge's norm_output changes the
    step-0 logits only (the final norm before lm_head), speculators' only the state fed to the next step."""
    specforge = MANIFEST["specforge-eagle31-hd32"]["reference"]["switch_semantics"]
    assert specforge["norm_output"]["step_0_change"] > 0 and specforge["norm_output"]["fed_back_state_change"] == 0
    assert specforge["fc_norm"]["first_acts_at_step"] == 0
    speculators = MANIFEST["speculators-train"]["reference"]["switch_semantics"]
    assert speculators["norm_output"]["step_0_change"] == 0 and speculators["norm_output"]["fed_back_state_change"] > 0
    assert speculators["norm_before_residual"]["first_acts_at_step"] == 0


def _tensors(name):
    from safetensors.torch import load_file

    return load_file(str(REPO / MANIFEST[name]["path"] / "model-00001-of-00001.safetensors"))


def test_automodel_saves_d2t_in_its_selection_order_and_t2d_as_the_set():
    """build_eagle3_token_mapping: the tokenizer's special tokens first (bos, eos, pad), then by descending supervised
    frequency; set_vocab_mapping writes d2t[i] = selected[i] - i and t2d[selected] = True, kept by every export."""
    import torch

    for name in AUTOMODEL:
        tensors, entry = _tensors(name), MANIFEST[name]
        selected = (tensors["d2t"] + torch.arange(64)).tolist()
        assert selected == entry["selected_target_ids"] and selected[:3] == [1, 2, 0]
        assert selected != sorted(selected) and tensors["t2d"].dtype == torch.bool
        assert tensors["t2d"].nonzero().flatten().tolist() == sorted(selected)


def test_automodel_exports_differ_as_its_serve_helpers_write_them():
    """The recipe's checkpoint keeps the draft's `model.` wrapper prefix and its own class name; serve_sglang rewrites
    only the class, serve_vllm also strips the prefix; none writes aux layer ids or the draft's layer count (each keeps
    the target's num_hidden_layers, 8)."""
    configs = {name: json.loads((REPO / MANIFEST[name]["path"] / "config.json").read_text()) for name in AUTOMODEL}
    assert configs["automodel-raw-hd32"]["architectures"] == ["LlamaEagle3DraftModel"]
    assert all(configs[n]["architectures"] == ["LlamaForCausalLMEagle3"] for n in AUTOMODEL[:1] + AUTOMODEL[2:])
    assert all(c["num_hidden_layers"] == 8 and "eagle_aux_hidden_state_layer_ids" not in c for c in configs.values())
    assert "model.fc.weight" in _tensors("automodel-raw-hd32") and "model.fc.weight" in _tensors("automodel-sglang-hd32")
    assert "fc.weight" in _tensors("automodel-vllm-hd32") and not any(
        k.startswith("model.") for k in _tensors("automodel-vllm-hd32"))
    assert MANIFEST["automodel-explicit31-hd32"]["aux_layer_ids"] == [1, 4, 6]
    assert configs["automodel-explicit31-hd32"]["fc_norm"] is configs["automodel-explicit31-hd32"]["norm_output"] is True
    assert "fc_norm.0.weight" in _tensors("automodel-explicit31-hd32")
