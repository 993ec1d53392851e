"""Inputs that cannot hurt: a fuzzed checkpoint (header lengths, offsets, dtypes, shapes, JSON, duplicate
config keys, NaN in d2t) always ends in exit 2 with one line, or in a contract verdict — never a
traceback or an internal error; pickle weights are read only through torch's restricted unpickler, so a harmful
one never runs; the checkpoint directory is never written."""

from __future__ import annotations

import json
import pickle
import re
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st

from contracts.cli import main
from tests.conftest import DRAFTS, FIXTURES, tree_digest

DTYPES = ["F32", "BF16", "F16", "I64", "I32", "BOOL", "U8", "F64", "F8_E4M3", "X9", "", 7]
FAST = "key-naming,tensor-shapes,d2t-semantics"
FUZZED = "key-naming,tensor-shapes,d2t-semantics,hidden-width,embed-head,config"
TARGET = FIXTURES / "targets" / "llama-tiny"


def _real_header():
    raw = (DRAFTS["specforge"] / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


HEADER, DATA = _real_header()


def _with_nan_d2t() -> bytes:
    """The specforge draft with d2t saved as float32 NaNs (a readable file the engine must judge)."""
    from safetensors.torch import load_file, save

    tensors = load_file(DRAFTS["specforge"] / "model.safetensors")
    tensors["d2t"] = torch.full((64,), float("nan"), dtype=torch.float32)
    return save(tensors)


@st.composite
def fuzzed_safetensors(draw) -> bytes:
    header = json.loads(json.dumps(HEADER))
    data = DATA
    if draw(st.booleans()):  # d2t as float32 NaNs, appended at the end of the data section
        begin, end = header["d2t"]["data_offsets"]
        values = torch.full((64,), float("nan"), dtype=torch.float32).numpy().tobytes()
        data = data[:begin] + data[end:]
        for entry in header.values():
            if isinstance(entry, dict) and "data_offsets" in entry and entry["data_offsets"][0] >= end:
                entry["data_offsets"] = [o - (end - begin) for o in entry["data_offsets"]]
        header["d2t"] = {"dtype": "F32", "shape": [64], "data_offsets": [len(data), len(data) + len(values)]}
        data = data + values
    # valid files often enough to reach verdicts (a third or more of the examples: what lies behind the reader)
    for _ in range(draw(st.sampled_from([0, 0, 0, 0, 1, 2, 3, 1, 0, 0, 0]))):
        names = sorted(k for k, v in header.items() if k != "__metadata__" and isinstance(v, dict))
        if not names:
            break
        name = draw(st.sampled_from(names))
        entry = header[name]
        field = draw(st.sampled_from(["dtype", "shape", "data_offsets", "drop", "drop", "rename", "rename", "junk"]))
        if field == "dtype":
            entry["dtype"] = draw(st.sampled_from(DTYPES))
        elif field == "shape":
            entry["shape"] = draw(st.lists(st.integers(-2, 300), max_size=3))
        elif field == "data_offsets":
            entry["data_offsets"] = draw(st.lists(st.integers(-5, len(DATA) + 5000), min_size=0, max_size=3))
        elif field == "drop":
            del header[name]
        elif field == "rename":
            header[draw(st.text(min_size=1, max_size=12))] = header.pop(name)
        else:
            header[name] = draw(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers())))
    raw = json.dumps(header).encode()
    length = {"ok": len(raw), "huge": draw(st.integers(0, 2 ** 64 - 1)),
              "near": draw(st.integers(0, len(raw) + 64))}[draw(st.sampled_from(["ok"] * 4 + ["huge", "near"] + ["ok"] * 4))]
    body = {"ok": data, "junk": draw(st.binary(max_size=64)),
            "truncated": data[: len(data) // 3]}[draw(st.sampled_from(["ok"] * 4 + ["junk", "truncated"] + ["ok"] * 4))]
    if draw(st.integers(0, 39)) == 39:  # (not 0: Hypothesis favours the simplest value)
        return draw(st.binary(max_size=128))
    return struct.pack("<Q", length) + raw + body


# what a trainer's export or a user's hand edit changes in a config, with values an engine may or may not accept:
# each reaches the contracts behind the reader (aux ids, switches, rope, vocab sizes, layer counts, dtypes)
CONFIG_VALUES = {
    "eagle_config": st.one_of(st.none(), st.fixed_dictionaries({"eagle_aux_hidden_state_layer_ids": st.lists(
        st.integers(-2, 10), max_size=4)}), st.just({"use_aux_hidden_state": False})),
    "eagle_aux_hidden_state_layer_ids": st.lists(st.integers(-2, 10), max_size=4),
    "norm_before_residual": st.booleans(), "tie_word_embeddings": st.booleans(),
    "rope_theta": st.sampled_from([10000.0, 500000.0, 100.0, 0.0, -1.0]),
    "rope_scaling": st.one_of(st.none(), st.just({"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 512}),
                              st.just({"rope_type": "linear", "factor": 2.0}), st.just({"rope_type": "unknown"})),
    "max_position_embeddings": st.sampled_from([2048, 128, 1, 131072]),
    "draft_vocab_size": st.sampled_from([64, 32, 512, 1, 100]),
    "vocab_size": st.sampled_from([512, 256, 1024]),
    "num_hidden_layers": st.integers(0, 3),
    "hidden_size": st.sampled_from([64, 32, 128]),
    "head_dim": st.sampled_from([16, 8, 32]),
    "architectures": st.sampled_from([["LlamaForCausalLMEagle3"], ["LlamaForCausalLM"], ["Eagle3DraftModel"],
                                      ["Qwen3ForCausalLMEagle3"], []]),
    "dtype": st.sampled_from(["bfloat16", "float32", "float16", "int8"]),
    "target_hidden_size": st.sampled_from([64, 32]),
}


@st.composite
def fuzzed_configs(draw) -> str:
    cfg = json.loads((DRAFTS["specforge"] / "config.json").read_text())
    # (Hypothesis favours a list's first and last elements: the usable choices sit at both ends)
    kind = draw(st.sampled_from(["valid"] * 2 + ["switches"] * 3 + ["duplicate", "not_json", "not_object",
                                                                    "odd_values"] + ["switches"] * 3 + ["valid"] * 2))
    if kind == "switches":
        for key in draw(st.lists(st.sampled_from(sorted(CONFIG_VALUES)), min_size=1, max_size=3, unique=True)):
            cfg[key] = draw(CONFIG_VALUES[key])
        return json.dumps(cfg)
    if kind == "duplicate":
        text = json.dumps(cfg)
        return text[:-1] + ', "hidden_size": 32}'
    if kind == "not_json":
        return draw(st.text(max_size=40))
    if kind == "not_object":
        return json.dumps(draw(st.one_of(st.lists(st.integers()), st.integers(), st.none())))
    if kind == "odd_values":
        key = draw(st.sampled_from(["vocab_size", "draft_vocab_size", "hidden_size", "num_hidden_layers",
                                    "architectures", "eagle_config", "torch_dtype", "dtype"]))
        cfg[key] = draw(st.one_of(st.none(), st.integers(-3, 5000), st.text(max_size=8), st.lists(st.integers())))
    return json.dumps(cfg)


_PRISTINE = (DRAFTS["specforge"] / "model.safetensors").read_bytes()
_PRISTINE_CONFIG = (DRAFTS["specforge"] / "config.json").read_text()
_NAN_D2T = _with_nan_d2t()


# capsys is read out within every example, so sharing it across examples is safe
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          max_examples=2 * settings.default.max_examples)
@given(weights=fuzzed_safetensors(), config=fuzzed_configs())
@example(weights=_PRISTINE, config=_PRISTINE_CONFIG)  # a verdict: pass
@example(weights=_NAN_D2T, config=_PRISTINE_CONFIG)  # a verdict: fail, d2t-semantics names the NaNs
def test_fuzzed_checkpoint_is_a_verdict_or_one_line_exit_2(weights, config, capsys):
    """Every contract but forward-parity (against the tiny Llama target) on a fuzzed header and config: a verdict or
    one line."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "ckpt"
        d.mkdir()
        (d / "config.json").write_text(config)
        (d / "model.safetensors").write_bytes(weights)
        before = tree_digest(d)
        # every contract but forward-parity, which runs the trainer's own forward in its environment for each draft
        # it has no reference of (tests/test_user_drafts.py); here: what reading a fuzzed checkpoint does
        code = main(["check", str(d), "--target", str(TARGET), "--format", "json", "--only", FUZZED])
        out, err = capsys.readouterr()
        note(f"exit {code}; stderr {err!r}; stdout {out[:300]!r}")
        event("a verdict" if code in (0, 1) else "exit 2 (unusable input)")
        if code == 2:  # what made it unusable, without the path: which readers the fuzzing exercises
            event("exit 2: " + re.sub(r"[\w/.-]*/ckpt/[\w.-]*:? ?", "", err.partition("error: ")[2])[:40])
        if code in (0, 1):
            for r in json.loads(out)["results"]:
                event(f"{r['contract']}: {r['status']}")
        if weights == _PRISTINE and config == _PRISTINE_CONFIG:
            assert code == 0
        elif weights == _NAN_D2T and config == _PRISTINE_CONFIG:
            assert code == 1 and "NaN" in out
        assert tree_digest(d) == before
    assert "Traceback" not in err and "internal error" not in err
    if code == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith("eagle3-contracts: error: ")
    else:
        assert code in (0, 1) and err == ""
        results = json.loads(out)["results"]
        assert {r["status"] for r in results} <= {"pass", "fail", "warn", "skip"} and len(results) == 6


class _CreatesAFile:
    """Unpickling this object creates a file (what a malicious .bin could do)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_harmful_pickles_are_refused_and_never_run(tmp_path, capsys, writer):
    marker = tmp_path / "unpickled-marker"
    harmful = {"fc.weight": _CreatesAFile(str(marker))}
    only_pickle = tmp_path / "only-pickle"
    only_pickle.mkdir()
    shutil.copy(DRAFTS["specforge"] / "config.json", only_pickle)
    if writer == "pickle":
        (only_pickle / "pytorch_model.bin").write_bytes(pickle.dumps(harmful))
    else:
        torch.save(harmful, only_pickle / "pytorch_model.bin")
    beside = tmp_path / "beside"
    shutil.copytree(DRAFTS["specforge"], beside)
    shutil.copy(only_pickle / "pytorch_model.bin", beside / "training_state.pt")  # safetensors win: never opened
    before = tree_digest(only_pickle)
    assert main(["check", str(only_pickle)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused by torch's restricted unpickler (weights_only=True)" in err
    assert main(["check", str(beside), "--only", "key-naming"]) == 0
    capsys.readouterr()
    assert not marker.exists() and tree_digest(only_pickle) == before
    # the payload really is harmful: unpickling it here would create the marker
    pickle.loads(pickle.dumps(harmful))
    assert marker.exists()


def test_checkpoint_tree_unchanged_on_failure_on_bad_input_and_read_only(tmp_path, capsys, broken):
    for path, expected in ((broken("specforge", remove=["midlayer.mlp.down_proj.weight"]), 1),
                           (broken("speculators-default"), 0)):
        before = tree_digest(path)
        for mode in (0o755, 0o555):
            path.chmod(mode)
            try:
                assert main(["check", str(path), "--only", FAST]) == expected
            finally:
                path.chmod(0o755)
            assert tree_digest(path) == before
    capsys.readouterr()
