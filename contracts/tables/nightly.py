"""The nightly run (``tox -e nightly``): every engine release on the package index that the compatibility table
does not hold yet is judged, the table is updated, and the newest release's contract surface of each engine is
compared with the pinned one's. No human step: each new release's environment is derived from its own metadata
(``contracts.environments.recipes``), so a release whose requirements moved past the pinned environment's is judged in
its own.

Writes, to ``--out``:
  matrix.md / matrix.json  the releases judged tonight (and the pinned one, for comparison): every bundled trainer
                           draft × contract, in the table's form (``contracts.tables.compatibility``);
  newly_failing.json       every (release, draft, contract) that fails where the release before it held;
  drift.md / drift.json    each engine's newest release's EAGLE-3 contract surface (draft parameters, renames,
                           config keys read, targets with aux capture) against the committed snapshot of its pinned
                           release, fixtures/surface/<engine>-<pinned>.json (``contracts.engines.surface_drift``):
                           SGLang's newest on the index; vLLM's newest judged tonight, when one was.
and updates the table itself (``--data``, default fixtures/compatibility.json, rendered to docs/compatibility.md).
Then the trainer-release axis (``contracts.tables.trainer_compatibility``, unless ``--no-trainers``): every trainer release
the table lacks builds a tiny draft in its own environment and is judged on the trainer grid's engine releases; a
contract that fails where the trainer's previous release held is newly failing too (``newly_failing.json``).
Then the acceptance study (``contracts.tables.acceptance_study``, unless ``--no-acceptance``) on every vLLM release judged
tonight: the converged drafts and each contract's break, verdicts beside what that release's own serving loop
measures, written to ``acceptance-<release>.md`` / ``.json``; a disagreement (a root-cause failure where acceptance
held, or an all-pass where it collapsed) means the verdicts no longer predict that release.
Exit 1 when a contract newly fails or the study disagrees. Drift alone is reported, not failed: a new release may
move the surface without breaking a contract, and the table says whether it did.

    python -m contracts.tables.nightly [--out DIR] [--engines sglang==A,vllm==B,...] [-n N] [--only IDS]
    python -m contracts.tables.nightly --write-snapshot     (refresh the pinned release's snapshot, after review)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contracts.tables import compatibility, trainer_compatibility
from contracts.bundled import FIXTURES, documented_engines, expected_failures
from contracts.engine_profile import default_engine, profiles, serving_engine
from contracts.engine_spec import ENGINE_NAMES, EngineSpec, EngineSpecError

SURFACES = FIXTURES / "surface"


def snapshot_path(release: EngineSpec) -> Path:
    """The committed surface of RELEASE (``fixtures/surface/<engine>-<version>.json``)."""
    return SURFACES / f"{release.name}-{release.version}.json"


def pinned_spec() -> EngineSpec:
    return documented_engines()[0]


def newest_default() -> str | None:
    """The newest release on the package index of the engine judged in this process (offline: the one installed
    here)."""
    from contracts.engines.inprocess import installed_release
    from contracts.environments.recipes import ReleaseNotFound

    engine = profiles()[default_engine()]
    try:
        return compatibility.releases(engine)[-1]
    except ReleaseNotFound:
        return installed_release(engine)


def new_releases(doc: dict, newest: str | None) -> list[EngineSpec]:
    """Every release since EAGLE-3 on the package index that the table does not hold (the newest first)."""
    specs = compatibility.every_release()
    if newest and EngineSpec(default_engine(), newest) not in specs:
        specs.append(EngineSpec(default_engine(), newest))
    return [s for s in specs if str(s) not in doc["releases"]]


def drift_pairs(pinned_version: str, newest: str,
                judged: list[EngineSpec]) -> list[tuple[EngineSpec, EngineSpec | None]]:
    """(an engine's pinned release, the release to compare with it: None when none was judged tonight) for every
    engine: the engine judged in this process against its newest on the index; each other engine's newest release
    judged tonight (its environment is made already) against its pinned one."""
    pairs: list[tuple[EngineSpec, EngineSpec | None]] = []
    for name, p in profiles().items():
        if p.in_process:
            pairs.append((EngineSpec(name, pinned_version), EngineSpec(name, newest)))
            continue
        tonight = sorted({str(s.version) for s in judged if s.name == name}, key=compatibility.release_order)
        pairs.append((EngineSpec(name, p.pinned), EngineSpec(name, tonight[-1]) if tonight else None))
    return pairs


def _previous(doc: dict, spec: EngineSpec) -> EngineSpec | None:
    """The latest release of the same engine before ``spec``, judged on the same path, that the table holds verdicts
    for."""
    order = compatibility.release_order
    older = [o for o in (EngineSpec.parse(key) for key, e in doc["releases"].items() if e.get("cells"))
             if (o.name, o.runner) == (spec.name, spec.runner) and order(str(o.version)) < order(str(spec.version))]
    return max(older, key=lambda o: order(str(o.version)), default=None)


def newly_failing_at_tp(doc: dict, specs: list[EngineSpec], tp: int) -> list[dict]:
    """rank-consistency failing at TP on a release judged tonight where fixtures/expected.json documents no such
    failure for it (or, for a release it does not document, for the pinned release)."""
    from contracts.refusals import REFUSED

    rows = (doc.get("tensor_parallel") or {}).get(str(tp), {}).get("releases", {})
    out = []
    for spec in specs:
        documented = expected_failures(spec, tp)
        known = documented if documented is not None else (expected_failures(None, tp) or {})
        for subject, cells in (rows.get(str(spec)) or {}).get("cells", {}).items():
            cell = cells.get("rank-consistency") or {}
            one_rank = (doc["releases"].get(str(spec)) or {}).get("cells", {}).get(subject, {})
            if cell.get("summary", "").startswith(REFUSED) and any(c["status"] == "fail" for c in one_rank.values()):
                continue  # the release refuses this draft on one rank too: that row reports it
            if cell.get("status") in ("fail", "error") and (subject, "rank-consistency") not in known:
                out.append({"engine": f"{spec} --tp {tp}", "subject": subject, "contract": "rank-consistency",
                            "before": None, "summary": cell.get("summary", "")[:300]})
    return out


def newly_failing(doc: dict, specs: list[EngineSpec]) -> list[dict]:
    """(release, draft, contract) failing where the release before it held (for an engine's first release: where the
    pinned release's documented verdict is not a failure). A refusal to build the draft is one finding whichever
    contract reported it (``config``, or the first judged when ``--only`` leaves config out)."""
    from contracts.refusals import REFUSED

    out = []
    for spec in specs:
        entry = doc["releases"].get(str(spec)) or {}
        before = _previous(doc, spec)
        documented = expected_failures(spec)
        pinned = documented if documented is not None else (expected_failures() or {})
        for subject, cells in entry.get("cells", {}).items():
            for contract, cell in cells.items():
                if cell["status"] not in ("fail", "error"):
                    continue
                if before is not None:
                    old = doc["releases"][str(before)]["cells"].get(subject, {}).get(contract)
                    if old is None or old["status"] in ("fail", "error"):
                        continue
                elif (subject, contract) in pinned or (
                        cell.get("summary", "").startswith(REFUSED) and (subject, "config") in pinned):
                    continue
                out.append({"engine": str(spec), "subject": subject, "contract": contract,
                            "before": str(before) if before else None,
                            "summary": cell.get("summary", "")[:300]})
    return out


NIGHTLY_TP = 2  # the tensor-parallel size each new SGLang and vLLM release is judged at, in two gloo ranks


def main(argv=None) -> int:
    from contracts.engines import close_all, engine_for
    from contracts.engines.surface_drift import drift, drift_markdown

    p = argparse.ArgumentParser(prog="python -m contracts.tables.nightly", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="nightly", help="directory for matrix.*, newly_failing.json and drift.* "
                                                     "(default ./nightly)")
    p.add_argument("--engines", help="comma-separated releases to judge (default: every release the table lacks)")
    p.add_argument("--data", default=str(compatibility.DATA), help="the table's data (default %(default)s)")
    p.add_argument("-n", type=int, default=1, help="pytest-xdist workers for the sweep (one release each)")
    p.add_argument("--only", help="comma-separated contract ids (default: all)")
    p.add_argument("--no-trainers", action="store_true", help="skip the trainer releases new to the table")
    p.add_argument("--no-tp", action="store_true",
                   help=f"skip rank-consistency at TP={NIGHTLY_TP} on the engine releases judged tonight")
    p.add_argument("--no-acceptance", action="store_true",
                   help="skip the acceptance study on the vLLM releases judged tonight")
    p.add_argument("--write-snapshot", action="store_true",
                   help="write the surfaces of the newest release of the engine judged in this process and of every "
                        "other engine's pinned release to fixtures/surface/ and stop")
    args = p.parse_args(argv)
    newest = newest_default()
    if newest is None:
        print(f"nightly: the package index lists no {ENGINE_NAMES[default_engine()]} release and none is installed "
              "here", file=sys.stderr)
        return 2
    try:
        if args.write_snapshot:
            SURFACES.mkdir(parents=True, exist_ok=True)
            for engine, engine_profile in profiles().items():
                release = EngineSpec(engine, newest if engine_profile.in_process else engine_profile.pinned)
                surface = engine_for(release).surface()
                snapshot_path(release).write_text(json.dumps(surface, indent=1, sort_keys=True) + "\n")
                print(f"wrote {snapshot_path(release)}", file=sys.stderr)
            return 0
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        data = Path(args.data)
        doc = compatibility.load(data)
        try:
            specs = [EngineSpec.parse(e) for e in args.engines.split(",") if e.strip()] if args.engines else \
                new_releases(doc, newest)
        except EngineSpecError as e:
            p.error(str(e))
        only = [c.strip() for c in args.only.split(",")] if args.only else None
        if specs:
            doc = compatibility.update(doc, specs, args.n, only)
            if not args.no_tp and (not only or "rank-consistency" in only):  # each new release at TP=2 too
                doc = compatibility.sweep_tensor_parallel(doc, specs, NIGHTLY_TP, args.n)
            compatibility.save(doc, data)
            if data.resolve() == compatibility.DATA.resolve():
                compatibility.DOC.write_text(compatibility.render(doc))
        trainer_keys = [] if args.no_trainers or args.engines else trainer_compatibility.new_releases(doc)
        if trainer_keys:
            doc = trainer_compatibility.update(doc, trainer_keys, trainer_compatibility.ENGINES, args.n)
            compatibility.save(doc, data)
            if data.resolve() == compatibility.DATA.resolve():
                compatibility.DOC.write_text(compatibility.render(doc))
        judged = [s for s in compatibility.with_paths(specs) if str(s) in doc["releases"]]
        tonight = {"releases": {str(s): doc["releases"][str(s)] for s in [*judged, pinned_spec()]
                                if str(s) in doc["releases"]},
                   "last_sweep": doc.get("last_sweep"),
                   "trainers": {k: doc["trainers"][k] for k in trainer_keys if k in doc.get("trainers", {})},
                   "last_trainer_sweep": doc.get("last_trainer_sweep") if trainer_keys else None}
        failing = newly_failing(doc, judged) + newly_failing_at_tp(doc, judged, NIGHTLY_TP) \
            + trainer_compatibility.newly_failing(doc, trainer_keys)
        (out / "matrix.json").write_text(json.dumps(tonight, indent=1, sort_keys=True) + "\n")
        (out / "matrix.md").write_text(compatibility.render(tonight))
        (out / "newly_failing.json").write_text(json.dumps(failing, indent=1) + "\n")

        pinned_version = str(pinned_spec().version)
        reports, rows, sections = {}, [], []
        for pinned_release, newest_release in drift_pairs(pinned_version, newest, judged):
            engine = pinned_release.name
            if newest_release is None:
                sections.append(f"## {ENGINE_NAMES[engine]}\n\nNo {ENGINE_NAMES[engine]} release was judged tonight: "
                                "no drift to report.\n")
                continue
            if not snapshot_path(pinned_release).is_file():
                sections.append(f"## {ENGINE_NAMES[engine]}\n\nNo snapshot of {pinned_release.label}"
                                f"'s surface in {SURFACES.name}/ to compare with (`--write-snapshot` writes it).\n")
                continue
            snapshot = json.loads(snapshot_path(pinned_release).read_text())
            surface = engine_for(newest_release).surface()  # its own environment unless pinned here
            found = drift(snapshot, surface)
            rows += [{"engine": engine, **r} for r in found]
            reports[engine] = {"pinned": snapshot["engine"], "newest": surface["engine"], "drift": found}
            sections.append(f"## {ENGINE_NAMES[engine]} {newest_release.version} vs {pinned_release.version}\n\n"
                            + drift_markdown(snapshot, surface, found))
        default = reports.get(default_engine(), {})
        (out / "drift.json").write_text(json.dumps({"pinned": default.get("pinned"), "newest": default.get("newest"),
                                                    "drift": rows, "engines": reports}, indent=2) + "\n")
        (out / "drift.md").write_text("# Contract-surface drift\n\n" + "\n".join(sections))
        disagreements = [] if args.no_acceptance else acceptance_report(out, judged)
    finally:
        close_all()
    print(f"judged {len(judged)} engine release(s) and {len(trainer_keys)} trainer release(s) new to the table; drift against the {pinned_version} snapshot: "
          f"{len(rows)} difference(s); wrote {out}/matrix.md, matrix.json, newly_failing.json, drift.md, drift.json")
    for line in disagreements:
        print(f"acceptance study: {line}", file=sys.stderr)
    if failing:
        print("newly failing: " + "; ".join(f"{c['engine']} {c.get('subject') or c['trainer']} {c['contract']}: "
                                            f"{c['summary'][:200]}"
                                            for c in failing), file=sys.stderr)
        return 1
    return 1 if disagreements else 0


def acceptance_report(out: Path, specs: list[EngineSpec], **selection) -> list[str]:
    """The acceptance study on each vLLM release among SPECS (once per release, whatever paths were judged), written
    to OUT/acceptance-<release>.md and .json; returns each disagreement as "release: draft / break: what"
    (``selection``: the study's ``drafts`` / ``breaks``, to run part of it)."""
    from contracts.tables import acceptance_study
    releases = dict.fromkeys(s.release() for s in specs if s.name == serving_engine())
    found = []
    for release in releases:
        doc = acceptance_study.study(release, **selection)
        name = str(release).replace("==", "-")
        (out / f"acceptance-{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / f"acceptance-{name}.md").write_text(f"# Acceptance study: {release}\n\n"
                                                   + acceptance_study.render_markdown(doc))
        found += [f"{release}: {d}" for d in doc["agreement"]["disagreements"]]
    return found


if __name__ == "__main__":
    sys.exit(main())
