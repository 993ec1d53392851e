"""embed-head's checkpoint fingerprint, taken with numpy in the check's own process, is torch's byte for byte.

The engine side fingerprints what it holds with torch; the check hashes the checkpoint's tensor without importing
torch (``fingerprint.file_fingerprint``). A cast that rounds one value differently would read as "the engine does not
serve the checkpoint's embedding": a wrong embed-head verdict on a healthy draft. So every float bit pattern class
(normal, subnormal, zero, inf, the rounding ties, values past float16's range) is cast both ways and compared.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from contracts.fingerprint import cast_like_torch, file_fingerprint, fingerprint, tensor_chunks

DTYPES = {"float32": (torch.float32, "<u4", 32), "bfloat16": (torch.bfloat16, "<u2", 16),
          "float16": (torch.float16, "<u2", 16)}
EDGES = {  # bit patterns torch and numpy could round apart: ties, the largest values, subnormals, zeros, inf
    "float32": [0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF,
                0x477FF000, 0x477FEFFF, 0x477FF001, 0x33800000, 0x33000000, 0x7F800000, 0xFF800000, 0x387FC000],
    "bfloat16": [0x0000, 0x8000, 0x0001, 0x007F, 0x7F7F, 0x7F80, 0xFF80, 0x477F, 0x3380],
    "float16": [0x0000, 0x8000, 0x0001, 0x03FF, 0x7BFF, 0x7C00, 0xFC00, 0x3C01],
}


def _is_nan(bits: int, dtype: str) -> bool:
    exponent, mantissa = {"float32": (0x7F800000, 0x007FFFFF), "bfloat16": (0x7F80, 0x007F),
                          "float16": (0x7C00, 0x03FF)}[dtype]
    return (bits & exponent) == exponent and (bits & mantissa) != 0


def _torch_bytes(bits: list[int], source: str, dtype: str) -> bytes:
    torch_dtype, unsigned, _ = DTYPES[source]
    raw = np.array(bits, dtype=unsigned).tobytes()
    values = torch.frombuffer(bytearray(raw), dtype=torch_dtype)
    return values.to(DTYPES[dtype][0]).contiguous().view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("source", list(DTYPES))
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_edge_values_cast_as_torch_casts_them(source, dtype):
    bits = EDGES[source]
    raw = np.array(bits, dtype=DTYPES[source][1]).tobytes()
    assert cast_like_torch(raw, source, dtype) == _torch_bytes(bits, source, dtype)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(DTYPES)), st.sampled_from(list(DTYPES)), st.data())
def test_any_bit_pattern_casts_as_torch_casts_it(source, dtype, data):
    width = DTYPES[source][2]
    bits = data.draw(st.lists(st.integers(0, (1 << width) - 1), min_size=1, max_size=64))
    raw = np.array(bits, dtype=DTYPES[source][1]).tobytes()
    ours = cast_like_torch(raw, source, dtype)
    if any(_is_nan(b, source) for b in bits):
        assert ours is None  # torch's own cast then
    else:
        assert ours == _torch_bytes(bits, source, dtype)


@pytest.mark.parametrize("stored", [torch.bfloat16, torch.float32, torch.float16])
@pytest.mark.parametrize("as_dtype", ["bfloat16", "float32", "float16"])
def test_file_fingerprint_equals_the_engine_sides(tmp_path, stored, as_dtype):
    """The digest and every chunk's, with a NaN row in one chunk (which goes through torch) and a partial last chunk."""
    gen = torch.Generator().manual_seed(0)
    tensor = (torch.randn(37, 24, generator=gen) * 1000).to(stored)
    tensor[5, 3] = float("nan")
    save_file({"w": tensor}, str(tmp_path / "model.safetensors"))
    engine_side = fingerprint(tensor_chunks(tensor, 8), as_dtype, 8)
    ours = file_fingerprint(tmp_path / "model.safetensors", "w", engine_side)
    assert ours == engine_side
    partial = fingerprint(tensor_chunks(tensor, 8, 20), as_dtype, 8)
    assert file_fingerprint(tmp_path / "model.safetensors", "w", partial) == partial


def test_the_cast_of_a_bfloat16_tie_rounds_to_even():
    """1 + 2^-8 lies halfway between two bfloat16 values: even mantissa wins (1.0), as c10 rounds."""
    raw = struct.pack("<f", 1.0 + 2 ** -8)
    assert cast_like_torch(raw, "float32", "bfloat16") == struct.pack("<H", 0x3F80)
