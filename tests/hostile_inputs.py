"""A generated battery of hostile and careless inputs, each with the outcome the suite owes it.

Every case is made from the bundled tiny drafts at test time (no binary blobs are committed): a ``Case`` writes
its inputs under a fresh directory and gives the command line, the exit code it must end in and a pattern its one
error line must match. ``tests/test_hostile_inputs.py`` runs each in a fresh process and holds it to the bounds:
that exit, one readable line, peak RSS under 1 GB, under 60 s, no payload run, nothing written outside DST.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tests.conftest import DRAFTS, FIXTURES

SPECFORGE = DRAFTS["specforge"]
TARGET = FIXTURES / "targets" / "llama-tiny"
MARKER = "payload-ran"  # a payload that runs creates this file in the case directory


@dataclass
class Case:
    id: str
    make: Callable[[Path], list[str]]  # writes the inputs under the case directory, returns the CLI arguments
    exit: int | tuple  # the exit code owed (a tuple: any of them, e.g. a verdict either way)
    message: str = ""  # a regular expression the error line must match (exit 2), or stdout must contain
    command: str = "cli"  # "cli" (eagle3-contracts) or "pytest" (the plugin)
    writes: tuple = ()  # paths under the case directory the command may create (convert's DST, --output)
    slow: bool = False  # reaches an engine (a verdict): seconds, not milliseconds
    note: str = field(default="")


def draft(root: Path, name: str = "ckpt", source: Path = SPECFORGE) -> Path:
    d = root / name
    shutil.copytree(source, d)
    return d


def with_config(root: Path, change: dict | None = None, text: str | None = None, name: str = "ckpt",
                source: Path = SPECFORGE, nested: str | None = None) -> Path:
    d = draft(root, name, source)
    if text is not None:
        (d / "config.json").write_text(text)
        return d
    cfg = json.loads((d / "config.json").read_text())
    (cfg[nested] if nested else cfg).update(change or {})
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def target_with(root: Path, change: dict | None = None, text: str | None = None) -> Path:
    t = root / "target"
    t.mkdir()
    if text is not None:
        (t / "config.json").write_text(text)
    else:
        cfg = json.loads((TARGET / "config.json").read_text())
        cfg.update(change or {})
        (t / "config.json").write_text(json.dumps(cfg))
    return t


def _header_and_data(source: Path = SPECFORGE) -> tuple[dict, bytes]:
    raw = (source / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def with_weights(root: Path, raw: bytes, name: str = "model.safetensors") -> Path:
    d = draft(root)
    (d / "model.safetensors").unlink()
    (d / name).write_bytes(raw)
    return d


def safetensors_bytes(header: dict | str | bytes, data: bytes, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else (header if isinstance(header, str) else json.dumps(header)).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def header_case(mutate: Callable[[dict, bytes], tuple]) -> Callable[[Path], list[str]]:
    """A case whose safetensors header MUTATE rewrites: it returns (header or raw header text, data)."""
    def make(root: Path) -> list[str]:
        header, data = _header_and_data()
        out = mutate(header, data)
        return ["check", str(with_weights(root, safetensors_bytes(*out))), "--only", "key-naming"]
    return make


def pickle_dir(root: Path, files: dict[str, bytes], config: bool = True) -> Path:
    d = root / "ckpt"
    d.mkdir()
    if config:
        shutil.copy(SPECFORGE / "config.json", d)
    for name, raw in files.items():
        (d / name).write_bytes(raw)
    return d


class RunsOnLoad:
    """Unpickling this calls CALLABLE(*ARGS) (what a malicious weight file does)."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def payload(root: Path, fn=None, *args) -> dict:
    marker = str(root / MARKER)
    return {"fc.weight": RunsOnLoad(fn or open, *(args or (marker, "w")))}


def torch_zip(obj) -> bytes:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def zip_bomb(inflated: int) -> bytes:
    """A torch-zip-shaped file whose data.pkl is deflated from INFLATED bytes (a few MB on disk)."""
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("archive/version", "3\n")
        with z.open("archive/data.pkl", "w", force_zip64=True) as f:
            chunk = b"\0" * (1 << 20)
            for _ in range(inflated // len(chunk)):
                f.write(chunk)
    return buf.getvalue()


def sparse_file(path: Path, size: int) -> None:
    with path.open("wb") as f:
        f.truncate(size)


def fifo(path: Path) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)


def link(path: Path, to: str) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(to)


def _config_value_cases() -> list[Case]:
    """Sizes a config may not ask for, in the draft and in the target, each named with its key and bound."""
    cases = []
    values = {
        "zero": (0, r"hidden_size is 0"), "negative": (-64, r"hidden_size is -64"),
        "string": ("64", r"hidden_size must be an integer, got '64'"),
        "float": (64.5, r"hidden_size must be an integer, got 64.5"),
        "bool": (True, r"hidden_size must be an integer, got True"),
        "list": ([64], r"hidden_size must be an integer"),
        "huge": (1 << 40, r"hidden_size is 1099511627776: this suite's bounds are 1\.\.131072"),
    }
    for label, (value, pattern) in values.items():
        cases.append(Case(f"draft-hidden_size-{label}", lambda r, v=value: ["check", str(with_config(r, {"hidden_size": v}))],
                          2, pattern))
        cases.append(Case(f"target-hidden_size-{label}", lambda r, v=value: [
            "check", str(draft(r)), "--target", str(target_with(r, {"hidden_size": v}))], 2, pattern))
    base = json.dumps(json.loads((SPECFORGE / "config.json").read_text()))
    for key, constant, pattern in (("hidden_size", "Infinity", r"hidden_size must be an integer, got inf"),
                                   ("hidden_size", "NaN", r"hidden_size must be an integer, got nan"),
                                   ("num_hidden_layers", "-Infinity", r"num_hidden_layers must be an integer")):
        text = f'{base[:-1]}, "{key}": {constant}}}'  # the key given again: Python's json keeps the last
        cases.append(Case(f"draft-{key}-{constant}", lambda r, t=text: ["check", str(with_config(r, text=t))], 2,
                          pattern))
    for key, value, pattern in (
            ("num_hidden_layers", 10 ** 6, r"num_hidden_layers is 1000000: an EAGLE-3 draft has a few layers"),
            ("num_hidden_layers", 3000, r"num_hidden_layers is 3000: an EAGLE-3 draft has a few layers"),
            ("num_hidden_layers", -1, r"num_hidden_layers is -1"),
            ("vocab_size", 10 ** 7, r"vocab_size is 10000000: this suite's bounds are 1\.\.8388608"),
            ("vocab_size", 0, r"vocab_size is 0"),
            ("draft_vocab_size", 10 ** 9, r"draft_vocab_size is 1000000000"),
            ("draft_vocab_size", 0, r"draft_vocab_size is 0: this suite's bounds are 1\.\.8388608"),
            ("intermediate_size", 4 * 10 ** 6, r"intermediate_size is 4000000"),
            ("num_attention_heads", 0, r"num_attention_heads is 0"),
            ("num_key_value_heads", 10 ** 6, r"num_key_value_heads is 1000000"),
            ("head_dim", 10 ** 9, r"head_dim is 1000000000"),
            ("vocab_size", "many", r"vocab_size must be an integer, got 'many'")):
        cases.append(Case(f"draft-{key}-{value}", lambda r, k=key, v=value: [
            "check", str(with_config(r, {k: v}))], 2, pattern))
    for key, value, pattern in (("num_hidden_layers", 10 ** 6, r"num_hidden_layers is 1000000: this suite's bounds"),
                                ("vocab_size", 10 ** 7, r"vocab_size is 10000000"),
                                ("intermediate_size", 4 * 10 ** 6, r"intermediate_size is 4000000"),
                                ("num_attention_heads", "x", r"num_attention_heads must be an integer")):
        cases.append(Case(f"target-{key}-{value}", lambda r, k=key, v=value: [
            "check", str(draft(r)), "--target", str(target_with(r, {k: v}))], 2, pattern))
    cases.append(Case("draft-config-at-every-bound", lambda r: ["check", str(with_config(r, {
        "vocab_size": 1 << 23, "draft_vocab_size": 1 << 23, "hidden_size": 1 << 17, "intermediate_size": 1 << 20})),
        "--target", str(TARGET), "--only", "key-naming,tensor-shapes,config"], 1,
        r"vocab_size 8388608 differs from the target's", slow=True,
        note="within the bounds: judged on the meta device (what the engine would build is never allocated)"))
    cases.append(Case("speculators-nested-hidden_size-0", lambda r: ["check", str(with_config(
        r, {"hidden_size": 0}, source=DRAFTS["speculators-default"], nested="transformer_layer_config"))], 2,
        r"transformer_layer_config\.hidden_size is 0"))
    cases.append(Case("target-text_config-vocab-huge", lambda r: ["check", str(draft(r)), "--target", str(
        target_with(r, {"text_config": {"vocab_size": 10 ** 12, "hidden_size": 64}}))], 2,
        r"text_config\.vocab_size is 1000000000000"))
    return cases


def _json_cases() -> list[Case]:
    base = (SPECFORGE / "config.json").read_text()
    texts = {
        "empty": ("", r"invalid JSON in config\.json"),
        "not-json": ("{hidden_size: 64", r"invalid JSON in config\.json"),
        "list": ("[1, 2]", r"config\.json must be a JSON object, got list"),
        "null": ("null", r"must be a JSON object, got NoneType"),
        "deep": ("[" * 100000 + "]" * 100000, r"invalid JSON in config\.json: nested too deeply"),
        "5000-digit-int": (base[:-1].rstrip().rstrip("}") + ', "rope_theta": ' + "9" * 5000 + "}",
                           r"unusable number in config\.json: Exceeds the limit \(4300 digits\)"),
        "trailing-garbage": (base + "garbage", r"invalid JSON in config\.json: Extra data"),
        "bom": ("\ufeff" + base, r"invalid JSON in config\.json"),
    }
    cases = [Case(f"config-{label}", lambda r, t=text: ["check", str(with_config(r, text=t))], 2, pattern)
             for label, (text, pattern) in texts.items()]

    def non_utf8(r: Path) -> list[str]:
        d = draft(r)
        (d / "config.json").write_bytes(b'{"hidden_size": "\xff\xfe"}')
        return ["check", str(d)]

    cases.append(Case("config-not-utf8", non_utf8, 2, r"cannot read config\.json: 'utf-8' codec"))
    cases.append(Case("target-invalid-json", lambda r: ["check", str(draft(r)), "--target", str(
        target_with(r, text="{"))], 2, r"target/config\.json: invalid JSON in config\.json"))
    cases.append(Case("target-5000-digit-int", lambda r: ["check", str(draft(r)), "--target", str(
        target_with(r, text='{"vocab_size": ' + "1" * 5000 + "}"))], 2, r"unusable number in config\.json"))
    return cases


def _file_kind_cases() -> list[Case]:
    def fifo_config(r: Path) -> list[str]:
        d = draft(r)
        fifo(d / "config.json")
        return ["check", str(d)]

    def fifo_target(r: Path) -> list[str]:
        t = r / "target"
        t.mkdir()
        fifo(t / "config.json")
        return ["check", str(draft(r)), "--target", str(t)]

    def linked_config(to: str):
        def make(r: Path) -> list[str]:
            d = draft(r)
            link(d / "config.json", to)
            return ["check", str(d)]
        return make

    def linked_target(to: str):
        def make(r: Path) -> list[str]:
            t = r / "target"
            t.mkdir()
            link(t / "config.json", to)
            return ["check", str(draft(r)), "--target", str(t)]
        return make

    def config_dir(r: Path) -> list[str]:
        d = draft(r)
        (d / "config.json").unlink()
        (d / "config.json").mkdir()
        return ["check", str(d)]

    def huge_config(r: Path) -> list[str]:
        d = draft(r)
        sparse_file(d / "config.json", 65 * 1024 * 1024)
        return ["check", str(d)]

    def loop(r: Path) -> list[str]:
        d = draft(r)
        (d / "config.json").unlink()
        (d / "config.json").symlink_to(d / "config.json")
        return ["check", str(d)]

    def weights(kind: str):
        def make(r: Path) -> list[str]:
            d = draft(r)
            (d / "model.safetensors").unlink()
            if kind == "fifo":
                fifo(d / "model.safetensors")
            elif kind == "dev-zero":
                link(d / "model.safetensors", "/dev/zero")
            elif kind == "dir":
                (d / "model.safetensors").mkdir()
            elif kind == "dangling":
                link(d / "model.safetensors", str(r / "nowhere"))
            return ["check", str(d)]
        return make

    def index_with(weight_map, extra: dict | None = None, index_fifo: bool = False):
        def make(r: Path) -> list[str]:
            d = draft(r)
            if index_fifo:
                fifo(d / "model.safetensors.index.json")
            else:
                (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map, **(extra or {})}))
            return ["check", str(d)]
        return make

    def missing_config(r: Path) -> list[str]:
        d = draft(r)
        (d / "config.json").unlink()
        return ["check", str(d)]

    def a_file(r: Path) -> list[str]:
        return ["check", str(SPECFORGE / "model.safetensors")]

    return [
        Case("missing-directory", lambda r: ["check", str(r / "nowhere")], 2, r"nowhere: no such directory"),
        Case("a-file-not-a-directory", a_file, 2, r"not a directory \(give the checkpoint directory"),
        Case("config-missing", missing_config, 2, r"config\.json: no config\.json"),
        Case("config-fifo", fifo_config, 2, r"config\.json is a FIFO, not a regular file"),
        Case("config-dev-zero", linked_config("/dev/zero"), 2, r"config\.json is a character device"),
        Case("config-dev-urandom", linked_config("/dev/urandom"), 2, r"config\.json is a character device"),
        Case("config-is-a-directory", config_dir, 2, r"config\.json is a directory, not a regular file"),
        Case("config-65-MB", huge_config, 2, r"config\.json is 68157440 bytes, over this suite's limit of 67108864"),
        Case("config-symlink-loop", loop, 2, r"cannot read config\.json: Too many levels of symbolic links"),
        Case("config-dangling-link", linked_config("/nonexistent/config.json"), 2, r"no config\.json"),
        Case("target-config-fifo", fifo_target, 2, r"target/config\.json: config\.json is a FIFO"),
        Case("target-config-dev-zero", linked_target("/dev/zero"), 2, r"target/config\.json: config\.json is a character"),
        Case("target-missing", lambda r: ["check", str(draft(r)), "--target", str(r / "no-target")], 2,
             r"no-target: no such directory"),
        Case("weights-fifo", weights("fifo"), 2, r"no weights \(\*\.safetensors"),
        Case("weights-dev-zero", weights("dev-zero"), 2, r"no weights"),
        Case("weights-a-directory", weights("dir"), 2, r"no weights"),
        Case("weights-dangling-link", weights("dangling"), 2, r"no weights"),
        Case("index-fifo", index_with({}, index_fifo=True), 2, r"index\.json is a FIFO"),
        Case("index-shard-missing", index_with({"fc.weight": "model-00002.safetensors"}), 2,
             r"shard model-00002\.safetensors is missing"),
        Case("index-shard-outside", index_with({"fc.weight": "../../etc/passwd"}), 2, r"invalid shard file name"),
        Case("index-shard-absolute", index_with({"fc.weight": "/etc/passwd"}), 2, r"invalid shard file name"),
        Case("index-shard-dot", index_with({"fc.weight": ".."}), 2, r"invalid shard file name"),
        Case("index-shard-not-a-string", index_with({"fc.weight": 7}), 2, r"invalid shard file name 7"),
        Case("index-no-weight-map", index_with(None), 2, r"no weight_map"),
        Case("index-empty-weight-map", index_with({}), 2, r"no weight_map"),
    ]


def _safetensors_cases() -> list[Case]:
    def entry(name: str, **change):
        def mutate(h: dict, d: bytes):
            h[name] = {**h[name], **change}
            return h, d
        return mutate

    def raw(fn):
        return lambda r: ["check", str(with_weights(r, fn())), "--only", "key-naming"]

    header, data = _header_and_data()
    names = sorted(k for k in header if k != "__metadata__")
    first = min(names, key=lambda n: header[n]["data_offsets"][0])
    big = max(names, key=lambda n: header[n]["data_offsets"][1] - header[n]["data_offsets"][0])

    def dup_name(h: dict, d: bytes):
        text = json.dumps(h)
        return text[:-1] + f', "{first}": ' + json.dumps(h[first]) + "}", d

    def control_name(h: dict, d: bytes):
        h["\x1b[31mred\x1b[0m\x07"] = h.pop(first)
        return h, d

    def long_name(h: dict, d: bytes):
        h["x" * 1_000_000] = h.pop(first)
        return h, d

    def huge_int(h: dict, d: bytes):
        text = json.dumps(h)
        return text.replace(json.dumps(h[first]["data_offsets"]), "[0, " + "9" * 5000 + "]", 1), d

    def zero_size_huge(h: dict, d: bytes):
        h["extra"] = {"dtype": "F32", "shape": [0, 2 ** 63], "data_offsets": [len(d), len(d)]}
        return h, d

    def d2t_past_any_vocabulary(r: Path) -> list[str]:
        """A 1 GiB d2t (sparse on disk) beside the draft's real tensors: read whole by each engine's loader before."""
        h, d = _header_and_data()
        old = h.pop("d2t")
        begin, end = old["data_offsets"]
        d = d[:begin] + d[end:]
        for entry_ in h.values():
            if "data_offsets" in entry_ and entry_["data_offsets"][0] >= end:
                entry_["data_offsets"] = [o - (end - begin) for o in entry_["data_offsets"]]
        h["d2t"] = {"dtype": "I64", "shape": [1 << 27], "data_offsets": [len(d), len(d) + (8 << 27)]}
        ckpt = with_weights(r, safetensors_bytes(h, d))
        with (ckpt / "model.safetensors").open("r+b") as f:
            f.truncate(f.seek(0, 2) + (8 << 27))
        return ["check", str(ckpt), "--target", str(TARGET)]

    def e8m0(h: dict, d: bytes):
        h["scale_inv"] = {"dtype": "F8_E8M0", "shape": [4], "data_offsets": [len(d), len(d) + 4]}
        return h, d + b"\x7f" * 4

    return [
        Case("st-empty-file", raw(lambda: b""), 2, r"truncated safetensors file \(0 bytes, no header length\)"),
        Case("st-4-bytes", raw(lambda: b"\0\0\0\0"), 2, r"truncated safetensors file \(4 bytes"),
        Case("st-header-length-2^64-1", raw(lambda: safetensors_bytes(header, data, 2 ** 64 - 1)), 2,
             r"header claims 18446744073709551615 bytes"),
        Case("st-header-length-past-end", raw(lambda: safetensors_bytes(header, b"", 10 ** 6)), 2,
             r"header claims 1000000 bytes"),
        Case("st-header-not-json", raw(lambda: safetensors_bytes(b"{not json", data)), 2, r"not JSON"),
        Case("st-header-not-utf8", raw(lambda: safetensors_bytes(b'{"\xff": 1}', data)), 2, r"not JSON"),
        Case("st-header-a-list", raw(lambda: safetensors_bytes("[1, 2]", data)), 2, r"not a JSON object"),
        Case("st-header-deep", raw(lambda: safetensors_bytes("[" * 100000 + "]" * 100000, data)), 2, r"not JSON"),
        Case("st-header-5000-digit-int", header_case(huge_int), 2, r"malformed safetensors header: Exceeds the limit"),
        Case("st-unknown-dtype", header_case(entry(first, dtype="X9")), 2, r"has unknown dtype 'X9'"),
        Case("st-dtype-not-a-string", header_case(entry(first, dtype=7)), 2, r"has unknown dtype 7"),
        Case("st-negative-dimension", header_case(entry(first, shape=[-1, 64])), 2, r"malformed shape \[-1, 64\]"),
        Case("st-float-dimension", header_case(entry(first, shape=[1.5])), 2, r"malformed shape \[1\.5\]"),
        Case("st-shape-not-a-list", header_case(entry(first, shape="64")), 2, r"malformed shape '64'"),
        Case("st-zero-size-2^63", header_case(zero_size_huge), 2, r"dimension over this suite's limit of 4294967296"),
        Case("st-d2t-1gib-sparse", d2t_past_any_vocabulary, 2,
             r"tensor 'd2t' has shape \[134217728\]: a vocabulary map holds one entry per token, and this suite's "
             r"bound on a vocabulary is 8388608"),
        Case("st-offsets-reversed", header_case(entry(first, data_offsets=[10, 0])), 2, r"truncated safetensors"),
        Case("st-offsets-one", header_case(entry(first, data_offsets=[0])), 2, r"malformed data_offsets \[0\]"),
        Case("st-offsets-past-end", header_case(entry(big, data_offsets=[0, len(data) + 4096])), 2,
             r"truncated safetensors file"),
        Case("st-shape-mismatch", header_case(entry(big, shape=[1])), 2, r"spans \d+ bytes but shape \[1\]"),
        Case("st-truncated-data", raw(lambda: safetensors_bytes(header, data[: len(data) // 2])), 2,
             r"truncated safetensors file"),
        Case("st-trailing-bytes", raw(lambda: safetensors_bytes(header, data + b"\0" * 16)), 2,
             r"16 bytes after the last tensor"),
        Case("st-entry-not-an-object", header_case(lambda h, d: ({**h, first: 7}, d)), 2,
             r"malformed safetensors entry"),
        Case("st-control-characters-in-name", header_case(control_name), (0, 1), "", slow=True,
             note="a verdict whose output shows the name escaped"),
        Case("st-megabyte-name", header_case(long_name), (0, 1), "", slow=True),
        Case("st-duplicate-name", header_case(dup_name), (0, 1), r"more than once \(the engines read its last entry", slow=True,
             note="read as the engines read it (the last entry), and said"),
        Case("st-f8-e8m0-tensor", header_case(e8m0), (0, 1), "", slow=True, note="a valid dtype, read as such"),
    ]


def _pickle_cases() -> list[Case]:
    def raw_pickle(fn=None, *args, name="pytorch_model.bin"):
        def make(r: Path) -> list[str]:
            return ["check", str(pickle_dir(r, {name: pickle.dumps(payload(r, fn, *args))}))]
        return make

    def zipped(fn=None, *args, name="pytorch_model.bin"):
        def make(r: Path) -> list[str]:
            return ["check", str(pickle_dir(r, {name: torch_zip(payload(r, fn, *args))}))]
        return make

    def legacy(r: Path) -> list[str]:
        import io

        import torch

        buf = io.BytesIO()
        torch.save(payload(r), buf, _use_new_zipfile_serialization=False)
        return ["check", str(pickle_dir(r, {"pytorch_model.bin": buf.getvalue()}))]

    def sharded(r: Path) -> list[str]:
        d = pickle_dir(r, {"pytorch_model-00001-of-00001.bin": torch_zip(payload(r))})
        (d / "pytorch_model.bin.index.json").write_text(json.dumps(
            {"weight_map": {"fc.weight": "pytorch_model-00001-of-00001.bin"}}))
        return ["check", str(d)]

    def beside_safetensors(name: str):
        def make(r: Path) -> list[str]:
            d = draft(r)
            (d / name).write_bytes(torch_zip(payload(r)))
            return ["check", str(d), "--only", "key-naming"]
        return make

    def bomb(r: Path) -> list[str]:
        return ["check", str(pickle_dir(r, {"pytorch_model.bin": zip_bomb(2 << 30)}))]

    def plain(obj, name="pytorch_model.bin"):
        def make(r: Path) -> list[str]:
            return ["check", str(pickle_dir(r, {name: torch_zip(obj)}))]
        return make

    def garbage(data: bytes):
        return lambda r: ["check", str(pickle_dir(r, {"pytorch_model.bin": data}))]

    def truncated_zip(r: Path) -> list[str]:
        import torch

        whole = torch_zip({"fc.weight": torch.zeros(64, 192)})
        return ["check", str(pickle_dir(r, {"pytorch_model.bin": whole[: len(whole) // 2]}))]

    refused = r"refused by torch's restricted unpickler \(weights_only=True\), nothing in it was run"
    return [
        Case("pickle-raw-open", raw_pickle(), 2, refused + r".*(builtins|io)\.open"),
        Case("pickle-raw-os-system", raw_pickle(os.system, "touch payload-ran"), 2, refused + r".*(posix|os)\.system"),
        Case("pickle-raw-eval", raw_pickle(eval, "1"), 2, refused + r".*builtins\.eval"),
        Case("pickle-raw-exec", raw_pickle(exec, "open('payload-ran','w')"), 2, refused + r".*builtins\.exec"),
        Case("pickle-zip-open", zipped(), 2, refused + r".*(builtins|io)\.open"),
        Case("pickle-zip-os-system", zipped(os.system, "touch payload-ran"), 2, refused + r".*(posix|os)\.system"),
        Case("pickle-zip-subprocess", zipped(subprocess.call, ["touch", MARKER]), 2, refused + r".*GLOBAL \S+\.call"),
        Case("pickle-legacy-format", legacy, 2, refused + r".*(builtins|io)\.open"),
        Case("pickle-sharded-bin", sharded, 2, refused),
        Case("pickle-pt-file", zipped(name="draft.pt"), 2, refused),
        Case("pickle-zip-bomb-2GiB", bomb, 2, r"zip members inflate to \d+ bytes from a \d+-byte file .*refusing"),
        Case("pickle-not-a-mapping", plain([1, 2, 3]), 2, r"must hold a \{name: tensor\} mapping, got list"),
        Case("pickle-empty-mapping", plain({}), 2, r"must hold a \{name: tensor\} mapping, got dict"),
        Case("pickle-non-tensor-value", plain({"fc.weight": 3}), 2, r"entry 'fc\.weight' is a int, not a tensor"),
        Case("pickle-garbage", garbage(b"\x80\x05garbage"), 2, r"not a readable torch weight file|refused by torch"),
        Case("pickle-empty-file", garbage(b""), 2, r"not a readable torch weight file"),
        Case("pickle-truncated-zip", truncated_zip, 2, r"not a readable torch"),
        Case("pickle-training-args-only", lambda r: ["check", str(pickle_dir(
            r, {"training_args.bin": torch_zip(payload(r))}))], 2, r"no weights"),
        Case("pickle-optimizer-only", lambda r: ["check", str(pickle_dir(
            r, {"optimizer.pt": torch_zip(payload(r))}))], 2, r"no weights"),
        Case("pickle-training-args-beside-safetensors", beside_safetensors("training_args.bin"), 0, "", slow=True),
        Case("pickle-pt-beside-safetensors", beside_safetensors("state.pt"), 0, "", slow=True),
    ]


def _output_cases() -> list[Case]:
    def output(where: str):
        def make(r: Path) -> list[str]:
            d = draft(r)
            out = {"directory": r, "missing-directory": r / "no" / "such" / "report.json",
                   "inside-checkpoint": d / "report.json", "dev-full": Path("/dev/full"),
                   "fifo": r / "report-fifo"}[where]
            if where == "fifo":
                fifo(out)
            return ["check", str(d), "--output", str(out)]
        return make

    return [
        Case("output-a-directory", output("directory"), 2, r"--output .*: is a directory; give a file name"),
        Case("output-missing-directory", output("missing-directory"), 2, r"directory .*/no/such does not exist"),
        Case("output-inside-checkpoint", output("inside-checkpoint"), 2, r"refusing to write inside the checkpoint"),
        Case("output-dev-full", output("dev-full"), 2, r"--output /dev/full: exists and is not a regular file"),
        Case("output-fifo", output("fifo"), 2, r"exists and is not a regular file"),
    ]


def _target_cases() -> list[Case]:
    def as_target(source: Path):
        def make(r: Path) -> list[str]:
            return ["check", str(draft(r)), "--target", str(draft(r, "other", source))]
        return make

    def itself(r: Path) -> list[str]:
        d = draft(r)
        return ["check", str(d), "--target", str(d)]

    return [
        Case("target-is-the-draft-itself", itself, 2, r"this is an EAGLE-3 draft \(architectures \['LlamaForCausalLMEagle3'\]\)"),
        Case("target-is-a-speculators-draft", as_target(DRAFTS["speculators-default"]), 2,
             r"this is an EAGLE-3 draft .*not the target model it drafts for"),
        Case("target-is-a-modelopt-draft", as_target(FIXTURES / "drafts" / "modelopt-default-hd32"), 2, r"this is an EAGLE-3 draft"),
        Case("draft-is-a-target", lambda r: ["check", str(draft(r, "ckpt", FIXTURES / "targets" / "llama-tiny")),
                                             "--only", "key-naming"], 1,
             "no EAGLE-3 draft class", slow=True, note="the engine's own dispatch names it"),
    ]


def _convert_cases() -> list[Case]:
    def convert(dst_of, *, target_of=None, extra=None):
        def make(r: Path) -> list[str]:
            src = draft(r, "src", DRAFTS["speculators-default"])
            if extra:
                extra(src, r)
            target = target_of(r) if target_of else draft(r, "target", TARGET)
            return ["convert", str(src), str(dst_of(r, src, target)), "--to", "sglang", "--target", str(target)]
        return make

    def nonempty(r: Path, src: Path, target: Path) -> Path:
        (r / "dst").mkdir()
        (r / "dst" / "keep.txt").write_text("mine")
        return r / "dst"

    def a_file(r: Path, src: Path, target: Path) -> Path:
        (r / "dst").write_text("mine")
        return r / "dst"

    def passwd_link(src: Path, r: Path) -> None:
        (src / "notes.txt").symlink_to("/etc/passwd")
        os.mkfifo(src / "pipe")

    return [
        Case("convert-dst-inside-src", convert(lambda r, s, t: s / "out"), 2, r"must be outside the source checkpoint"),
        Case("convert-dst-inside-target", convert(lambda r, s, t: t / "out"), 2,
             r"must be outside the target model directory"),
        Case("convert-dst-is-target", convert(lambda r, s, t: t), 2, r"must be outside the target model directory"),
        Case("convert-dst-not-empty", convert(nonempty), 2, r"destination exists and is not an empty directory"),
        Case("convert-dst-a-file", convert(a_file), 2, r"destination exists and is not an empty directory"),
        Case("convert-dst-under-a-file", convert(lambda r, s, t: (a_file(r, s, t) / "sub")), 2,
             r"cannot be created: .*/dst is not a directory this user may write"),
        Case("convert-dst-under-dev-null", convert(lambda r, s, t: Path("/dev/null/dst")), 2,
             r"cannot be created: /dev/null is not a directory"),
        Case("convert-target-is-a-draft", convert(lambda r, s, t: r / "dst", target_of=lambda r: draft(
            r, "target", SPECFORGE)), 2, r"this is an EAGLE-3 draft"),
        Case("convert-target-fifo-config", convert(lambda r, s, t: r / "dst", target_of=lambda r: _fifo_target(r)),
             2, r"config\.json is a FIFO"),
        Case("convert-link-to-etc-passwd", convert(lambda r, s, t: r / "dst", extra=passwd_link), (0, 1),
             r"not copied: notes\.txt \(a link to /etc/passwd, outside the checkpoint\), pipe \(not a regular file\)",
             writes=("dst",), slow=True),
    ]


def _fifo_target(r: Path) -> Path:
    t = r / "target"
    t.mkdir()
    fifo(t / "config.json")
    return t


def _usage_cases() -> list[Case]:
    return [
        Case("usage-unknown-contract", lambda r: ["check", str(draft(r)), "--only", "no-such"], 2, r"no-such"),
        Case("usage-bad-engine-spec", lambda r: ["check", str(draft(r)), "--engine", "vllm>=0.1"], 2, r"vllm>=0\.1"),
        Case("usage-engine-path", lambda r: ["check", str(draft(r)), "--engine", "../../etc"], 2, r"\.\./\.\./etc"),
        Case("usage-engine-newline", lambda r: ["check", str(draft(r)), "--engine", "sglang\n==1"], 2,
             r"unsupported engine 'sglang\\n'"),
        Case("usage-matrix-no-engines", lambda r: ["matrix", str(draft(r)), "--engines", ","], 2,
             r"give at least one engine"),
        Case("usage-accept-zero-tokens", lambda r: ["accept", str(draft(r)), "--target", str(TARGET), "--tokens",
                                                    "0"], 2, r"--tokens, --prompts and --max-tokens must be at least 1"),
        Case("usage-no-command", lambda r: [], 2, r"eagle3-contracts"),
        Case("usage-control-characters-in-path", lambda r: ["check", str(r / "x\x1b[2Jy")], 2,
             r"x\\x1b\[2Jy: no such directory"),
        Case("usage-very-long-path", lambda r: ["check", str(r / ("p" * 5000))], 2,
             r"File name too long|no such directory|more characters\)"),
    ]


def _plugin_cases() -> list[Case]:
    def plugin(make_ckpt):
        def make(r: Path) -> list[str]:
            return ["-m", "contracts", "--checkpoint", str(make_ckpt(r)), "-q", "--rootdir", str(r)]
        return make

    def fifo_dir(r: Path) -> Path:
        d = draft(r)
        fifo(d / "config.json")
        return d

    return [
        Case("plugin-config-fifo", plugin(fifo_dir), 4, r"config\.json is a FIFO", command="pytest"),
        Case("plugin-hidden_size-0", plugin(lambda r: with_config(r, {"hidden_size": 0})), 4, r"hidden_size is 0",
             command="pytest"),
        Case("plugin-missing-directory", plugin(lambda r: r / "nowhere"), 4, r"no such directory", command="pytest"),
        Case("plugin-zip-bomb", plugin(lambda r: pickle_dir(r, {"pytorch_model.bin": zip_bomb(2 << 30)})), 4,
             r"zip members inflate", command="pytest"),
    ]


def battery() -> list[Case]:
    cases = (_file_kind_cases() + _json_cases() + _config_value_cases() + _safetensors_cases() + _pickle_cases()
             + _output_cases() + _target_cases() + _convert_cases() + _usage_cases() + _plugin_cases())
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return cases
