"""The can-i-deploy matrix: every contract on every subject under every engine release, as one table.

``eagle3-contracts matrix CHECKPOINT --target DIR --engines sglang==A,vllm==B`` answers "which engine
releases, of SGLang and of vLLM, will serve my drafter correctly?"; ``tox -e nightly`` builds the same table
over the bundled trainer fixtures. A speculators checkpoint is judged in its verbatim (hand) conversion on SGLang
and as saved on vLLM; per engine release a second row judges the copy ``eagle3-contracts convert`` writes for it
("after convert": the aux ids that release needs for the target's class). The table says which form each row is
about. Each engine release runs in its own environment (one worker per release, reused for every
subject), so a row costs one engine start-up per release, not per checkpoint.
"""

from __future__ import annotations

import json

from contracts.registry import FAIL, PASS, SKIP, WARN, all_contracts

CELL = {PASS: "pass", FAIL: "FAIL", WARN: "warn", SKIP: "skip"}
FORM_LABEL = {"converted": "verbatim conversion"}  # the hand conversion (`convert --verbatim`)


def run(subjects_by_engine: dict[str, list], only: list[str] | None = None, converted: bool = True) -> dict:
    """Reports for every (engine, subject), gathered into the matrix document (see ``document``); with
    ``converted``, also each subject's copy as ``eagle3-contracts convert`` writes it for that engine release."""
    from contracts.subject import report

    reports = []
    for engine, subjects in subjects_by_engine.items():
        for subject in subjects:
            trainer, name = subject.trainer_name, subject.name
            conversion = converted_report(subject, engine, only) if converted else None
            rep = report(subject, only)
            rep.update(name=name, engine_spec=engine, trainer=trainer)
            reports.append(rep)
            if conversion is not None:
                conversion.update(name=f"{name} after convert", engine_spec=engine, trainer=trainer,
                                  converted_from=name)
                reports.append(conversion)
    return document(reports)


def converted_report(subject, engine: str, only: list[str] | None = None) -> dict | None:
    """The verdicts on the copy ``convert`` writes of SUBJECT for ENGINE, in a temporary directory (None where
    convert cannot run: it needs the target and the trainer whose layer convention the ids follow)."""
    import shlex
    import shutil
    import tempfile
    from pathlib import Path

    from contracts.conversion import convert
    from contracts.engines import parse_spec

    if subject.target_path is None or subject.trainer_name is None:
        return None
    facts = {k: getattr(subject, k) for k in ("intended_ids", "trainer_aux_ids", "reference_path",
                                              "trainer_hidden_states") if getattr(subject, k) is not None}
    to = parse_spec(engine)[0]
    tmp = Path(tempfile.mkdtemp(prefix="eagle3-contracts-matrix-"))
    try:
        c = convert(subject.checkpoint_path, tmp / "converted", to=to, target=subject.target_path, engine=engine,
                    trainer=subject.trainer_name, link=True, facts=facts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rep = c.report
    if only:
        rep["results"] = [r for r in rep["results"] if r["contract"] in only]
    src = str(subject.checkpoint_path).rstrip("/")
    rep["judged_as"] = {"form": "after convert", "command": f"eagle3-contracts convert --to {to} {shlex.quote(src)} "
                        f"{shlex.quote(src + '-' + to)} --target {shlex.quote(str(subject.target_path))} "
                        f"--engine {engine}"}
    rep["conversion"] = {"notes": c.notes, "not_faithful": c.not_faithful}
    return rep


def document(reports: list[dict]) -> dict:
    """The matrix as JSON: engines, subjects, contracts and one cell per (subject, engine, contract)."""
    contracts = [c for c in all_contracts() if any(r["contract"] == c for rep in reports for r in rep["results"])]
    engines, subjects, cells, deployable, forms = [], [], [], {}, {}
    for rep in reports:
        engine = f"{rep['engine']['name']}=={rep['engine']['version']}"
        if engine not in engines:
            engines.append(engine)
        if rep["name"] not in subjects:
            subjects.append(rep["name"])
        deployable.setdefault(rep["name"], {})[engine] = all(r["status"] != FAIL for r in rep["results"])
        forms.setdefault(rep["name"], {})[engine] = (rep.get("judged_as") or {}).get("form", "as saved")
        for r in rep["results"]:
            cell = {"subject": rep["name"], "trainer": rep.get("trainer"), "engine": engine,
                    "contract": r["contract"], "status": r["status"], "summary": r["summary"]}
            if r["status"] == FAIL:
                cell["root_cause"] = r.get("root_cause", True)
                cell["follows_from"] = r.get("follows_from", [])
            cells.append(cell)
    converted_from = {rep["name"]: rep["converted_from"] for rep in reports if rep.get("converted_from")}
    return {"engines": engines, "subjects": subjects, "contracts": contracts, "cells": cells,
            "deployable": deployable, "judged_as": forms, "converted_from": converted_from, "reports": reports}


def _cell(cell: dict | None) -> str:
    if cell is None:
        return "-"
    text = CELL[cell["status"]]
    if cell["status"] == FAIL:
        text += " (root cause)" if cell.get("root_cause", True) else f" ← {', '.join(cell['follows_from'])}"
    return text


def markdown(doc: dict) -> str:
    """One row per (subject, engine), one column per contract, and whether the pair can be deployed."""
    index = {(c["subject"], c["engine"], c["contract"]): c for c in doc["cells"]}
    head = ["subject", "engine", "judged", *doc["contracts"], "serves it as trained"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    converted_from = doc.get("converted_from", {})
    for base in (s for s in doc["subjects"] if s not in converted_from):
        for engine in doc["engines"]:  # per engine release: the draft as judged, then its copy after convert
            for subject in [base, *(c for c, b in converted_from.items() if b == base)]:
                if engine not in doc["deployable"].get(subject, {}):
                    continue
                row = [subject, engine.replace("==", " "),
                       FORM_LABEL.get(form := doc.get("judged_as", {}).get(subject, {}).get(engine, "as saved"), form),
                       *(_cell(index.get((subject, engine, c))) for c in doc["contracts"]),
                       "yes" if doc["deployable"][subject][engine] else "**no**"]
                out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def text(doc: dict) -> str:
    lines = [markdown(doc)]
    for subject, by in doc["deployable"].items():
        good = [e for e, ok in by.items() if ok]
        lines.append(f"{subject}: serves as trained on {', '.join(good) if good else 'none of ' + ', '.join(by)}")
    failures = [c for c in doc["cells"] if c["status"] == FAIL and c.get("root_cause", True)]
    if failures:
        lines.append("\nroot causes:")
        lines += [f"  {c['subject']} on {c['engine']}: {c['contract']}: {c['summary'][:300]}" for c in failures]
    return "\n".join(lines) + "\n"


def render(doc: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, default=str) + "\n"
    if fmt == "markdown":
        return markdown(doc)
    return text(doc)


def exit_code(doc: dict) -> int:
    """0 when every subject is served as trained by at least one of the engines, as judged or after ``convert``,
    else 1."""
    converted_from = doc.get("converted_from", {})
    served = {}
    for subject, by in doc["deployable"].items():
        base = converted_from.get(subject, subject)
        served[base] = served.get(base, False) or any(by.values())
    return 0 if all(served.values()) else 1
