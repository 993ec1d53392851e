"""The compatibility table since EAGLE-3: every bundled trainer draft × every engine release × contract, with
"serves it as trained", kept in docs/compatibility.md (rendered) and fixtures/compatibility.json (the data the
nightly extends).

The sweep is pytest's: ``pytest -m contracts --engine sglang==A --engine sglang==B ... -n N --dist loadgroup``
(one xdist worker per release, each in the environment derived from that release's own metadata,
``contracts.environments.engines``), its results gathered by the plugin (``--contracts-results``). A release
whose environment cannot be made, or whose EAGLE-3 path cannot be driven on a CPU, is a row with the reason.
A post release whose EAGLE-3 code (the files of its draft, worker, model runner, loader, configs and the target
classes the drafts use) is byte-identical to its base release's shares that row, and says so.

    python -m contracts.tables.compatibility sweep [--engines 'sglang==0.4.*',vllm==B | --all] [--new] [-n N] [--data F]
    python -m contracts.tables.compatibility merge PART.json ...     (a CI matrix job per release group, then one merge)
    python -m contracts.tables.compatibility render
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from contracts.bundled import FIXTURES
from contracts.engine_profile import EngineProfile, profiles
from contracts.engine_spec import ENGINES, EngineSpec
from contracts.tables.cells import release_label, verdict_cell
from contracts.tables.trainer_compatibility import ENGINES as TRAINER_ENGINES

REPO = FIXTURES.parent
DATA = FIXTURES / "compatibility.json"
DOC = REPO / "docs" / "compatibility.md"
def release_order(version: str) -> tuple:
    from contracts.environments.engines import release_order as order

    return order(version.partition(":")[0])  # a version, or a version:runner column key


def with_paths(specs: list[EngineSpec]) -> list[EngineSpec]:
    """SPECS with, after each release named without a path, that release on the other paths its engine's profile
    has the table judge (``table_paths``: vLLM's V1 beside the default runner), a row each, labelled with the path
    it judged."""
    out = []
    for spec in specs:
        out.append(spec)
        if spec.runner is None:
            out += [spec.with_runner(r) for r in spec.profile.table_paths]
    return list(dict.fromkeys(out))


def releases(engine: EngineProfile) -> list[str]:
    """The engine's releases on the package index since its first EAGLE-3 release (its profile's ``first_release``),
    oldest first; with a GPU wheel beside the CPU build (vLLM), the GPU wheel's newer than the newest CPU build
    (judged from the wheel's Python: ``recipes.derive_gpu_wheel``)."""
    from contracts.environments.recipes import distribution_versions, index_versions

    first = release_order(engine.first_release)
    gpu_wheel = engine.install.gpu_wheel
    final = [v for v in index_versions(engine) if not re.search(r"[a-z]", v.replace(".post", ""))]
    if gpu_wheel and final:
        newest = max(release_order(v) for v in final)
        final += [v for v in distribution_versions(gpu_wheel) if not re.search(r"[a-z]", v)
                  and release_order(v) > newest]
    return sorted((v for v in final if release_order(v) >= first), key=release_order)


def eagle3_fingerprint(release: EngineSpec) -> str:
    """sha256 over the EAGLE-3 files of a release's wheel (names and bytes; its profile's ``eagle3_files``)."""
    from contracts.environments.recipes import release_wheel

    files = re.compile(release.profile.eagle3_files or "$^")  # (an engine that names none: no file)
    digest = hashlib.sha256()
    with zipfile.ZipFile(release_wheel(release)) as z:
        for name in sorted(n for n in z.namelist() if files.match(n)):
            digest.update(name.encode() + b"\0" + z.read(name))
    return digest.hexdigest()[:16]


def shared_rows(engine: EngineProfile, versions: list[str]) -> dict[str, str]:
    """Post release -> the base release whose row it shares (identical EAGLE-3 files)."""
    out = {}
    for v in versions:
        if ".post" in v:
            base = v.split(".post")[0]
            if base in versions and \
                    eagle3_fingerprint(EngineSpec(engine.name, v)) == eagle3_fingerprint(EngineSpec(engine.name, base)):
                out[v] = base
    return out


def load(path: Path = DATA) -> dict:
    return json.loads(Path(path).read_text()) if Path(path).exists() else {"releases": {}}


def save(doc: dict, path: Path = DATA) -> None:
    Path(path).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def update(doc: dict, specs: list[EngineSpec], workers: int = 1, only: list[str] | None = None) -> dict:
    """Judge ``specs`` (each vLLM release on both runners) and fold them into the table: post releases with their base
    release's EAGLE-3 code share its row (when the base is judged too, or already in the table), the rest are
    swept."""
    specs = with_paths(specs)
    rows = {EngineSpec.parse(key): entry for key, entry in doc["releases"].items()}
    shared: set[EngineSpec] = set()
    for engine, engine_profile in profiles().items():
        if not engine_profile.eagle3_files:
            continue
        versions = [str(s.version) for s in specs if s.name == engine]
        known = [str(s.version) for s, entry in rows.items() if s.name == engine and entry.get("cells")]
        for post, base in shared_rows(engine_profile, sorted(set(versions) | set(known), key=release_order)).items():
            if post in versions:
                doc["releases"][str(EngineSpec(engine, post))] = {"same_as": str(EngineSpec(engine, base))}
                shared.add(EngineSpec(engine, post))
    todo = [s for s in specs if s not in shared]
    return sweep(todo, workers, doc, only) if todo else doc


def sweep(specs: list[EngineSpec], workers: int, doc: dict, only: list[str] | None = None, tp: int = 1) -> dict:
    """Run every bundled draft × contract under each engine spec (pytest, one xdist worker per release) and fold
    the results into ``doc``; at TP > 1, rank-consistency alone, into its section (``tensor_parallel``)."""
    from contracts.environments.engines import build_report, environment_for, EnvironmentBuildError
    from contracts.engines.inprocess import judged_in_process

    results = REPO / ".sweep-results.json"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "contracts", "-p", "no:cacheprovider", "--no-header",
           f"--contracts-results={results}", *(f"--engine={s}" for s in specs)]
    if only:
        cmd.append(f"--contracts-only={','.join(only)}")
    if tp > 1:
        cmd.append(f"--tp={tp}")
    if workers > 1:
        cmd += ["-n", str(workers), "--dist", "loadgroup"]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=False, stdout=2)  # pytest's progress on stderr (fd 2): stdout is the caller's
    wall = time.perf_counter() - start
    records = json.loads(results.read_text()) if results.exists() else []
    results.unlink(missing_ok=True)
    for spec in specs:
        rows = [r for r in records if r["engine"] == str(spec)]
        entry: dict = {"cells": {}, "swept": time.strftime("%Y-%m-%d")}
        try:
            if not judged_in_process(spec):  # (the in-process release has no environment)
                entry["build"] = build_report(environment_for(spec.release()))  # cached: made by the sweep
        except EnvironmentBuildError as e:
            entry["error"] = str(e)
        path = next((r["path"] for r in rows if r.get("path")), None)
        if path:  # the path judged, and whether a GPU deployment of the release takes it by default
            entry["path"] = path
        for r in rows:
            entry["cells"].setdefault(r["subject"], {})[r["contract"]] = {
                k: r.get(k) for k in ("status", "summary", "root_cause", "follows_from") if r.get(k) is not None}
        stopped = (entry.get("build") or {}).get("probe", {}).get("stopped")
        if rows and all(r["status"] == "error" for r in rows) and "error" not in entry:
            entry["error"] = stopped or rows[0]["summary"]
        section(doc, tp)[str(spec)] = entry
    figures = {"engines": [str(s) for s in specs], "workers": workers, "wall_s": round(wall, 1)}
    if tp > 1:
        doc["tensor_parallel"][str(tp)]["last_sweep"] = figures
        return doc
    return record_sweep(doc, figures)


def section(doc: dict, tp: int = 1) -> dict:
    """The rows of the table at tensor parallelism TP: the releases' (one rank), or the ``tensor_parallel`` section's."""
    if tp == 1:
        return doc["releases"]
    return doc.setdefault("tensor_parallel", {}).setdefault(str(tp), {}).setdefault("releases", {})



def sweep_tensor_parallel(doc: dict, specs: list[EngineSpec], tp: int, workers: int = 1) -> dict:
    """rank-consistency on every bundled draft at TP ranks under each release of an engine with ranks."""
    specs = [s for s in with_paths(specs) if not profiles()[s.name].no_ranks]  # (engines whose ranks build drafters)
    return sweep(specs, workers, doc, ["rank-consistency"], tp) if specs else doc


def _refused_on_one_rank(doc: dict, spec: EngineSpec, subject: str, entry: dict) -> bool:
    """The ranks could not build SUBJECT on SPEC, and one rank fails it too: the one-rank row's finding, not the
    ranks'."""
    from contracts.refusals import REFUSED

    cell = (entry.get("cells", {}).get(subject) or {}).get("rank-consistency") or {}
    one_rank = (doc["releases"].get(str(spec)) or {}).get("cells", {}).get(subject, {})
    return cell.get("summary", "").startswith(REFUSED) and any(c["status"] == "fail" for c in one_rank.values())


def render_tensor_parallel(doc: dict, subjects: list[str]) -> list[str]:
    out = []
    for tp, part in sorted((doc.get("tensor_parallel") or {}).items(), key=lambda kv: int(kv[0])):
        rows = {EngineSpec.parse(key): entry for key, entry in part.get("releases", {}).items()}
        last = part.get("last_sweep") or {}
        out += ["", f"## Tensor parallelism {tp}: does every rank build the drafter one rank builds", "",
                f"`rank-consistency` at TP={tp} (`python -m contracts.tables.compatibility tp --tp {tp}`; the nightly "
                "runs it for new releases): the release's own wiring in each of the ranks, run as gloo processes on a "
                "CPU; the shards each rank serves, gathered in rank order, against the drafter one rank builds. "
                "Releases whose TP code could not be driven on a CPU say why. llama.cpp and OpenVINO GenAI build one "
                "drafter in one process (no rows)."
                + (f" Last swept: {len(last.get('engines', []))} release path(s) in {last.get('wall_s', 0):.0f} s."
                   if last else ""), "",
                "| release | " + " | ".join(subjects) + " |", "|---|" + "---|" * len(subjects)]
        for spec in sorted(rows, key=_order):
            entry = rows[spec]
            cells = [(c.get("rank-consistency") or {}) for c in entry.get("cells", {}).values()]
            skipped = {c.get("summary") for c in cells} if cells and all(c.get("status") == "skip" for c in cells) \
                else set()
            if entry.get("error") or len(skipped) == 1:
                reason = (entry.get("error") or skipped.pop() or "")[:300].replace("|", "/")
                out.append(f"| {release_label(spec, entry)} | not judged: {reason} |" + " |" * (len(subjects) - 1))
                continue
            out.append(f"| {release_label(spec, entry)} | " + " | ".join(
                "refused" if _refused_on_one_rank(doc, spec, s, entry) else
                _cell((entry.get("cells", {}).get(s) or {}).get("rank-consistency")) for s in subjects) + " |")
        failing = [(spec, s, c["rank-consistency"]) for spec, entry in sorted(rows.items(), key=lambda kv: _order(kv[0]))
                   for s, c in entry.get("cells", {}).items()
                   if (c.get("rank-consistency") or {}).get("status") == "fail"
                   and not _refused_on_one_rank(doc, spec, s, entry)]
        out += ["", "\"refused\": the release cannot build that draft on one rank either (its row above says why).", ""]
        if failing:
            out += ["Failures, in the engine's words:", ""]
            out += [f"- {release_label(spec, rows[spec])}, {s}: {' '.join(c['summary'].split())[:400]}"
                    for spec, s, c in failing]
    return out


def record_sweep(doc: dict, sweep: dict) -> dict:
    """Keep SWEEP's figures: as the full sweep when it judged every row the table holds (a post release sharing its
    base's row aside), else as one more re-sweep since the full one (each is listed with its own figures)."""
    rows = {s for s, e in doc["releases"].items() if not e.get("same_as")}
    if rows <= set(sweep["engines"]):
        doc["full_sweep"], doc["re_sweeps"] = sweep, []
    else:
        doc["re_sweeps"] = [*doc.get("re_sweeps", []), {**sweep, "swept": time.strftime("%Y-%m-%d")}]
    doc["last_sweep"] = sweep
    return doc


def serves(cells: dict) -> bool:
    return bool(cells) and all(c["status"] not in ("fail", "error") for c in cells.values())


def _cell(c: dict | None) -> str:
    if c is None:
        return "-"
    s = {"pass": "pass", "fail": "FAIL", "warn": "warn", "skip": "skip", "error": "error"}[c["status"]]
    if c["status"] == "fail" and c.get("follows_from"):
        s += " ←"
    return s


def _judged_counts(judged: list[EngineSpec]) -> str:
    """``36 SGLang, 22 vLLM and 1 llama.cpp``: the releases judged, per engine."""
    counts = [f"{len({s.release() for s in judged if s.name == name})} {p.label}" for name, p in profiles().items()]
    return ", ".join(counts[:-1]) + f" and {counts[-1]}" if len(counts) > 1 else "".join(counts)


def _order(spec: EngineSpec) -> tuple:
    return ENGINES.index(spec.name), release_order(str(spec.version)), spec.runner or ""


def every_release() -> list[EngineSpec]:
    """Every engine's releases since its first EAGLE-3 release (SGLang, vLLM, llama.cpp)."""
    return [EngineSpec(name, v) for name, engine in profiles().items() for v in releases(engine)]


def _duplicate(doc: dict, spec: EngineSpec) -> bool:
    """A release's other-path row that adds nothing: it could not be judged (the default row says why) or it judged
    the default path itself."""
    entry = doc["releases"][str(spec)]
    return spec.runner is not None and (bool(entry.get("error")) or not entry.get("cells")
                                   or (entry.get("path") or {}).get("is_default", False))


def render(doc: dict) -> str:
    from contracts.checks import all_contracts

    contracts = [c for c, declared in all_contracts().items() if declared.applies is None]  # (one rank's contracts)
    rows = {EngineSpec.parse(key): entry for key, entry in doc["releases"].items()}
    specs = sorted((s for s in rows if not _duplicate(doc, s)), key=_order)
    subjects = sorted({s for e in rows.values() for s in e.get("cells", {})})
    judged = [s for s in specs if rows[s].get("cells") and not rows[s].get("error")]
    shared = [s for s in specs if rows[s].get("same_as")]
    out = ["# Compatibility since EAGLE-3: bundled drafts × engine releases × contracts", "",
           "Generated by `tox -e nightly` (`python -m contracts.tables.compatibility`); every cell is the verdict of the "
           "release's own code on a CPU, in an environment derived from the release's own metadata "
           "(`contracts/environments/recipes.py`). Do not edit by hand.", "",
           f"{len({s.release() for s in specs})} releases: {_judged_counts(judged)} releases judged; {len(shared)} post "
           "releases share their base release's row because their EAGLE-3 code (the draft, worker, model runner, "
           "loader, config and target-class files: its profile's `eagle3_files`) is byte-identical to it; the rest say why they were "
           "not judged (the import or error that stopped them).", "",
           "Each verdict is about the path a GPU deployment of the release takes by default, found from the "
           "release's own code: SGLang's speculative worker (`SpeculativeAlgorithm.create_worker` with the release's "
           "own server arguments), vLLM's Model Runner V2 (`VllmConfig.use_v2_model_runner` with Triton present); "
           "each vLLM release has a second row for Model Runner V1, the CPU build's runner (`--runner v1`). "
           "llama.cpp (its `xllamacpp` wheels) has one path: the release's converter (from the tree the wheel was built "
           "from), its GGUF loader and its `draft-eagle3` speculative loop's graph."]
    if doc.get("caveats"):  # verdicts known to be the suite's own defect, until it is fixed and the rows re-swept
        out += ["", "**Known defects of this table** (the suite's, not the engines'):", ""]
        out += [f"- {c}" for c in doc["caveats"]]
    def sweep_line(label, last):
        n, paths = len({EngineSpec.parse(e).release() for e in last["engines"]}), len(last["engines"])
        return (f"{label}: {n} release(s){f' ({paths} release paths)' if paths != n else ''} in {last['wall_s']:.0f} s "
                f"with {last['workers']} pytest-xdist worker(s)" + (f" over {last['jobs']} jobs" if last.get("jobs") else ""))

    if doc.get("full_sweep"):
        out += ["", sweep_line("Last full sweep", doc["full_sweep"]) + "."]
        for again in doc.get("re_sweeps", []):
            out.append(sweep_line(f"Re-swept{' on ' + again['swept'] if again.get('swept') else ' since'}", again)
                       + f" ({', '.join(again['engines'])}).")
    elif doc.get("last_sweep"):
        out += ["", sweep_line("Last sweep", doc["last_sweep"]) + "."]
    out += ["", "## Which releases serve each draft as trained", "",
            "\"no\" lists the contracts that fail as root causes (the per-draft tables below have every verdict).", "",
            "| release | " + " | ".join(subjects) + " |", "|---|" + "---|" * len(subjects)]
    for spec in specs:
        entry = rows[spec]
        if entry.get("same_as"):
            out.append(f"| {release_label(spec, entry)} | same EAGLE-3 code as {entry['same_as'].split('==')[1]} |"
                       + " |" * (len(subjects) - 1))
        elif entry.get("error"):
            reason = entry["error"][:300].replace("|", "/")
            out.append(f"| {release_label(spec, entry)} | not judged: {reason} |" + " |" * (len(subjects) - 1))
        else:
            out.append(f"| {release_label(spec, entry)} | "
                       + " | ".join(verdict_cell(entry.get("cells", {}).get(s)) for s in subjects) + " |")
    out += render_tensor_parallel(doc, subjects)
    out += ["", "## Where each break began and ended", "",
            "Per engine, in release order over the releases judged (a release that could not be judged is "
            "skipped, not counted as a change).", ""]
    out += _transitions(doc, judged, subjects, contracts) or ["(no contract changed verdict between releases)"]
    from contracts.tables.trainer_compatibility import render as render_trainers

    out += render_trainers(doc)
    for s in subjects:
        out += ["", f"## {s}", "", "| release | " + " | ".join(c for c in contracts) + " |",
                "|---|" + "---|" * len(contracts)]
        for spec in judged:
            cells = rows[spec].get("cells", {}).get(s)
            if cells:
                out.append(f"| {release_label(spec, rows[spec])} | "
                           + " | ".join(_cell(cells.get(c)) for c in contracts) + " |")
    return "\n".join(out) + "\n"


def _transitions(doc: dict, judged: list[EngineSpec], subjects: list[str], contracts) -> list[str]:
    """Where a contract's verdict turned to or from a failure between judged releases of one engine, with the drafts
    it turned for (grouped) and the engine's own words on the first of them."""
    changes: dict[tuple, list] = {}
    for engine, runner in {(s.name, s.runner) for s in judged}:  # one sequence per engine and path
        seq = sorted((s for s in judged if (s.name, s.runner) == (engine, runner)), key=_order)
        for c in contracts:
            for subject in subjects:
                prev = None
                for spec in seq:
                    cell = doc["releases"][str(spec)]["cells"].get(subject, {}).get(c)
                    if cell is None or cell["status"] in ("error", "skip"):  # not judged there: no verdict to compare
                        continue
                    bad = cell["status"] == "fail"
                    if prev is not None and bad != prev[1]:
                        changes.setdefault((engine, c, spec, prev[0], bad), []).append((subject, cell))
                    prev = (spec, bad)
    lines = []
    for (_engine, c, spec, before, bad), hits in sorted(changes.items(), key=lambda kv: (_order(kv[0][2]), kv[0][1])):
        verb = "fails from" if bad else "holds again from"
        drafts = ", ".join(subject for subject, _ in hits)
        words = f": {hits[0][1]['summary'][:240]}" if bad else ""
        lines.append(f"- `{c}` {verb} {release_label(spec, doc['releases'][str(spec)])} (after {before.version}) for "
                     f"{drafts}{words}")
    return lines


def expand(patterns: list[str]) -> list[EngineSpec]:
    """``--engines`` as given (``sglang==0.5.1*``, ``vllm==0.32.0``), parsed here, shell-style version patterns
    expanded against the releases since EAGLE-3 on the package index; a plain spec stays as it is (the environment
    builder judges whether it exists)."""
    out = []
    for pattern in patterns:
        spec = EngineSpec.parse(pattern)
        version = spec.version or ""
        if any(ch in version for ch in "*?["):
            out += [EngineSpec(spec.name, v) for v in releases(spec.profile) if fnmatch.fnmatchcase(v, version)]
        else:
            out.append(spec)
    return list(dict.fromkeys(out))


def merge(doc: dict, parts: list[dict]) -> dict:
    """Fold the tables of several sweeps (one per CI matrix job) into ``doc``; the last sweep's figures are summed."""
    engines, wall, workers = [], 0.0, 0
    for part in parts:
        doc["releases"].update(part.get("releases", {}))
        last = part.get("last_sweep") or {}
        engines += last.get("engines", [])
        wall = max(wall, last.get("wall_s", 0.0))
        workers += last.get("workers", 0)
    if engines:
        record_sweep(doc, {"engines": engines, "workers": workers, "wall_s": wall, "jobs": len(parts)})
    return doc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m contracts.tables.compatibility", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sweep", help="judge the bundled drafts under releases and update the table")
    s.add_argument("--engines", help="comma-separated specs (default with --all: every release since EAGLE-3)")
    s.add_argument("--all", action="store_true", help="every release of each engine since its first EAGLE-3 release ("
                   + ", ".join(f"{p.package} since {p.first_release}" for p in profiles().values()) + ")")
    s.add_argument("--new", action="store_true", help="only the releases the table does not hold yet")
    s.add_argument("-n", type=int, default=1, help="pytest-xdist workers (one release per worker at a time)")
    s.add_argument("--data", default=str(DATA), help="the table's data to update (default %(default)s)")
    m = sub.add_parser("merge", help="fold the data files of several sweeps into the table")
    m.add_argument("parts", nargs="+", help="compatibility JSON files written by `sweep --data`")
    sub.add_parser("render", help="write docs/compatibility.md from fixtures/compatibility.json")
    tps = sub.add_parser("tp", help="rank-consistency on every bundled draft at a tensor-parallel size, per release")
    tps.add_argument("--tp", type=int, default=2, help="the tensor-parallel size (default %(default)s)")
    tps.add_argument("--engines", required=True, help="comma-separated specs (patterns as for sweep)")
    tps.add_argument("-n", type=int, default=1, help="pytest-xdist workers (one release per worker at a time)")
    tps.add_argument("--data", default=str(DATA), help="the table's data to update (default %(default)s)")
    t = sub.add_parser("trainers", help="build a tiny draft with each trainer release (its own environment) and "
                                        "judge it on engine releases: the trainer release x engine release grid")
    t.add_argument("--releases", help="comma-separated trainer specs (speculators==0.8.1; patterns as for engines); "
                                      "default every release of every trainer since its EAGLE-3 draft")
    t.add_argument("--engines", default=",".join(map(str, TRAINER_ENGINES)), help="engine specs (default %(default)s)")
    t.add_argument("--new", action="store_true", help="only the trainer releases the table does not hold yet")
    t.add_argument("-n", type=int, default=1, help="pytest-xdist workers for the judging (one engine release each)")
    t.add_argument("--data", default=str(DATA), help="the table's data to update (default %(default)s)")
    args = p.parse_args(argv)
    data = Path(getattr(args, "data", DATA))
    doc = load(data)
    if args.command == "sweep":
        if args.engines:
            specs = expand([e.strip() for e in args.engines.split(",") if e.strip()])
        elif args.all or args.new:
            specs = every_release()
        else:
            p.error("sweep needs --engines, --all or --new")
        if args.new:
            specs = [s for s in specs if str(s) not in doc["releases"]]
        doc = update(doc, specs, args.n)
        save(doc, data)
    elif args.command == "trainers":
        from contracts.tables import trainer_compatibility

        everything = trainer_compatibility.all_releases()
        wanted = [r.strip() for r in (args.releases or "").split(",") if r.strip()]
        chosen = [k for k in everything if any(fnmatch.fnmatchcase(k, w) for w in wanted)] if wanted else everything
        chosen += [w for w in wanted if not any(ch in w for ch in "*?[") and w not in chosen]
        if args.new:
            chosen = [k for k in chosen if k not in doc.get("trainers", {})]
        engines = expand([e.strip() for e in args.engines.split(",") if e.strip()])
        doc = trainer_compatibility.update(doc, chosen, engines, args.n)
        save(doc, data)
    elif args.command == "tp":
        doc = sweep_tensor_parallel(doc, expand([e.strip() for e in args.engines.split(",") if e.strip()]), args.tp,
                                    args.n)
        save(doc, data)
    elif args.command == "merge":
        doc = merge(doc, [load(Path(part)) for part in args.parts])
        save(doc, data)
    if data.resolve() == DATA.resolve():
        DOC.write_text(render(doc))
        print(f"wrote {DOC} and {DATA}", file=sys.stderr)
    else:
        print(f"wrote {data}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
