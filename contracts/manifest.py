"""The bundled fixtures' manifest (fixtures/manifest.json: every bundled target and draft, its trainer, the ids
its trainer selected, its reference forward) and where the fixtures lie. Below ``contracts.subject`` and
``contracts.bundled``, which both read it.
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MANIFEST = FIXTURES / "manifest.json"
EXPECTED = FIXTURES / "expected.json"


def manifest() -> dict:
    return json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
