"""The bundled draft and target every engine's own steps are first run on: the environment probe runs each adapter's
observations on them, and an engine's surface is observed on the draft (``fixtures/``)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CANONICAL_DRAFT = FIXTURES / "drafts" / "specforge"
CANONICAL_TARGET = FIXTURES / "targets" / "llama-tiny"
CANONICAL_REFERENCE = FIXTURES / "references" / "specforge.safetensors"
