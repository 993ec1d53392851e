"""A read-only view of a draft (or target) checkpoint directory: its config and the names, shapes and
dtypes of its tensors, read from safetensors headers without loading the weights.

Every way a directory can be unusable ends in ``InputError`` with one line a user can act on (the CLI
prints it and exits 2). Nothing here writes anywhere. Pickle weights (``pytorch_model.bin`` as the EAGLE-3
authors publish them, sharded through ``pytorch_model.bin.index.json``, or ``*.pt``) are read only as SGLang
and vLLM read them, through torch's restricted unpickler (``weights_only=True``: tensors and plain containers,
never an arbitrary callable), memory-mapped where the file format allows; a pickle that needs anything else is
refused before any of it runs. ``config.json`` is read as the engines read it (Python's ``json``: the last of
duplicated keys wins), and the keys it shadowed are kept for the ``config`` contract to report.
"""

from __future__ import annotations

import json
import math
import os
import struct
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from contracts.input_bounds import (MAX_DIMENSION, MAX_HEADER_BYTES, BoundError, check_sizes, check_vocabulary_map,
                                    check_zip_sizes, escape, open_regular, read_bounded, short_repr)

# Pickle weight files the engines read when a directory has no safetensors (SGLang's and vLLM's default loaders:
# ``*.bin``, else ``*.pt``), less the training leftovers their loaders skip (``filter_files_not_needed_for_inference``).
TORCH_WEIGHT_SUFFIXES = (".bin", ".pt")
NOT_WEIGHTS = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
# safetensors dtype tags -> torch dtype names
SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
    "U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool", "F8_E8M0": "float8_e8m0fnu",
}
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E8M0": 1}


def text_config(cfg: dict) -> dict:
    """The language-model part of a config (multimodal targets nest it, e.g. Kimi-K2.5's ``text_config``)."""
    for key in ("text_config", "language_config", "llm_config"):
        if isinstance(cfg.get(key), dict):
            return cfg[key]
    return cfg


def trained_window(config: dict) -> dict | None:
    """The sliding window a draft's config says it was trained with (speculators' ``train`` writes ``layer_types``
    and ``sliding_window``, speculators#684), flat or under ``transformer_layer_config``; None without one."""
    layer = config.get("transformer_layer_config")
    layer = layer if isinstance(layer, dict) else config
    window = layer.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    types = layer.get("layer_types")
    sliding = [i for i, t in enumerate(types or []) if t == "sliding_attention"]
    if types is not None and not sliding:
        return None
    if types is None and not layer.get("use_sliding_window"):
        return None
    return {"sliding_window": window, "sliding_layers": sliding if types is not None else "all"}


def rope_of(cfg: dict) -> tuple[float | None, dict | None]:
    """(theta, scaling) as a config describes them (transformers 5 ``rope_parameters`` or the older keys)."""
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else None
    theta = cfg.get("rope_theta") or (params or {}).get("rope_theta")
    scaling = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else None
    if scaling is None and params and params.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    return theta, scaling


# The record every `convert` copy carries in its config.json (written by contracts.convert_command, read by the subject)
CONVERSION_RECORD_KEY = "eagle3_contracts_conversion"


class InputError(Exception):
    """The input cannot be judged at all (missing, malformed, unsafe). Rendered as one line, exit 2."""


# Beside a draft read from the Hub by ranges (contracts.hub): the tensors whose bytes were not fetched, by file
NOT_FETCHED = "eagle3-contracts-not-fetched.json"
_NOT_FETCHED: dict[Path, dict] = {}


# set beside HF_HUB_OFFLINE=1 by an engine's in-process context when it, not the user, turned the Hub off (the engine
# loads local files only): contracts.hub still reads a user's hf: inputs in that process, a pytest session or doctor
ENGINE_SET_OFFLINE = "EAGLE3_CONTRACTS_ENGINE_SET_HF_HUB_OFFLINE"


def offline_for_engine() -> None:
    """``HF_HUB_OFFLINE=1`` for an engine judged in this process (it never waits on a model hub), marked as the engine's
    own unless the user set it."""
    if "HF_HUB_OFFLINE" not in os.environ:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ[ENGINE_SET_OFFLINE] = "1"


class WeightsNotFetched(BaseException):
    """A check asked for the values of a tensor a Hub draft's local copy holds only the header of (its bytes are a
    hole of the sparse file, read back as zeros). Whatever needed it is not judged and says ``--download``.

    A ``BaseException``, as ``KeyboardInterrupt`` is: the engines' adapters read an exception raised inside the
    engine's loader as the engine's refusal of the draft (``except Exception``), and zeros read as weights would be
    verdicts about tensors nobody read. Caught by the judging loop and the engine worker's dispatch only."""


def not_fetched(directory: Path) -> dict:
    """``{file name: [tensor names]}`` of DIRECTORY's tensors not fetched from the Hub ({} for a local checkpoint)."""
    directory = Path(directory)
    if directory not in _NOT_FETCHED:
        record = directory / NOT_FETCHED
        try:
            data = json.loads(record.read_text()) if record.is_file() else {}
        except (OSError, ValueError):
            data = {}
        _NOT_FETCHED[directory] = data
    return _NOT_FETCHED[directory].get("not_fetched") or {}


def key_ending(tensors, suffix: str) -> str | None:
    """The shortest of TENSORS' names ending with SUFFIX (the language model's ``embed_tokens.weight``, not a vision
    tower's), or None."""
    keys = sorted((k for k in tensors if k.endswith(suffix)), key=len)
    return keys[0] if keys else None


def require_fetched(path: Path, name: str) -> None:
    """Raise ``WeightsNotFetched`` when tensor NAME of weight file PATH was left unread by a ranged Hub read."""
    path = Path(path)
    if name in not_fetched(path.parent).get(path.name, ()):
        record = _NOT_FETCHED[path.parent]
        raise WeightsNotFetched(f"{name}: not fetched from hf:{record.get('repo')}@{str(record.get('commit'))[:10]} "
                                "(its config, headers and small tensors were read by ranges): rerun with --download")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str  # torch dtype name, e.g. "bfloat16"
    file: str  # file name inside the checkpoint directory

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes the tensor holds (its dtype's width times its elements)."""
        tag = next((t for t, name in SAFETENSORS_DTYPES.items() if name == self.dtype), None)
        return self.numel * DTYPE_BYTES.get(tag, 4) if tag else self.numel * 4


def read_json(path: Path, what: str, shadowed: list | None = None) -> dict:
    """A JSON object as Python's ``json`` (and so transformers and the engines) reads it: a key given twice keeps
    its last value. Each shadowed value is appended to ``shadowed`` as ``(key, shadowed value, value kept)``."""
    try:
        text = read_bounded(path, what).decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no {what}") from None
    except BoundError as e:
        raise InputError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read {what}: {e}") from None

    def last_wins(pairs):
        seen = {}
        for k, v in pairs:
            if k in seen and shadowed is not None:
                shadowed.append((k, seen[k], v))
            seen[k] = v
        return seen

    try:
        data = json.loads(text, object_pairs_hook=last_wins)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: invalid JSON in {what}: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise InputError(f"{path}: invalid JSON in {what}: nested too deeply") from None
    except ValueError as e:  # an integer longer than Python's int-parsing limit (4300 digits)
        raise InputError(f"{path}: unusable number in {what}: {str(e).split(';')[0]}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: {what} must be a JSON object, got {type(data).__name__}")
    return data


_TORCH_FILES: dict[Path, dict] = {}  # pickle weight file -> its tensors (memory-mapped where the format allows)


def read_torch_weights(path: Path) -> dict:
    """The tensors of one pickle weight file, through torch's restricted unpickler only (``weights_only=True``,
    as SGLang's and vLLM's ``pt_weights_iterator``), memory-mapped when the file is in torch's zip format (memory
    stays bounded: a tensor's bytes are read when it is sliced). Anything but a flat ``{name: tensor}`` mapping,
    or a pickle that needs more than tensors and plain containers, is an ``InputError``; nothing of it runs."""
    path = Path(path)
    if path in _TORCH_FILES:
        return _TORCH_FILES[path]
    import pickle
    import zipfile

    import torch

    try:
        open_regular(path, "torch weight file").close()
        is_zip = zipfile.is_zipfile(path)
        if is_zip:
            check_zip_sizes(path)
    except BoundError as e:
        raise InputError(str(e)) from None
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": stderr stays the CLI's one line
            warnings.simplefilter("ignore")
            data = torch.load(str(path), map_location="cpu", weights_only=True, mmap=is_zip)
    except pickle.UnpicklingError as e:
        # torch's message names what the pickle asked for ("Unsupported global: GLOBAL builtins.open ...")
        # (its advice to retry with weights_only=False or to allow the global is never what a user should do)
        tail = str(e).partition("WeightsUnpickler error:")[2]
        reason = next((ln.strip() for ln in tail.splitlines() if ln.strip()), "not a plain tensor pickle")
        reason = reason.split(". Please use")[0]
        if "GLOBAL" not in reason:  # refused on an opcode before it reached a global: name what it asks for
            asked = pickle_globals(path)
            if asked:
                reason += f"; it asks for {', '.join(asked[:5])}"
        raise InputError(f"{path}: refused by torch's restricted unpickler (weights_only=True), nothing in it was "
                         f"run: {escape(reason[:300])}") from None
    except Exception as e:  # truncated zip, bad magic number, not a torch file at all
        raise InputError(f"{path}: not a readable torch weight file: {type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}") from None
    if not isinstance(data, dict) or not data:
        raise InputError(f"{path}: a torch weight file must hold a {{name: tensor}} mapping, got "
                         f"{type(data).__name__}")
    for name, value in data.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise InputError(f"{path}: entry {name!r} is a {type(value).__name__}, not a tensor")
    _TORCH_FILES[path] = data
    return data


TORCH_PICKLE_GLOBALS = ("torch.", "collections.OrderedDict", "builtins.set", "_codecs.encode")
PICKLE_SCAN_BYTES = 64 * 1024 * 1024


def pickle_globals(path: Path) -> list[str]:
    """The globals a pickle weight file names beyond torch's own tensor rebuilding, read by disassembling it
    (``pickletools``: nothing is run, at most ``PICKLE_SCAN_BYTES``), for the refusal to name what was blocked."""
    import io
    import pickletools
    import zipfile

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                name = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
                data = z.read(name) if name and z.getinfo(name).file_size <= PICKLE_SCAN_BYTES else b""
        else:
            with open_regular(path, "torch weight file") as f:
                data = f.read(PICKLE_SCAN_BYTES)
    except (OSError, BoundError, zipfile.BadZipFile, KeyError):
        return []
    found: list[str] = []
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
                strings = (strings + [str(arg)])[-2:]
            elif op.name == "GLOBAL":
                found.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(strings) == 2:
                found.append(".".join(strings))
            if op.name == "STOP":
                break
    except Exception:  # a malformed pickle: whatever was named before the fault
        pass
    asked = [g for g in dict.fromkeys(found) if not g.startswith(TORCH_PICKLE_GLOBALS)]
    return [escape(g[:100]) for g in asked]


def tensor_rows(path: Path, name: str):
    """A lazily sliced view of tensor NAME in one weight file: ``view[a:b]`` reads only those rows, and
    ``shape`` is its shape (safetensors: read from the file, not mapped; a memory-mapped torch tensor)."""
    require_fetched(Path(path), name)
    if Path(path).suffix == ".safetensors":
        with Path(path).open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            entry = json.loads(f.read(n))[name]
        return _FileRows(Path(path), 8 + n + entry["data_offsets"][0], entry["dtype"], tuple(entry["shape"]))
    tensor = read_torch_weights(Path(path))[name]
    return _Rows(tensor, tuple(tensor.shape))


@dataclass
class _FileRows:
    """Rows of one safetensors tensor read with plain reads: a memory map would leave every page a slice touched
    counted in the process's resident memory (a column block of a 1 GB embedding touches all of it)."""

    path: Path
    start: int  # the tensor's first byte in the file
    dtype: str  # the safetensors tag
    shape: tuple

    def __getitem__(self, index):
        if isinstance(index, tuple):  # rows first, then the other dimensions of what was read
            return self[index[0]][(slice(None),) + tuple(index[1:])] if index else self[:]
        if not self.shape:
            return self._read(0, 1).reshape(())
        if isinstance(index, int):
            i = index + self.shape[0] if index < 0 else index
            if not 0 <= i < self.shape[0]:
                raise IndexError(f"row {index} of {self.shape[0]}")
            return self._read(i, i + 1)[0]
        a, b, step = index.indices(self.shape[0])
        if step < 1:
            raise IndexError("rows are read forwards")
        out = self._read(a, max(a, b))
        return out[::step] if step > 1 else out

    def raw(self, a: int, b: int) -> bytearray:
        """Rows A..B as the file stores them (little-endian values of the safetensors dtype ``dtype``)."""
        row = math.prod(self.shape[1:]) if self.shape else 1
        data = bytearray((b - a) * row * DTYPE_BYTES[self.dtype])
        with self.path.open("rb", buffering=0) as f:
            f.seek(self.start + a * row * DTYPE_BYTES[self.dtype])
            f.readinto(data)
        return data

    def _read(self, a: int, b: int):
        import torch

        dtype = getattr(torch, SAFETENSORS_DTYPES[self.dtype])
        data = self.raw(a, b)
        values = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
        return values.reshape(b - a, *self.shape[1:]) if self.shape else values


@dataclass
class _Rows:
    view: object
    shape: tuple

    def __getitem__(self, index):
        return self.view[index]


def header_length(head: bytes, size: int, where: str) -> int:
    """The header length a safetensors file of SIZE bytes starts with (HEAD: its first 8 bytes), within bounds."""
    if len(head) < 8:
        raise InputError(f"{where}: truncated safetensors file ({size} bytes, no header length)")
    (n,) = struct.unpack("<Q", head)
    if n > MAX_HEADER_BYTES or 8 + n > size:
        raise InputError(f"{where}: truncated or malformed safetensors file (header claims {n} bytes, file has {size})")
    return n


def read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    """Parse and validate one safetensors header (names, dtypes, shapes, offsets) without reading data.

    Validates what the format promises: a header length that fits the file, a JSON object, known dtypes,
    offsets that match shape x dtype size, lie inside the data section and do not overlap.
    """
    try:
        with open_regular(path, "safetensors file") as f:
            size = os.fstat(f.fileno()).st_size
            n = header_length(f.read(8), size, str(path))
            raw = f.read(n)
    except BoundError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    duplicated: list[str] = []

    def keep_last(pairs):  # safetensors' (serde's) reading: a name given twice keeps its last entry
        seen = {}
        for k, v in pairs:
            if k in seen:
                duplicated.append(k)
            seen[k] = v
        return seen

    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=keep_last)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise InputError(f"{path}: malformed safetensors header (not JSON)") from None
    except ValueError as e:  # an integer longer than Python's int-parsing limit
        raise InputError(f"{path}: malformed safetensors header: {str(e).split(';')[0]}") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: malformed safetensors header (not a JSON object)")
    data_len = size - 8 - n
    out: dict[str, TensorInfo] = {}
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise InputError(f"{path}: malformed safetensors entry for {escape(repr(name))}")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPES:
            raise InputError(f"{path}: tensor {escape(repr(name))} has unknown dtype {short_repr(dtype)}")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                     for d in shape)):
            raise InputError(f"{path}: tensor {escape(repr(name))} has malformed shape {short_repr(shape)}")
        if any(d > MAX_DIMENSION for d in shape):
            raise InputError(f"{path}: tensor {escape(repr(name))} has a dimension over this suite's limit of "
                             f"{MAX_DIMENSION} (shape {short_repr(shape)})")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise InputError(f"{path}: tensor {escape(repr(name))} has malformed data_offsets {short_repr(offsets)}")
        begin, end = offsets
        info = TensorInfo(name, tuple(shape), SAFETENSORS_DTYPES[dtype], path.name)
        if not 0 <= begin <= end <= data_len:
            raise InputError(f"{path}: truncated safetensors file (tensor {name!r} ends at byte {end} "
                             f"of a {data_len}-byte data section)")
        if end - begin != info.numel * DTYPE_BYTES[dtype]:
            raise InputError(f"{path}: tensor {name!r} spans {end - begin} bytes but shape {shape} "
                             f"of {dtype} needs {info.numel * DTYPE_BYTES[dtype]}")
        spans.append((begin, end, name))
        out[name] = info
    # safetensors' own rule: the tensors tile the data section exactly, in offset order, from byte 0
    spans.sort()
    position = 0
    for begin, end, name in spans:
        if begin != position:
            what = "overlaps the previous tensor" if begin < position else f"leaves a gap at byte {position}"
            raise InputError(f"{path}: malformed safetensors file (tensor {name!r} {what})")
        position = end
    if position != data_len:
        raise InputError(f"{path}: malformed safetensors file ({data_len - position} bytes after the last tensor)")
    if duplicated:
        DUPLICATE_TENSORS[path] = sorted(set(duplicated))
    return out


# dtypes numpy holds as they are (``Checkpoint.load_array`` reads these without torch)
NUMPY_DTYPES = ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16", "float32",
                "float64")

# safetensors file -> tensor names its header gives more than once (the engines read the last entry, as here)
DUPLICATE_TENSORS: dict[Path, list[str]] = {}


@dataclass
class Checkpoint:
    """A checkpoint directory, validated on open. ``config`` is the raw config.json."""

    path: Path
    config: dict
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    # config.json keys given more than once: (key, shadowed value, value kept), in file order
    config_duplicates: list[tuple] = field(default_factory=list)

    @classmethod
    def open(cls, path, *, require_weights: bool = True, role: str = "draft") -> "Checkpoint":
        """The checkpoint at PATH, every file it reads bounded and its config's sizes within bounds (``role``:
        ``draft`` or ``target``: a draft builds a few layers, a target many)."""
        path = Path(path)
        try:
            present = path.exists()
        except OSError as e:  # a name too long, a loop of links
            raise InputError(f"{path}: cannot read: {e.strerror}") from None
        if not present:
            raise InputError(f"{path}: no such directory")
        if not path.is_dir():
            raise InputError(f"{path}: not a directory (give the checkpoint directory, not a file)")
        duplicates: list = []
        config = read_json(path / "config.json", "config.json", duplicates)
        try:
            check_sizes(config, f"{path}/config.json", draft=role == "draft")
        except BoundError as e:
            raise InputError(str(e)) from None
        tensors = cls._read_tensors(path) if require_weights else cls._read_tensors_optional(path)
        return cls(path=path, config=config, tensors=tensors, config_duplicates=duplicates)

    @classmethod
    def open_target(cls, path, *, require_weights: bool = False) -> "Checkpoint":
        """A target model directory; an EAGLE-3 draft given in its place is refused, naming what makes it one
        (a draft judged as its own target passed every contract)."""
        target = cls.open(path, require_weights=require_weights, role="target")
        sign = target.draft_sign()
        if sign:
            raise InputError(f"{path}: this is an EAGLE-3 draft ({sign}), not the target model it drafts for; give "
                             f"the target's directory as --target")
        return target

    def draft_sign(self) -> str | None:
        """What marks this directory as an EAGLE-3 draft rather than a model (None: nothing does): a draft
        architecture, speculators' draft config, or the draft-only tensors (vocab mapping, fusion layer)."""
        arches = self.config.get("architectures")
        arches = arches if isinstance(arches, list) else []
        eagle = [a for a in arches if isinstance(a, str) and "eagle" in a.lower()]
        if eagle:
            return f"architectures {eagle}"
        if "speculators_config" in self.config or self.config.get("speculators_model_type"):
            return "a speculators draft config"
        marks = sorted(n for n in self.tensors if n.rsplit(".", 1)[-1] in ("d2t", "t2d") or n == "fc.weight"
                       or n.startswith("midlayer."))
        if marks:
            return f"tensors {', '.join(marks[:3])}"
        return None

    @staticmethod
    def _weight_files(path: Path) -> list[Path]:
        """The weight files an engine reads, in its order of preference: safetensors (through their index when
        there is one), else pickle ``*.bin`` (through ``pytorch_model.bin.index.json``), else ``*.pt``."""
        for index_name, suffix in (("model.safetensors.index.json", ".safetensors"),
                                   ("pytorch_model.bin.index.json", ".bin")):
            index = path / index_name
            if index.exists():
                return _indexed_files(index, index_name)
            files = sorted(p for p in path.glob(f"*{suffix}") if p.is_file() and p.name not in NOT_WEIGHTS)
            if files:
                return files
        return sorted(p for p in path.glob("*.pt") if p.is_file() and p.name not in NOT_WEIGHTS)

    @classmethod
    def _read_tensors(cls, path: Path) -> dict[str, TensorInfo]:
        files = cls._weight_files(path)
        if not files:
            raise InputError(f"{path}: no weights (*.safetensors, or pickle *.bin / *.pt)")
        tensors: dict[str, TensorInfo] = {}
        for f in files:
            for name, info in _file_tensors(f).items():
                try:
                    check_vocabulary_map(name, info.shape, str(f))
                except BoundError as e:
                    raise InputError(str(e)) from None
                if name in tensors:
                    raise InputError(f"{path}: tensor {name!r} appears in both {tensors[name].file} and {f.name}")
                tensors[name] = info
        return tensors

    @classmethod
    def _read_tensors_optional(cls, path: Path) -> dict[str, TensorInfo]:
        return cls._read_tensors(path) if cls._weight_files(path) else {}

    @property
    def duplicated_tensors(self) -> list[str]:
        """Tensor names a safetensors header of this checkpoint gives more than once (the last entry is read)."""
        files = {self.path / info.file for info in self.tensors.values()}
        return sorted({name for f in files for name in DUPLICATE_TENSORS.get(f, [])})

    @property
    def has_weights(self) -> bool:
        return bool(self.tensors)

    @property
    def not_fetched(self) -> list[str]:
        """Tensors of a Hub draft read by ranges whose values were not fetched (``contracts.hub``; [] when local)."""
        return sorted(n for names in not_fetched(self.path).values() for n in names)

    @cached_property
    def trainer_format(self) -> str:
        """``speculators`` (nested config, as speculators saves it), ``specforge`` (its SGLang export's
        ``midlayer.*``), ``modelopt`` (NVIDIA Model Optimizer's export: its own switches in ``eagle_config``),
        ``automodel`` (NVIDIA NeMo Automodel's training checkpoint: its draft class ``LlamaEagle3DraftModel`` in
        ``architectures``, which its serve helpers rewrite) or ``sglang`` (another flat Llama-style config)."""
        from contracts.trainer_profile import saved_form_of

        return saved_form_of(self.config, self.tensors)  # (each trainer profile's ``form``)

    def load_tensor(self, name: str):
        """Read one tensor (used for the small ones, and for tiny drafts' load tracing)."""
        info = self.tensors[name]
        path = self.path / info.file
        require_fetched(path, name)
        if path.suffix != ".safetensors":
            return read_torch_weights(path)[name]
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                return f.get_tensor(name)
        except Exception as e:  # safetensors' own refusal of a file the header check let through
            raise InputError(f"{path}: unreadable safetensors file: {e}") from None

    def load_array(self, name: str):
        """One tensor as a numpy array, read without torch where numpy holds its dtype: what the checks read of a
        draft (``d2t``, ``t2d``) in the check's own process, which then never imports torch beside an engine worker
        that has its own (torch alone is ~220 MB of the summed tree)."""
        info = self.tensors[name]
        path = self.path / info.file
        require_fetched(path, name)
        if path.suffix == ".safetensors" and info.dtype in NUMPY_DTYPES:
            from safetensors import safe_open

            try:
                with safe_open(str(path), framework="np") as f:
                    return f.get_tensor(name)
            except Exception as e:  # safetensors' own refusal of a file the header check let through
                raise InputError(f"{path}: unreadable safetensors file: {e}") from None
        tensor = self.load_tensor(name)
        return (tensor.float() if tensor.dtype.is_floating_point else tensor).numpy()

    def iter_tensors(self):
        """Every tensor, file by file, as (name, tensor)."""
        from safetensors import safe_open

        by_file: dict[str, list[str]] = {}
        for name, info in self.tensors.items():
            require_fetched(self.path / info.file, name)
            by_file.setdefault(info.file, []).append(name)
        for file, names in sorted(by_file.items()):
            if not file.endswith(".safetensors"):
                weights = read_torch_weights(self.path / file)
                for name in names:
                    yield name, weights[name]
                continue
            try:
                handle = safe_open(str(self.path / file), framework="pt")
            except Exception as e:
                raise InputError(f"{self.path / file}: unreadable safetensors file: {e}") from None
            with handle as f:
                for name in names:
                    yield name, f.get_tensor(name)


def _indexed_files(index: Path, what: str) -> list[Path]:
    """The shard files a ``*.index.json`` names, each one present in the directory."""
    weight_map = read_json(index, what).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise InputError(f"{index}: no weight_map")
    files = []
    for name in sorted(set(weight_map.values()), key=str):
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise InputError(f"{index}: invalid shard file name {name!r}")
        if not (index.parent / name).is_file():
            raise InputError(f"{index}: shard {name} is missing")
        files.append(index.parent / name)
    return files


def _file_tensors(path: Path) -> dict[str, TensorInfo]:
    """Names, shapes and dtypes of one weight file (a safetensors header, or a restricted, mapped torch load)."""
    if path.suffix == ".safetensors":
        return read_safetensors_header(path)
    return {name: TensorInfo(name, tuple(t.shape), str(t.dtype).removeprefix("torch."), path.name)
            for name, t in read_torch_weights(path).items()}
