"""The can-i-deploy matrix: every contract on every subject under every engine release, as one table.

``eagle3-contracts matrix CHECKPOINT --target DIR --engines sglang==A,vllm==B`` answers "which engine
releases, of SGLang and of vLLM, will serve my drafter correctly?"; ``tox -e nightly`` builds the same table
over the bundled trainer fixtures. A speculators checkpoint is judged as converted on SGLang and as saved on
vLLM; the table says which form each row is about. Each engine release runs in its own environment (one worker per release, reused for every
subject), so a row costs one engine start-up per release, not per checkpoint.
"""

from __future__ import annotations

import json

from contracts.registry import FAIL, PASS, SKIP, WARN, all_contracts

CELL = {PASS: "pass", FAIL: "FAIL", WARN: "warn", SKIP: "skip"}


def run(subjects_by_engine: dict[str, list], only: list[str] | None = None) -> dict:
    """Reports for every (engine, subject), gathered into the matrix document (see ``document``)."""
    from contracts.subject import report

    reports = []
    for engine, subjects in subjects_by_engine.items():
        for subject in subjects:
            rep = report(subject, only)
            rep["name"] = subject.name
            rep["engine_spec"] = engine
            rep["trainer"] = subject.trainer_name
            reports.append(rep)
    return document(reports)


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
    return {"engines": engines, "subjects": subjects, "contracts": contracts, "cells": cells,
            "deployable": deployable, "judged_as": forms, "reports": reports}


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
    for subject in doc["subjects"]:
        for engine in doc["engines"]:
            if engine not in doc["deployable"].get(subject, {}):
                continue
            row = [subject, engine.replace("==", " "), doc.get("judged_as", {}).get(subject, {}).get(engine, "as saved"),
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
    """0 when every subject is served as trained by at least one of the engines, else 1."""
    return 0 if all(any(by.values()) for by in doc["deployable"].values()) else 1
