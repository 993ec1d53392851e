"""Chunked checksums of 2-D weight tensors (embeddings, heads) with bounded memory.

Serves ``embed-head``: the engine side fingerprints the tensors the draft really holds after the engine's
wiring; the check fingerprints the checkpoint's and the target's tensors from their weight files, row
chunk by row chunk (safetensors ``get_slice``, or a memory-mapped torch tensor), and compares. A fingerprint is taken in one dtype (the
dtype the engine serves the tensor in), so a match is bit-exact after the engine's own cast. Neither side
ever holds more than one chunk of a file tensor (about ``CHUNK_ELEMENTS`` values) beyond what it already has.
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
    import torch

    total, parts, rows = hashlib.blake2b(digest_size=16), [], 0
    for chunk in chunks:
        data = chunk.detach().to("cpu", _dtype(dtype)).contiguous()
        raw = data.reshape(-1).view(torch.uint8).numpy().tobytes()
        parts.append(hashlib.blake2b(raw, digest_size=8).hexdigest())
        total.update(raw)
        rows += data.shape[0]
    return {"dtype": dtype, "rows": rows, "chunk_rows": chunk_rows, "digest": total.hexdigest(), "chunks": parts}


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
