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
from dataclasses import replace

from contracts.checks import all_contracts
from contracts.engine_spec import EngineSpec
from contracts.registry import FAIL, PASS, SKIP, WARN

CELL = {PASS: "pass", FAIL: "FAIL", WARN: "warn", SKIP: "skip"}
FORM_LABEL = {"converted": "verbatim conversion"}  # the hand conversion (`convert --verbatim`)


def run(subjects_by_engine: dict[EngineSpec, list], only: list[str] | None = None, converted: bool = True) -> dict:
    """Reports for every (engine, subject), gathered into the matrix document (see ``document``); with
    ``converted``, also each subject's copy as ``eagle3-contracts convert`` writes it for that engine release. An
    engine named without a path is judged on the one a GPU deployment of it takes by default and, where the release
    has another (vLLM's other model runner), on that one too: shown where they disagree."""
    from contracts.judging import report

    reports = []
    for engine, subjects in subjects_by_engine.items():
        for subject in subjects:
            trainer, name = subject.trainer_name, subject.name
            conversion = converted_report(subject, engine, only) if converted else None
            rep = report(subject, only)
            rep.update(name=name, engine_spec=str(engine), trainer=trainer)
            reports.append(rep)
            for other in other_paths(engine, rep):
                alt = report(replace(subject, engine=other), only)
                alt.update(name=name, engine_spec=str(other), trainer=trainer, other_path_of=str(engine))
                reports.append(alt)
            if conversion is not None:
                for i, conv in enumerate(conversion):
                    conv.update(name=f"{name} after convert", trainer=trainer, converted_from=name,
                                engine_spec=str(engine) if i == 0 else conv.get("engine_spec"))
                    if i:
                        conv["other_path_of"] = str(engine)
                    reports.append(conv)
    return document(reports)


def other_paths(engine: EngineSpec, rep: dict) -> list[EngineSpec]:
    """ENGINE on the release's paths other than the default one REP judged (none when ENGINE asks for a path)."""
    path = rep.get("path") or {}
    if engine.runner is not None or path.get("kind") != "runner":
        return []
    return [engine.with_runner(r) for r in path.get("available", []) if r != path.get("judged")]


def converted_report(subject, engine: EngineSpec, only: list[str] | None = None) -> list[dict] | None:
    """The verdicts on the copy ``convert`` writes of SUBJECT for ENGINE, in a temporary directory, on the release's
    default path and then on each other path it was proven on (None where convert cannot run: it needs the target
    and the trainer whose layer convention the ids follow, and an engine convert writes copies for)."""
    import shlex
    import shutil
    import tempfile
    from pathlib import Path

    from contracts.convert_command import convert
    from contracts.engine_profile import convert_targets
    from contracts.report import command_prefix

    if subject.target_path is None or subject.trainer_name is None or engine.name not in convert_targets():
        return None
    facts = {k: getattr(subject, k) for k in ("intended_ids", "trainer_aux_ids", "reference_path",
                                              "trainer_hidden_states") if getattr(subject, k) is not None}
    if subject.tp > 1:  # the copy judged at the deployment's tensor-parallel size too
        facts["tp"] = subject.tp
    to = engine.name
    tmp = Path(tempfile.mkdtemp(prefix="eagle3-contracts-matrix-"))
    try:
        c = convert(subject.checkpoint_path, tmp / "converted", target=subject.target_path, engine=engine,
                    trainer=subject.trainer_name, link=True, facts=facts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    src = str(subject.checkpoint_path).rstrip("/")
    command = (f"{command_prefix()} convert --to {to} {shlex.quote(src)} {shlex.quote(src + '-' + to)} --target "
               f"{shlex.quote(str(subject.target_path))} --engine {engine}")
    out = []
    for rep in [c.report, *c.other_reports]:
        if only:
            rep["results"] = [r for r in rep["results"] if r["contract"] in only]
        rep["judged_as"] = {"form": "after convert", "command": command}
        rep["conversion"] = {"notes": c.notes, "not_faithful": c.not_faithful}
        out.append(rep)
    return out


def document(reports: list[dict]) -> dict:
    """The matrix as JSON: engines (each release on its default path, and ``release:runner`` for another path),
    subjects, contracts and one cell per (subject, engine, contract); ``paths`` says what each engine key judged,
    ``alternatives`` which rows are a release's other path (judged beside the default, not asked for) and
    ``disagrees`` whether such a row's verdicts differ from the default path's."""
    from contracts.bundled import documented_key
    from contracts.report import path_label

    contracts = [c for c in all_contracts() if any(r["contract"] == c for rep in reports for r in rep["results"])]
    engines: list[str] = []
    subjects: list[str] = []
    cells: list[dict] = []
    deployable: dict[str, dict] = {}
    forms: dict[str, dict] = {}
    paths: dict[str, dict] = {}
    alternatives: dict[str, dict] = {}
    statuses = {}
    for rep in reports:
        engine = str(documented_key(rep))  # the document's key for the engine path (JSON)
        if engine not in engines:
            engines.append(engine)
        paths.setdefault(engine, {"release": f"{rep['engine']['name']}=={rep['engine']['version']}",
                                  "path": path_label(rep) if rep.get("path") else "-",
                                  "default": (rep.get("path") or {}).get("is_default", True)})
        if rep["name"] not in subjects:
            subjects.append(rep["name"])
        if rep.get("other_path_of"):
            alternatives.setdefault(rep["name"], {})[engine] = str(documented_key({**rep, "path": {}}))
        deployable.setdefault(rep["name"], {})[engine] = all(r["status"] != FAIL for r in rep["results"])
        forms.setdefault(rep["name"], {})[engine] = (rep.get("judged_as") or {}).get("form", "as saved")
        statuses[(rep["name"], engine)] = {r["contract"]: r["status"] for r in rep["results"]}
        for r in rep["results"]:
            cell = {"subject": rep["name"], "trainer": rep.get("trainer"), "engine": engine,
                    "contract": r["contract"], "status": r["status"], "summary": r["summary"]}
            if r["status"] == FAIL:
                cell["root_cause"] = r.get("root_cause", True)
                cell["follows_from"] = r.get("follows_from", [])
            cells.append(cell)
    disagrees = {subject: {key: statuses.get((subject, key)) != statuses.get((subject, base))
                           for key, base in by.items()} for subject, by in alternatives.items()}
    converted_from = {rep["name"]: rep["converted_from"] for rep in reports if rep.get("converted_from")}
    return {"engines": engines, "subjects": subjects, "contracts": contracts, "cells": cells, "paths": paths,
            "alternatives": alternatives, "disagrees": disagrees, "deployable": deployable, "judged_as": forms,
            "converted_from": converted_from, "reports": reports}


def _shown(doc: dict, subject: str, key: str, all_paths: bool = False) -> bool:
    """A release's other path (the document's engine KEY) is a row only where its verdicts differ from the default
    path's (or ``all_paths``)."""
    return all_paths or key not in doc.get("alternatives", {}).get(subject, {}) or doc["disagrees"][subject][key]


def _cell(cell: dict | None) -> str:
    if cell is None:
        return "-"
    text = CELL[cell["status"]]
    if cell["status"] == FAIL:
        text += " (root cause)" if cell.get("root_cause", True) else f" ← {', '.join(cell['follows_from'])}"
    return text


def _serves(doc: dict, index: dict, subject: str, key: str) -> str:
    """"yes" only names what was judged: a pair (SUBJECT, the document's engine KEY) no contract fails, with some
    not judged, says which (a skipped forward-parity is no proof that the math is the trainer's)."""
    if not doc["deployable"][subject][key]:
        return "**no**"
    unjudged = [c for c in doc["contracts"] if (index.get((subject, key, c)) or {}).get("status") == SKIP]
    return f"yes (not judged: {', '.join(unjudged)})" if unjudged else "yes"


def markdown(doc: dict, all_paths: bool = False) -> str:
    """One row per (subject, engine path), one column per contract, and whether the pair can be deployed; a
    release's other path (vLLM's other runner) only where its verdicts differ from the default path's."""
    index = {(c["subject"], c["engine"], c["contract"]): c for c in doc["cells"]}
    head = ["subject", "engine", "path", "judged", *doc["contracts"], "serves it as trained"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    converted_from = doc.get("converted_from", {})
    for base in (s for s in doc["subjects"] if s not in converted_from):
        for engine in doc["engines"]:  # per engine release: the draft as judged, then its copy after convert
            for subject in [base, *(c for c, b in converted_from.items() if b == base)]:
                if engine not in doc["deployable"].get(subject, {}) or not _shown(doc, subject, engine, all_paths):
                    continue
                path = doc.get("paths", {}).get(engine, {})
                row = [subject, path.get("release", str(EngineSpec.parse(engine).with_runner(None))).replace("==", " "),
                       path.get("path", "-"),
                       FORM_LABEL.get(form := doc.get("judged_as", {}).get(subject, {}).get(engine, "as saved"), form),
                       *(_cell(index.get((subject, engine, c))) for c in doc["contracts"]),
                       _serves(doc, index, subject, engine)]
                out.append("| " + " | ".join(row) + " |")
    agree = [] if all_paths else sorted(
        {e for by in doc.get("disagrees", {}).values() for e, differs in by.items() if not differs}
        - {e for by in doc.get("disagrees", {}).values() for e, differs in by.items() if differs})
    if agree:
        out.append("")
        out.append("Not shown, same verdicts as the default path on every row: " + ", ".join(
            f"{doc['paths'][e]['release'].replace('==', ' ')} on {doc['paths'][e]['path']}" for e in agree) + ".")
    return "\n".join(out) + "\n"


def text(doc: dict, all_paths: bool = False) -> str:
    from contracts.report import not_judged_lines

    lines = [markdown(doc, all_paths)]
    alternatives = doc.get("alternatives", {})
    for subject, by in doc["deployable"].items():
        good = [e for e, ok in by.items() if ok and e not in alternatives.get(subject, {})]
        asked = [e for e in by if e not in alternatives.get(subject, {})]
        lines.append(f"{subject}: serves as trained on {', '.join(good) if good else 'none of ' + ', '.join(asked)}")
        for e, differs in doc.get("disagrees", {}).get(subject, {}).items():
            if differs:
                lines.append(f"  {doc['paths'][e]['path']} of {doc['paths'][e]['release']} differs: "
                             f"{'serves it as trained' if by[e] else 'does not serve it as trained'}")
    failures = [c for c in doc["cells"] if c["status"] == FAIL and c.get("root_cause", True)
                and _shown(doc, c["subject"], c["engine"])]
    if failures:
        lines.append("\nroot causes:")
        lines += [f"  {c['subject']} on {c['engine']}: {c['contract']}: {c['summary'][:300]}" for c in failures]
    lines += not_judged_lines(doc["reports"])
    return "\n".join(lines) + "\n"


def render(doc: dict, fmt: str, all_paths: bool = False) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, default=str) + "\n"
    if fmt == "markdown":
        return markdown(doc, all_paths)
    return text(doc, all_paths)


def exit_code(doc: dict, allow_not_judged: bool = False) -> int:
    """0 when every subject is served as trained by at least one of the engines asked for (each on its default path,
    or the path asked), as judged or after ``convert``, else 1. A release's other path judged beside its default
    does not count: no deployment takes it unless asked. 3 (``report.NOT_JUDGED``) instead of 0 when a contract
    was not judged for want of an input the user could give, unless ``allow_not_judged``."""
    from contracts.report import FAILED, NOT_JUDGED, OK, not_judged

    converted_from = doc.get("converted_from", {})
    alternatives = doc.get("alternatives", {})
    served: dict[str, bool] = {}
    for subject, by in doc["deployable"].items():
        base = converted_from.get(subject, subject)
        ok = any(v for e, v in by.items() if e not in alternatives.get(subject, {}))
        served[base] = served.get(base, False) or ok
    if not all(served.values()):
        return FAILED
    return NOT_JUDGED if not allow_not_judged and not_judged(doc["reports"]) else OK
