"""The read-only checkpoint view: safetensors headers are validated without reading data, and every
malformed input is an InputError with one line."""

from __future__ import annotations

import json
import struct

import pytest

from contracts.checkpoint import Checkpoint, InputError, read_safetensors_header
from tests.conftest import DRAFTS


def write_raw(path, header: dict | bytes, data: bytes = b"", claimed_len: int | None = None):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if claimed_len is None else claimed_len
    path.write_bytes(struct.pack("<Q", n) + raw + data)
    return path


def test_headers_of_a_real_draft():
    infos = read_safetensors_header(DRAFTS["specforge"] / "model.safetensors")
    assert infos["fc.weight"].shape == (64, 192) and infos["fc.weight"].dtype == "bfloat16"
    assert infos["d2t"].dtype == "int64" and infos["t2d"].dtype == "bool"


@pytest.mark.parametrize("header,data,claimed,message", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, None, None),
    (b"", b"", 10 ** 9, "header claims"),
    (b"not json", b"", None, "not JSON"),
    (b"[1]", b"", None, "not a JSON object"),
    ({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, None, "unknown dtype"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, None, "malformed shape"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, b"\0" * 8, None, "malformed data_offsets"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, None, "truncated"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, None, "needs 12"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, None, "overlaps the previous tensor"),
])
def test_header_validation(tmp_path, header, data, claimed, message):
    path = write_raw(tmp_path / "m.safetensors", header, data, claimed)
    if message is None:
        assert read_safetensors_header(path)["a"].shape == (2,)
    else:
        with pytest.raises(InputError, match=message):
            read_safetensors_header(path)


def test_file_shorter_than_the_length_prefix(tmp_path):
    (tmp_path / "m.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(InputError, match="no header length"):
        read_safetensors_header(tmp_path / "m.safetensors")


def test_sharded_checkpoint_through_its_index(tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = load_file(DRAFTS["specforge"] / "model.safetensors")
    keys = sorted(tensors)
    half = len(keys) // 2
    d = tmp_path / "sharded"
    d.mkdir()
    (d / "config.json").write_text((DRAFTS["specforge"] / "config.json").read_text())
    save_file({k: tensors[k] for k in keys[:half]}, d / "model-00001-of-00002.safetensors")
    save_file({k: tensors[k] for k in keys[half:]}, d / "model-00002-of-00002.safetensors")
    weight_map = {k: f"model-0000{1 if i < half else 2}-of-00002.safetensors" for i, k in enumerate(keys)}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    ckpt = Checkpoint.open(d)
    assert sorted(ckpt.tensors) == keys
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(InputError, match="shard model-00002-of-00002.safetensors is missing"):
        Checkpoint.open(d)


def test_same_tensor_in_two_files_is_refused(tmp_path):
    import shutil

    d = tmp_path / "twice"
    shutil.copytree(DRAFTS["specforge"], d)
    shutil.copy(d / "model.safetensors", d / "extra.safetensors")
    with pytest.raises(InputError, match="appears in both"):
        Checkpoint.open(d)


@pytest.mark.parametrize("name,fmt", [("specforge", "specforge"), ("speculators-default", "speculators"),
                                      ("speculators-train", "speculators")])
def test_trainer_format_detection(name, fmt):
    assert Checkpoint.open(DRAFTS[name]).trainer_format == fmt


def test_target_without_weights_is_fine_when_weights_are_optional(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    assert Checkpoint.open(tmp_path, require_weights=False).tensors == {}
