"""The bundled fixtures' manifest (fixtures/manifest.json: every bundled target and draft, its trainer, the ids
its trainer selected, its reference forward) and where the fixtures lie. Below ``contracts.subject`` and
``contracts.bundled``, which both read it.

In a checkout both files are read from ``fixtures/``. An installed package (``pip install eagle3-contracts``, no
checkout) carries the two as package data (``contracts/data``): the pytest plugin's pre-merge run in a training
repository needs the documented verdicts of the bundled drafts to mark them xfail, and a reference made on the spot
needs the trainer releases the drafts were built with. The drafts themselves travel only with a checkout.
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PACKAGED = Path(__file__).resolve().parent / "data"


def _checkout_or_packaged(name: str) -> Path:
    return FIXTURES / name if (FIXTURES / name).is_file() else PACKAGED / name


MANIFEST = _checkout_or_packaged("manifest.json")
EXPECTED = _checkout_or_packaged("expected.json")


def manifest() -> dict:
    return json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
