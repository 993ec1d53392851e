"""The trainer-release axis of the compatibility table: every release of speculators, SpecForge, NVIDIA Model
Optimizer and NVIDIA NeMo Automodel on the package index builds a tiny draft in its own environment (``contracts.environments.trainers``:
derived from the release's metadata, made with uv), through the same builders as the bundled fixtures
(``build-tiny``), and each build is judged on a few engine releases; the table gains trainer release × engine
release.

Why: a draft is a pair of versions. speculators renamed ``midlayer.*`` to ``layers.0.*`` and back again
(speculators#332/#360); an engine pinned to one naming serves one trainer release and drops every weight of the
next. A release whose builder step cannot run is a row with the function or argument that moved (the builders
detect the API; the one line is build-tiny's), never a crash of the sweep.

Runs in the nightly (``tox -e nightly``: the trainer releases the table lacks) and in ``tox -e sweep -- trainers``;
not in the default ``tox``.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from contracts.trainer_profile import PROFILES
from contracts.builds import RECORD, read_record
from contracts.engine_spec import EngineSpec, default_engine
from contracts.environments.engines import envs_root, release_order

# The engine releases each trainer build is judged on: the pinned SGLang, the pinned vLLM (on Model Runner V2, a GPU
# deployment's default, and on V1, the CPU build's), and the last SGLang release that names the draft's layer
# `midlayer.*` (the naming speculators moved away from and back to).
ENGINES = [EngineSpec.parse(s) for s in ("sglang==0.5.23", "vllm==0.32.0", "vllm==0.32.0:v1", "sglang==0.5.9")]
TRAINERS = tuple(PROFILES)


def builds_root() -> Path:
    return envs_root() / "trainer-builds"


def build(trainer: str, version: str) -> dict:
    """The tiny draft of ``trainer==version`` (cached beside its environment): ``{"directory", "environment_s",
    "build_s", "functions_called"}``, or ``{"error": why}`` (the environment could not be made, or build-tiny
    stopped: at the function or argument that moved)."""
    from contracts.environments.trainers import TrainerBuildError, environment_for, run_build_tiny

    try:
        python = environment_for(trainer, version)
    except TrainerBuildError as e:
        return {"error": str(e).splitlines()[0][:400]}
    env = python.parent.parent
    entry = {"environment_s": json.loads((env / "build.json").read_text())["seconds"]}
    out = builds_root() / env.name
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(out.name + ".lock"), "w") as lock:  # one build per directory (xdist, the nightly)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / RECORD).is_file():
            shutil.rmtree(out, ignore_errors=True)  # what an interrupted build left
            start = time.perf_counter()
            answer = run_build_tiny(python, trainer, out)
            if "error" in answer:
                shutil.rmtree(out, ignore_errors=True)
                return {**entry, "error": answer["error"][:400]}
            (out / "build-seconds.json").write_text(json.dumps({"seconds": round(time.perf_counter() - start, 1)}))
    record = read_record(out) or {}
    seconds = out / "build-seconds.json"
    entry.update(directory=str(out), functions_called=record.get("functions_called"),
                 build_s=json.loads(seconds.read_text())["seconds"] if seconds.is_file() else None)
    return entry


def judge(builds: dict[str, dict], engines: list[EngineSpec], workers: int) -> dict[str, dict[str, dict]]:
    """release -> engine spec -> contract cells, for every build that has a directory: one pytest run, each build a
    ``--checkpoint`` (judged with its record's target, trainer and reference), one xdist worker per engine release."""
    from contracts.bundled import FIXTURES

    repo = FIXTURES.parent
    built = [(key, b["directory"]) for key, b in builds.items() if "directory" in b]
    if not built:
        return {}
    results = repo / ".trainer-sweep-results.json"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "contracts", "-p", "no:cacheprovider", "--no-header",
           f"--contracts-results={results}", *(f"--engine={e}" for e in engines)]
    for _, directory in built:
        cmd += ["--checkpoint", directory]
    if workers > 1:
        cmd += ["-n", str(workers), "--dist", "loadgroup"]
    subprocess.run(cmd, cwd=repo, check=False, stdout=2)
    records = json.loads(results.read_text()) if results.exists() else []
    results.unlink(missing_ok=True)
    by_index = {str(i): key for i, (key, _) in enumerate(built)}
    out: dict[str, dict[str, dict]] = {}
    for r in records:
        key = by_index[r["subject"].split("-", 1)[0]] if len(built) > 1 else built[0][0]
        cell = {k: r.get(k) for k in ("status", "summary", "root_cause", "follows_from") if r.get(k) is not None}
        out.setdefault(key, {}).setdefault(r["engine"], {})[r["contract"]] = cell
        if r.get("path"):  # the path each engine column judged (the same for every build)
            out.setdefault(PATHS, {})[r["engine"]] = r["path"]
    return out


PATHS = "(paths)"  # judge()'s record of the path each engine column judged, kept in doc["trainer_paths"]


def update(doc: dict, releases: list[str], engines: list[EngineSpec] = ENGINES, workers: int = 1) -> dict:
    """Build and judge each ``trainer==version`` in ``releases`` and fold them into ``doc["trainers"]``."""
    start = time.perf_counter()
    builds = {}
    for key in releases:
        trainer, _, version = key.partition("==")
        print(f"eagle3-contracts: building a tiny draft with {key}", file=sys.stderr, flush=True)
        builds[key] = build(trainer, version)
    built_s = time.perf_counter() - start
    verdicts = judge(builds, engines, workers)
    doc.setdefault("trainer_paths", {}).update(verdicts.pop(PATHS, {}))
    table = doc.setdefault("trainers", {})
    for key, b in builds.items():
        entry = {k: v for k, v in b.items() if k != "directory"}
        # the engines judged now replace their columns; the others' verdicts on the same build stay
        kept = {e: v for e, v in (table.get(key) or {}).get("engines", {}).items() if EngineSpec.parse(e) not in engines}
        entry["engines"] = {**kept, **verdicts.get(key, {})} if "error" not in entry else verdicts.get(key, {})
        entry["swept"] = time.strftime("%Y-%m-%d")
        table[key] = entry
    doc["last_trainer_sweep"] = {"releases": releases, "engines": [str(e) for e in engines], "workers": workers,
                                 "build_wall_s": round(built_s, 1), "wall_s": round(time.perf_counter() - start, 1)}
    return doc


def all_releases(trainers=TRAINERS) -> list[str]:
    from contracts.environments.trainers import releases

    return [f"{t}=={v}" for t in trainers for v in releases(t)]


def _order(key: str) -> tuple:
    trainer, _, version = key.partition("==")
    return TRAINERS.index(trainer) if trainer in TRAINERS else 9, release_order(version)


def render(doc: dict) -> list[str]:
    """The trainer release × engine release section of docs/compatibility.md."""
    from contracts.tables.cells import release_label, verdict_cell

    table = doc.get("trainers") or {}
    if not table:
        return []
    keys = sorted(table, key=_order)
    engines = list(dict.fromkeys(EngineSpec.parse(e) for k in keys for e in table[k].get("engines", {})))
    engines.sort(key=lambda s: (s.name != default_engine(), [-x for x in release_order(str(s.version))]))
    built = [k for k in keys if not table[k].get("error")]
    out = ["", "## Trainer releases × engine releases", "",
           f"Each trainer release on the package index built a tiny draft in its own environment (derived from its "
           f"metadata, made with uv) with `build-tiny`, the builders of the bundled fixtures; {len(built)} of "
           f"{len(keys)} releases built one, the rest say which step stopped them. Every build is judged with its "
           "trainer's own record (target ids, aux ids, hidden states trained on, step-0 reference). \"yes\": the "
           "release serves the build as trained; \"no\" lists the root-cause contracts that fail."]
    last = doc.get("last_trainer_sweep")
    if last:
        out += ["", f"Last trainer sweep: {len(last['releases'])} release(s), built in {last['build_wall_s']:.0f} s "
                    f"and judged on {len(last['engines'])} engine release(s), {last['wall_s']:.0f} s in all with "
                    f"{last['workers']} pytest-xdist worker(s)."]
    paths = doc.get("trainer_paths") or {}
    out += ["", "| trainer release | " + " | ".join(release_label(e, {"path": paths.get(str(e))}) for e in engines) + " | built in |",
            "|---|" + "---|" * (len(engines) + 1)]
    for key in keys:
        entry = table[key]
        label = key.replace("==", " ")
        if entry.get("error"):
            reason = entry["error"][:300].replace("|", "/")
            out.append(f"| {label} | does not build: {reason} |" + " |" * len(engines))
            continue
        seconds = f"{entry.get('environment_s', 0):.0f} s env + {entry.get('build_s') or 0:.0f} s build"
        out.append(f"| {label} | " + " | ".join(verdict_cell(entry["engines"].get(str(e))) for e in engines)
                   + f" | {seconds} |")
    changes = _transitions(table, keys, engines)
    out += ["", "### Where a trainer release changed a verdict", "",
            "Per trainer and engine release, in trainer release order over the releases that built.", ""]
    out += changes or ["(no contract changed verdict between trainer releases)"]
    return out


def _transitions(table: dict, keys: list[str], engines: list[EngineSpec]) -> list[str]:
    lines = []
    for trainer in TRAINERS:
        seq = [k for k in keys if k.startswith(trainer + "==") and not table[k].get("error")]
        for engine in engines:
            prev: dict[str, tuple[str, bool]] = {}
            for key in seq:
                for c, cell in sorted(table[key]["engines"].get(str(engine), {}).items()):
                    if cell["status"] == "error":
                        continue
                    bad = cell["status"] == "fail"
                    if c in prev and prev[c][1] != bad:
                        verb = "fails from" if bad else "holds again from"
                        words = f": {cell['summary'][:200]}" if bad else ""
                        lines.append(f"- `{c}` on {str(engine).replace('==', ' ')} {verb} {key.replace('==', ' ')} "
                                     f"(after {prev[c][0].split('==')[1]}){words}")
                    prev[c] = (key, bad)
    return lines


def new_releases(doc: dict) -> list[str]:
    """Trainer releases on the package index that the table does not hold yet."""
    held = doc.get("trainers") or {}
    return [k for k in all_releases() if k not in held]


def newly_failing(doc: dict, keys: list[str]) -> list[dict]:
    """Every (trainer release, engine, contract) that fails where the trainer's previous release that built held."""
    table = doc.get("trainers") or {}
    out = []
    for key in keys:
        trainer, _, version = key.partition("==")
        older = [k for k in table if k.startswith(trainer + "==") and not table[k].get("error")
                 and release_order(k.partition("==")[2]) < release_order(version)]
        if not older or table.get(key, {}).get("error"):
            continue
        before = table[max(older, key=lambda k: release_order(k.partition("==")[2]))]
        for engine, cells in table[key].get("engines", {}).items():
            for contract, cell in cells.items():
                was = before.get("engines", {}).get(engine, {}).get(contract)
                if cell["status"] == "fail" and was is not None and was["status"] in ("pass", "warn"):
                    out.append({"trainer": key, "engine": engine, "contract": contract, "summary": cell["summary"]})
    return out
