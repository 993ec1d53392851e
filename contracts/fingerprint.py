"""Chunked checksums of 2-D weight tensors (embeddings, heads) with bounded memory.

Serves ``embed-head``: the engine side fingerprints the tensors the draft really holds after the engine's
wiring; the check fingerprints the checkpoint's and the target's tensors from their weight files, row
chunk by row chunk (plain reads of a safetensors file, or a memory-mapped torch tensor), and compares. A fingerprint
is taken in one dtype (the dtype the engine serves the tensor in), so a match is bit-exact after the engine's own
cast: torch's, or numpy's made to round as torch does (``cast_like_torch``), so that the check's own process and
llama.cpp's worker need no torch. Neither side ever holds more than one chunk of a file tensor (about
``CHUNK_ELEMENTS`` values) beyond what it already has.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterator

CHUNK_ELEMENTS = 1 << 22  # ~4M values per chunk: 16 MB in float32


def chunk_rows_for(shape) -> int:
    cols = 1
    for d in list(shape)[1:]:
        cols *= d
    return max(1, CHUNK_ELEMENTS // max(cols, 1))


def tensor_chunks(tensor, chunk_rows: int, rows: int | None = None) -> Iterator:
    rows = tensor.shape[0] if rows is None else rows
    for start in range(0, rows, chunk_rows):
        yield tensor[start:min(start + chunk_rows, rows)]


def file_chunks(path: Path, name: str, chunk_rows: int, rows: int | None = None) -> Iterator:
    """Row chunks of tensor NAME in one weight file, read lazily (``contracts.checkpoint.tensor_rows``)."""
    from contracts.checkpoint import tensor_rows

    sl = tensor_rows(path, name)
    total = sl.shape[0]
    rows = total if rows is None else min(rows, total)
    for start in range(0, rows, chunk_rows):
        yield sl[start:min(start + chunk_rows, rows)]


def _dtype(name: str):
    import torch

    return getattr(torch, name)


def fingerprint(chunks, dtype: str, chunk_rows: int) -> dict:
    """``{"dtype", "rows", "chunk_rows", "digest", "chunks"}``: blake2b of the values cast to DTYPE, per chunk."""
    return _hashed(((fingerprint_bytes(chunk, dtype), chunk.shape[0]) for chunk in chunks), dtype, chunk_rows)


def _hashed(pieces, dtype: str, chunk_rows: int) -> dict:
    """A fingerprint of PIECES, (the bytes of one chunk cast to DTYPE, its rows) each."""
    total, parts, rows = hashlib.blake2b(digest_size=16), [], 0
    for raw, n in pieces:
        parts.append(hashlib.blake2b(raw, digest_size=8).hexdigest())
        total.update(raw)
        rows += n
    return {"dtype": dtype, "rows": rows, "chunk_rows": chunk_rows, "digest": total.hexdigest(), "chunks": parts}


def file_fingerprint(path: Path, name: str, like: dict) -> dict:
    """``fingerprint`` of tensor NAME in one weight file, taken as LIKE (another fingerprint: its dtype, rows and
    chunk rows) was. A safetensors float32 / bfloat16 / float16 tensor cast to one of those is hashed with numpy,
    so the check's own process never imports torch (~220 MB beside an engine worker that has its own); the bytes
    are torch's cast (``cast_like_torch``). Anything else, and any chunk holding a NaN (whose payload bits the two
    libraries round differently), goes through torch."""
    from contracts.checkpoint import SAFETENSORS_DTYPES, _FileRows, tensor_rows

    rows_view = tensor_rows(path, name)
    dtype, step = like["dtype"], like["chunk_rows"]
    if not isinstance(rows_view, _FileRows) or rows_view.dtype not in NUMPY_FLOATS or dtype not in NUMPY_FLOATS.values() \
            or not rows_view.shape:
        return fingerprint(file_chunks(path, name, step, like["rows"]), dtype, step)
    total_rows = rows_view.shape[0] if like["rows"] is None else min(like["rows"], rows_view.shape[0])

    def piece(start: int, end: int) -> tuple[bytes, int]:
        raw = cast_like_torch(bytes(rows_view.raw(start, end)), SAFETENSORS_DTYPES[rows_view.dtype], dtype)
        # a NaN in this chunk: torch's own cast
        return (raw if raw is not None else fingerprint_bytes(rows_view[start:end], dtype)), end - start

    return _hashed((piece(a, min(a + step, total_rows)) for a in range(0, total_rows, step)), dtype, step)


# safetensors dtype tag -> dtype name of the floats ``cast_like_torch`` reads and writes
NUMPY_FLOATS = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def cast_like_torch(raw: bytes, source: str, dtype: str) -> bytes | None:
    """RAW (little-endian SOURCE values: float32, bfloat16 or float16) cast to DTYPE (one of those) byte for byte as
    torch's ``Tensor.to`` casts them: bfloat16 widened exactly, narrowed to bfloat16 by rounding to nearest even
    (c10's ``round_to_nearest_even``), float32 to float16 by IEEE rounding to nearest even (numpy's, as c10's).
    None where the values hold a NaN."""
    import numpy as np

    if source == dtype:
        values = np.frombuffer(raw, "<u2" if dtype == "bfloat16" else "<f2" if dtype == "float16" else "<f4")
        if dtype == "bfloat16":
            nan = ((values & 0x7F80) == 0x7F80) & ((values & 0x007F) != 0)
        else:
            nan = np.isnan(values)
        return None if nan.any() else raw
    if source == "bfloat16":
        wide = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
    else:
        wide = np.frombuffer(raw, "<f2" if source == "float16" else "<f4").astype("<f4")
    if np.isnan(wide).any():
        return None
    if dtype == "float32":
        return wide.tobytes()
    if dtype == "float16":
        with np.errstate(over="ignore"):  # past float16's range: inf, as torch gives
            return wide.astype("<f2").tobytes()
    bits = wide.view("<u4")
    return ((bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16).astype("<u2").tobytes()


def fingerprint_bytes(chunk, dtype: str) -> bytes:
    """The bytes ``fingerprint`` hashes of one chunk (a torch tensor, or a numpy float32 / float16 array, cast with
    numpy as torch casts it: llama.cpp's worker reads its GGUF's rows so and never imports torch) cast to DTYPE."""
    import numpy as np

    if isinstance(chunk, np.ndarray):
        if chunk.dtype.name in ("float32", "float16") and dtype in NUMPY_FLOATS.values():
            raw = cast_like_torch(np.ascontiguousarray(chunk, dtype=chunk.dtype.newbyteorder("<")).tobytes(),
                                  chunk.dtype.name, dtype)
            if raw is not None:
                return raw
    import torch

    if isinstance(chunk, np.ndarray):
        chunk = torch.from_numpy(np.ascontiguousarray(chunk))

    data = chunk.detach().to("cpu", _dtype(dtype)).contiguous()
    return data.reshape(-1).view(torch.uint8).numpy().tobytes()


def same_values(a: dict | None, b: dict | None) -> bool | None:
    """True/False when both fingerprints exist and are comparable; None when one is missing."""
    if a is None or b is None:
        return None
    return a["rows"] == b["rows"] and a["dtype"] == b["dtype"] and a["digest"] == b["digest"]


def first_differing_rows(a: dict, b: dict) -> list[int] | None:
    """The row range [start, end) of the first chunk whose checksums differ."""
    for i, (x, y) in enumerate(zip(a["chunks"], b["chunks"])):
        if x != y:
            return [i * a["chunk_rows"], min((i + 1) * a["chunk_rows"], a["rows"])]
    return None


def compare_file_tensors(a: tuple[Path, str], b: tuple[Path, str], as_dtype: str) -> dict:
    """Stream two file tensors of the same shape side by side: both cast to AS_DTYPE (the coarser one),
    how many rows differ, the first of them, and the largest absolute difference."""
    import torch

    from contracts.checkpoint import tensor_rows

    shape_a = list(tensor_rows(*a).shape)
    shape_b = list(tensor_rows(*b).shape)
    if shape_a != shape_b:
        return {"comparable": False, "shapes": [shape_a, shape_b]}
    rows = max(1, chunk_rows_for(shape_a) // 4)  # five float32 temporaries of a chunk live at once below
    differing, first, max_abs, offset = 0, None, 0.0, 0
    for x, y in zip(file_chunks(*a, rows), file_chunks(*b, rows)):
        x = x.to(_dtype(as_dtype)).float()
        y = y.to(_dtype(as_dtype)).float()
        diff = (x - y).abs().reshape(x.shape[0], -1)
        bad = (diff > 0).any(dim=1) | torch.isnan(diff).any(dim=1)
        if bad.any():
            differing += int(bad.sum())
            if first is None:
                first = offset + int(bad.nonzero()[0])
            max_abs = max(max_abs, float(torch.nan_to_num(diff, nan=float("inf")).max()))
        offset += x.shape[0]
    return {"comparable": True, "shape": shape_a, "compared_as": as_dtype, "rows_differing": differing,
            "first_differing_row": first, "max_abs_diff": max_abs}


def files_equal(cmp: dict) -> bool:
    """A ``compare_file_tensors`` answer: the two tensors are equal (same shape, no row differs)."""
    return bool(cmp["comparable"] and not cmp["rows_differing"])


PRECISION = {"float8_e4m3fn": 0, "float8_e5m2": 0, "bfloat16": 1, "float16": 2, "float32": 3, "float64": 4}


def coarser(a: str, b: str) -> str:
    """The dtype of the two with fewer mantissa bits (both tensors are compared after rounding to it)."""
    return a if PRECISION.get(a, 3) <= PRECISION.get(b, 3) else b
