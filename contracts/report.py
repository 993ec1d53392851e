"""Rendering reports (the JSON document of docs/checking-a-draft.md) as text, JSON, Markdown or JUnit XML."""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET

from contracts.engine_spec import EngineSpec, default_engine
from contracts.input_bounds import escape
from contracts.registry import FAIL, PASS, SKIP, WARN

MARK = {PASS: "PASS", FAIL: "FAIL", WARN: "WARN", SKIP: "SKIP"}


# The exit codes of every command, in one place (docs/checking-a-draft.md#exit-codes says the same to users)
OK, FAILED, UNUSABLE, NOT_JUDGED = 0, 1, 2, 3
EXIT_CODES = {
    OK: "every contract judged holds (warnings too, unless --strict)",
    FAILED: "a contract fails: the engine does not serve the draft as trained (or a warning, with --strict)",
    UNUSABLE: "the input or the invocation is unusable (one line on stderr, nothing written)",
    NOT_JUDGED: "nothing fails, but a contract was not judged for want of an input you can give (--target, the "
                "target's weights, --trainer); --allow-not-judged accepts that",
}


def not_judged(reports: list[dict]) -> dict[str, list[str]]:
    """input the user could give -> the contracts left unjudged for want of it, over REPORTS."""
    out: dict[str, list[str]] = {}
    for rep in reports:
        for r in rep["results"]:
            if r["status"] == SKIP and r.get("needs") and r["contract"] not in out.get(r["needs"], []):
                out.setdefault(r["needs"], []).append(r["contract"])
    return out


def exit_code(reports: list[dict], strict: bool = False, allow_not_judged: bool = False) -> int:
    statuses = {r["status"] for rep in reports for r in rep["results"]}
    if FAIL in statuses or (strict and WARN in statuses):
        return FAILED
    return NOT_JUDGED if not allow_not_judged and not_judged(reports) else OK


def not_judged_lines(reports: list[dict]) -> list[str]:
    """What a text report ends with when a contract was left unjudged for want of an input the user can give."""
    return [f"NOT JUDGED for want of {needs}: {', '.join(ids)} (give it, or --allow-not-judged to accept this)"
            for needs, ids in not_judged(reports).items()]


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


def command_prefix() -> str:
    """How to run this tool again as it was run now: through tox (``tox -e check --``, as the README runs it; tox sets
    ``TOX_ENV_NAME``), the console script, or ``python -m contracts.cli``; the console script when it is used as a
    library (the tests, the plugin). Before, every reproduce line said ``eagle3-contracts``, which a user who runs the
    tool through tox does not have on their PATH ("command not found")."""
    import os
    import shutil
    import sys
    from pathlib import Path

    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("")
    env = os.environ.get("TOX_ENV_NAME")
    if argv0.name == "eagle3-contracts" and env:
        ini = Path(os.environ.get("TOX_ENV_DIR") or ".").resolve().parent.parent / "tox.ini"
        here = ini.parent == Path.cwd().resolve() or not ini.is_file()
        return f"tox -e {env} --" if here else f"tox -c {shlex.quote(str(ini))} -e {env} --"
    if argv0.name == "eagle3-contracts":
        found = shutil.which("eagle3-contracts")
        same = found is not None and Path(found).resolve() == argv0.resolve()
        return "eagle3-contracts" if same else shlex.quote(str(argv0))
    if argv0.name == "cli.py" and argv0.parent.name == "contracts":
        return f"{shlex.quote(sys.executable)} -m contracts.cli"
    return "eagle3-contracts"


def _reproduce(rep: dict, contract: str) -> str:
    hub = rep.get("hub") or {}
    cmd = [command_prefix(), "check", _hub_spec(hub.get("draft")) or rep["checkpoint"]]
    if rep.get("target"):
        cmd += ["--target", _hub_spec(hub.get("target")) or rep["target"]]
    spec = EngineSpec.parse(rep.get("engine_spec") or default_engine())
    if str(spec) != default_engine():
        cmd += ["--engine", str(spec.with_runner(None))] + (["--runner", spec.runner] if spec.runner else [])
    if rep.get("tp", 1) > 1:
        cmd += ["--tp", str(rep["tp"])]
    return " ".join([cmd[0], *(shlex.quote(c) for c in cmd[1:] + ["--only", contract])])


def _hub_spec(fetched: dict | None) -> str | None:
    """``hf:ORG/NAME@COMMIT`` of a checkpoint read from the Hub (``contracts.hub.Fetched.to_dict``), else None."""
    return fetched["spec"] if fetched else None


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
            f"{MARK.get(by.get(c, ''), '-') + (' (known)' if c in known else ''):<14}" for c in contracts))
    return "\n".join(rows)


def _duration(rep: dict) -> str:
    """The check's time, and apart from it what it spent making environments and references once."""
    setup = rep.get("setup_s") or 0.0
    if setup < 0.5:
        return f"{rep['duration_s']:.1f}s"
    return (f"{rep['duration_s'] - setup:.1f}s checking + {setup:.0f}s making environments and references once, "
            f"kept for later runs")


def render_text(reports: list[dict]) -> str:
    out = []
    for rep in reports:
        engine = rep["engine"]
        out.append(f"{rep.get('name') or rep['checkpoint']}  ({rep['trainer_format']} checkpoint, "
                   f"target {_hub_spec((rep.get('hub') or {}).get('target')) or rep.get('target') or '-'}, engine {engine['name']} {engine['version']}, "
                   f"{_duration(rep)})")
        out.append(f"  judged on {path_label(rep)}")
        if rep.get("tp", 1) > 1:
            out.append(f"  at tensor parallelism {rep['tp']}: rank-consistency judges the drafter each of {rep['tp']} "
                       f"ranks builds; the other contracts judge one rank, which it says the ranks together equal")
        for role in ("draft", "target"):
            if (rep.get("hub") or {}).get(role):
                out.append(f"  {(rep['hub'][role]['summary'])}")
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
    out += not_judged_lines(reports)
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
            case = ET.SubElement(suite, "testcase", classname=suite.get("name", ""), name=r["contract"])
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
