"""Rendering reports (the JSON document of docs/checking-a-draft.md) as text, JSON, Markdown or JUnit XML."""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET

from contracts.engine_spec import EngineSpec
from contracts.input_bounds import escape
from contracts.registry import FAIL, PASS, SKIP, WARN

MARK = {PASS: "PASS", FAIL: "FAIL", WARN: "WARN", SKIP: "SKIP"}


def exit_code(reports: list[dict], strict: bool = False) -> int:
    statuses = {r["status"] for rep in reports for r in rep["results"]}
    return 1 if FAIL in statuses or (strict and WARN in statuses) else 0


# how a report says that the path judged is the default one, per kind of path (vLLM's runners, SGLang's workers,
# llama.cpp's one speculative loop)
DEFAULT_NOTE = {"runner": "the GPU default", "worker": "its default worker", "loop": "its only EAGLE-3 path"}


def path_label(rep: dict) -> str:
    """The code path a report judged, said as users deploy it: "Model Runner V2 (the GPU default)", "EAGLEWorkerV2
    (its default worker)", or "Model Runner V1 (asked for; a GPU deployment runs Model Runner V2)"."""
    p = rep.get("path") or {}
    if not p.get("label"):
        return "path unknown" + (f" ({p['why_unknown'][:120]})" if p.get("why_unknown") else "")
    if p["is_default"]:
        return f"{p['label']} ({DEFAULT_NOTE.get(p['kind'], 'the default')})"
    return f"{p['label']} (asked for; a GPU deployment runs {p.get('default_label') or p['default']})"


def _reproduce(rep: dict, contract: str) -> str:
    cmd = ["eagle3-contracts", "check", rep["checkpoint"]]
    if rep.get("target"):
        cmd += ["--target", rep["target"]]
    spec = EngineSpec.parse(rep.get("engine_spec") or "sglang")
    if str(spec) != "sglang":
        cmd += ["--engine", str(spec.with_runner(None))] + (["--runner", spec.runner] if spec.runner else [])
    return " ".join(shlex.quote(c) for c in cmd + ["--only", contract])


def _evidence_lines(evidence: dict) -> list[str]:
    lines = []
    for key, value in evidence.items():
        if value in (None, [], {}, ""):
            continue
        text = json.dumps(value, default=str)
        if len(text) > 400:
            text = text[:397] + "..."
        lines.append(f"      {key}: {text}")
    return lines


def cause(result: dict) -> str:
    """`` [root cause]`` / `` [follows from key-naming]`` for a failure among others; '' otherwise."""
    if result["status"] != FAIL or "follows_from" not in result:
        return ""
    return f" [follows from {', '.join(result['follows_from'])}]" if result["follows_from"] else " [root cause]"


def table(reports: list[dict]) -> str:
    """One row per subject, one column per contract."""
    contracts = []
    for rep in reports:
        for r in rep["results"]:
            if r["contract"] not in contracts:
                contracts.append(r["contract"])
    names = [rep.get("name") or rep["checkpoint"] for rep in reports]
    width = max([len("subject")] + [len(n) for n in names])
    head = f"{'subject':<{width}}  " + "  ".join(f"{c:<14}" for c in contracts)
    rows = [head, "-" * len(head)]
    for name, rep in zip(names, reports):
        by = {r["contract"]: r["status"] for r in rep["results"]}
        known = {r["contract"] for r in rep["results"] if r.get("expected_failure")}
        rows.append(f"{name:<{width}}  " + "  ".join(
            f"{MARK.get(by.get(c), '-') + (' (known)' if c in known else ''):<14}" for c in contracts))
    return "\n".join(rows)


def render_text(reports: list[dict]) -> str:
    out = []
    for rep in reports:
        engine = rep["engine"]
        out.append(f"{rep.get('name') or rep['checkpoint']}  ({rep['trainer_format']} checkpoint, "
                   f"target {rep.get('target') or '-'}, engine {engine['name']} {engine['version']}, "
                   f"{rep['duration_s']:.1f}s)")
        out.append(f"  judged on {path_label(rep)}")
        if (rep.get("judged_as") or {}).get("form") == "converted":
            out.append(f"  judged in its verbatim conversion, as `{rep['judged_as']['command']}` (a hand conversion) "
                       f"writes it; to deploy: `{rep['judged_as']['to_deploy']}`")
        elif (rep.get("judged_as") or {}).get("form") == "after convert":
            out.append(f"  judged in the copy `convert` wrote: {rep['judged_as']['directory']}")
        elif rep.get("judged_as"):
            out.append(f"  judged as saved: {rep['judged_as']['why']}")
        for r in rep["results"]:
            out.append(f"  {MARK[r['status']]}  {r['contract']}{cause(r)}: {r['summary']}")
            if r["status"] in (FAIL, WARN):
                out += _evidence_lines(r["evidence"])
                if r.get("fix"):
                    out.append(f"      fix: {r['fix']}")
                out.append(f"      reproduce: {_reproduce(rep, r['contract'])}")
        out.append("")
    if len(reports) > 1:
        out.append(table(reports))
    return "\n".join(out).rstrip() + "\n"


def render_markdown(reports: list[dict]) -> str:
    out = []
    for rep in reports:
        out.append(f"### {rep.get('name') or rep['checkpoint']}\n")
        out.append(f"engine {rep['engine']['name']} {rep['engine']['version']} on {path_label(rep)}, "
                   f"{rep['trainer_format']} checkpoint"
                   + (f", judged in its verbatim conversion (`{rep['judged_as']['command']}`)"
                      if (rep.get("judged_as") or {}).get("form") == "converted" else
                      f", judged in the copy `convert` wrote ({rep['judged_as']['directory']})"
                      if (rep.get("judged_as") or {}).get("form") == "after convert" else
                      f", judged as saved ({rep['judged_as']['why']})" if rep.get("judged_as") else "")
                   + "\n")
        out.append("| contract | status | summary | fix |\n|---|---|---|---|")
        for r in rep["results"]:
            cells = [r["contract"], MARK[r["status"]] + cause(r), r["summary"], r.get("fix") or ""]
            out.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
        out.append("")
    return "\n".join(out)


def render_junit(reports: list[dict]) -> str:
    suites = ET.Element("testsuites", name="eagle3-contracts")
    for rep in reports:
        results = rep["results"]
        suite = ET.SubElement(suites, "testsuite", name=rep.get("name") or rep["checkpoint"],
                              tests=str(len(results)), failures=str(sum(r["status"] == FAIL for r in results)),
                              skipped=str(sum(r["status"] == SKIP for r in results)), time=str(rep["duration_s"]))
        properties = ET.SubElement(suite, "properties")
        engine = rep.get("engine") or {}
        for name, value in (("engine", f"{engine.get('name')} {engine.get('version')}"), ("path", path_label(rep)),
                            ("path_default_why", (rep.get("path") or {}).get("default_why"))):
            if value:
                ET.SubElement(properties, "property", name=name, value=value)
        for r in results:
            case = ET.SubElement(suite, "testcase", classname=suite.get("name"), name=r["contract"])
            detail = json.dumps({"evidence": r["evidence"], "fix": r.get("fix")}, indent=1, default=str)
            if r["status"] == FAIL:
                ET.SubElement(case, "failure", message=r["summary"]).text = detail
            elif r["status"] == SKIP:
                ET.SubElement(case, "skipped", message=r["summary"])
            elif r["status"] == WARN:
                ET.SubElement(case, "system-out").text = f"WARN: {r['summary']}\n{detail}"
    return ET.tostring(suites, encoding="unicode") + "\n"


def render(reports: list[dict], fmt: str) -> str:
    if fmt == "json":
        doc = reports[0] if len(reports) == 1 else reports
        return json.dumps(doc, indent=2, default=str) + "\n"
    text = {"text": render_text, "markdown": render_markdown, "junit": render_junit}[fmt](reports)
    # names read from a checkpoint (tensor names, config keys) may carry terminal control sequences: escaped
    return "\n".join(escape(line) for line in text.split("\n"))
