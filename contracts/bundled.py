"""The bundled subjects: the drafts the real trainers saved under ``fixtures/`` (see fixtures/manifest.json),
each paired with the tiny target. They are what ``tox -e check`` checks and what ``pytest -m contracts``
runs every contract over when no ``--checkpoint`` is given.
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MANIFEST = FIXTURES / "manifest.json"
EXPECTED = FIXTURES / "expected.json"


def manifest() -> dict:
    return json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}


def bundled_subjects() -> list:
    """A ``Subject`` for every trainer-built draft in the manifest (with its target and the target ids the
    trainer's own vocab mapping selected), in a stable order."""
    from contracts.subject import Subject

    entries = manifest()
    root = FIXTURES.parent
    out = []
    for name, entry in sorted(entries.items()):
        if entry.get("trainer") in (None, "transformers") or "target" not in entry:
            continue
        out.append(Subject(name, root / entry["path"], root / entries[entry["target"]]["path"],
                           intended_ids=entry.get("selected_target_ids"), trainer=entry["trainer"],
                           trainer_aux_ids=entry.get("aux_layer_ids"),
                           reference_path=root / entry["reference"]["path"] if entry.get("reference") else None))
    return out


def expected_failures() -> dict[tuple[str, str], str]:
    """(subject, contract) -> why, for the bundled examples' known failures on the pinned engine."""
    if not EXPECTED.exists():
        return {}
    doc = json.loads(EXPECTED.read_text())
    return {(name, cid): why for name, by in doc["expected"].items() for cid, why in by.items()}
