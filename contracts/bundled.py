"""The bundled subjects: the drafts the real trainers saved under ``fixtures/`` (see fixtures/manifest.json),
each paired with the tiny target. They are what ``tox -e check`` checks and what ``pytest -m contracts``
runs every contract over when no ``--checkpoint`` is given.
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts.engine_spec import EngineSpec
from contracts.manifest import EXPECTED, FIXTURES, MANIFEST, manifest  # noqa: F401  (re-exported)


def bundled_subjects(engine: EngineSpec | None = None) -> list:
    """A ``Subject`` for every trainer-built draft in the manifest (with its target and the target ids the
    trainer's own vocab mapping selected), in a stable order; ENGINE: the default engine's installed release."""
    from contracts.engine_spec import default_engine

    engine = engine or EngineSpec(default_engine())
    entries = manifest()
    return [_subject(name, entry, entries, engine) for name, entry in sorted(entries.items())
            if _is_draft(entry) and entry.get("role") != "converged"]


def converged_subjects(engine: EngineSpec | None = None) -> list:
    """A ``Subject`` for every draft trained to convergence on the converged target (fixtures/converged/): what
    ``accept`` and the acceptance study measure; not among the examples (their verdicts are the study's). ENGINE:
    the one accept measures on by default."""
    from contracts.engine_spec import serving_engine

    engine = engine or EngineSpec(serving_engine())
    entries = manifest()
    return [_subject(name, entry, entries, engine) for name, entry in sorted(entries.items())
            if _is_draft(entry) and entry.get("role") == "converged"]


def _is_draft(entry: dict) -> bool:
    """A bundled draft this installation has (an installed package has the manifest, not the drafts)."""
    return entry.get("trainer") not in (None, "transformers") and "target" in entry and \
        (FIXTURES.parent / entry["path"]).is_dir()


def _subject(name: str, entry: dict, entries: dict, engine: EngineSpec, target=None):
    from contracts.subject import Subject

    root = FIXTURES.parent
    return Subject(name, root / entry["path"], Path(target) if target else root / entries[entry["target"]]["path"],
                   intended_ids=entry.get("selected_target_ids"), trainer=entry["trainer"],
                   trainer_aux_ids=entry.get("aux_layer_ids"),
                   reference_path=root / entry["reference"]["path"] if entry.get("reference") else None,
                   engine=engine, no_reference_because=None if entry.get("reference") else
                   f"the bundled draft records none (fixtures/manifest.json: {name} was built without one)")


def bundled_subject_for(checkpoint, engine: EngineSpec, target=None):
    """``check DIR`` on a bundled example's (or a converged draft's) directory: the draft as ``--examples`` checks it
    (its trainer, the ids its trainer selected, its reference forward; its target unless ``target`` is given), else
    None."""
    entries = manifest()
    where = Path(checkpoint).resolve()
    for _name, entry in sorted(entries.items()):
        if _is_draft(entry) and (FIXTURES.parent / entry["path"]).resolve() == where:
            return _subject(str(checkpoint), entry, entries, engine, target)
    return None


def expected_failures(engine: EngineSpec | None = None, tp: int = 1) -> dict[tuple[str, str], str] | None:
    """(subject, contract) -> why, for the bundled examples' known failures on ENGINE (``sglang==X``; default, or the
    default engine named bare, the one installed here: the pinned one); None when fixtures/expected.json documents no
    verdicts for that release. At tensor parallelism TP > 1, with the failures documented for that size
    (``tensor_parallel``: rank-consistency's; every other contract is judged on one rank), None when it documents
    none for the release."""
    from contracts.engine_spec import default_engine

    if not EXPECTED.exists():
        return {}
    doc = json.loads(EXPECTED.read_text())
    installed_here = EngineSpec(default_engine())  # documented as the pinned release
    key = doc["pinned"] if engine is None or engine == installed_here else str(engine.canonical())
    by_engine = doc["engines"].get(key)
    if by_engine is None:
        return None
    found = {(name, cid): why for name, by in by_engine.items() for cid, why in by.items()}
    if tp > 1 and not (engine or installed_here).profile.no_ranks:  # (an engine without ranks: one rank's verdicts)
        at_tp = doc.get("tensor_parallel", {}).get(str(tp), {}).get(key)
        if at_tp is None:
            return None
        found.update({(name, cid): why for name, by in at_tp.items() for cid, why in by.items()})
    return found


def documented_key(rep: dict) -> EngineSpec:
    """The engine path a report's verdicts are documented under in fixtures/expected.json: the release (its default
    path), with the runner when the one judged is not the release's default (``vllm==0.32.0:v1``)."""
    engine, path = rep["engine"], rep.get("path") or {}
    runner = path["judged"] if path.get("kind") == "runner" and not path.get("is_default") else None
    return EngineSpec(engine["name"], engine["version"], runner)


def documented_engines() -> list[EngineSpec]:
    """The releases fixtures/expected.json documents the examples' verdicts for (pinned first)."""
    doc = json.loads(EXPECTED.read_text())
    return [EngineSpec.parse(e) for e in
            [doc["pinned"], *sorted((e for e in doc["engines"] if e != doc["pinned"]), reverse=True)]]
