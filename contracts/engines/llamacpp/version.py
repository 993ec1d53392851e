"""The llama.cpp release this environment holds (the ``xllamacpp`` wheel: its server and library)."""

from __future__ import annotations


def engine() -> dict:
    import xllamacpp

    return {"name": "llamacpp", "version": xllamacpp.__version__}
