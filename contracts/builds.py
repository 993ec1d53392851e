"""A ``build-tiny`` output as a subject: its record (``eagle3-contracts-build.json``) names the draft, the target,
the trainer and its release, the trainer's reference forward, the target ids its vocab mapping selected and the
hidden states it trained on, so ``check DIR`` judges every contract with the trainer's own facts rather than
inferring them, and the bundled fixture built the same way says which verdicts the build should get.

Needs only the standard library (the plugin and the CLI read it in a training repository's environment).
"""

from __future__ import annotations

from pathlib import Path

from contracts.engine_spec import EngineSpec

RECORD = "eagle3-contracts-build.json"


def read_record(directory) -> dict | None:
    """The build record in ``directory`` (None: not a build-tiny output)."""
    path = Path(directory) / RECORD
    if not path.is_file():
        return None
    from contracts.checkpoint import InputError, read_json

    record = read_json(path, RECORD)
    if not isinstance(record, dict) or "draft" not in record or "trainer" not in record:
        raise InputError(f"{path}: not a build-tiny record (no draft / trainer)")
    return record


def subject_for(directory, engine: EngineSpec, name: str | None = None, target=None):
    """The ``Subject`` of a build-tiny output (``target`` overrides the record's)."""
    from contracts.subject import Subject

    from contracts.checkpoint import InputError

    directory = Path(directory)
    record = read_record(directory)
    if record is None:
        raise InputError(f"{directory}: no {RECORD} (not a build-tiny output)")
    recorded = record.get("target")
    target_path = Path(target) if target else (directory / recorded if recorded and not Path(recorded).is_absolute()
                                               else Path(recorded) if recorded else None)
    reference = directory / record["reference"] if record.get("reference") else None
    return Subject(name or directory.name, directory / record["draft"], target_path,
                   intended_ids=record.get("selected_target_ids"), trainer=record["trainer"],
                   trainer_aux_ids=record.get("aux_layer_ids"), reference_path=reference, engine=engine,
                   trainer_hidden_states=record.get("trained_hidden_states"))


def twin_expectations(record: dict, engine: EngineSpec) -> dict[str, str] | None:
    """contract -> why, the documented failures of the bundled fixture built the same way (``bundled_twin``) on
    ``engine``; None when fixtures/expected.json documents nothing for that release (or the twin is unknown)."""
    from contracts.bundled import expected_failures

    known = expected_failures(engine)
    twin = record.get("bundled_twin")
    if known is None or not twin:
        return None
    return {cid: why for (subject, cid), why in known.items() if subject == twin}
