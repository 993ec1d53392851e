"""The nightly run against the newest SGLang release (``tox -e nightly``, which installs it).

Writes, to ``--out``:
  matrix.md / matrix.json  every bundled trainer fixture × engine release × contract (pass / fail / warn /
                           skip, failures marked root cause or consequence): the newest SGLang release
                           (installed here), the pinned one, every other SGLang release with a recipe and every
                           vLLM release with one, each in its own environment;
  drift.md / drift.json    the newest release's EAGLE-3 contract surface (draft parameters, renames, config
                           keys read, targets with aux capture) against the committed snapshot of the pinned
                           release, fixtures/surface/sglang-<pinned>.json.
Exit 1 when a contract fails on the newest release for a fixture where it holds on the pinned release (a
newly failing contract), else 0. Drift alone is reported, not failed: a new release may move the surface
without breaking a contract, and the matrix says whether it did.

    python -m contracts.nightly [--out DIR] [--engines sglang==A,...]
    python -m contracts.nightly --write-snapshot     (refresh the pinned release's snapshot, after review)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contracts.bundled import FIXTURES, bundled_subjects, documented_engines, expected_failures

SURFACES = FIXTURES / "surface"


def snapshot_path(version: str) -> Path:
    return SURFACES / f"sglang-{version}.json"


def pinned_spec() -> str:
    return documented_engines()[0]


def engine_specs(newest: str, extra: list[str] | None) -> list[str]:
    """Newest SGLang first, then the pinned release, then every other SGLang release with a recipe and every vLLM
    release with one (or ``extra``: specs such as ``sglang==0.5.9`` or ``vllm==0.32.0``)."""
    from contracts.engines.environments import measured_releases, release_order

    if extra is None:
        extra = [*(f"sglang=={v}" for v in sorted(measured_releases("sglang"), key=release_order, reverse=True)),
                 *(f"vllm=={v}" for v in sorted(measured_releases("vllm"), key=release_order, reverse=True))]
    out = []
    for spec in [f"sglang=={newest}", pinned_spec(), *extra]:
        spec = spec if "==" in spec else f"sglang=={spec}"  # a bare version is an SGLang release
        if spec not in out:
            out.append(spec)
    return out


def newly_failing(doc: dict, newest: str) -> list[dict]:
    """Cells that fail on the newest release where the pinned release's documented verdict is not a failure."""
    pinned = expected_failures() or {}
    return [c for c in doc["cells"] if c["engine"] == newest and c["status"] == "fail"
            and (c["subject"], c["contract"]) not in pinned]


def main(argv=None) -> int:
    from contracts import matrix
    from contracts.engines import close_all, engine_for
    from contracts.engines.inprocess import installed_sglang
    from contracts.engines.sglang.surface import drift, drift_markdown

    p = argparse.ArgumentParser(prog="python -m contracts.nightly", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="nightly", help="directory for matrix.* and drift.* (default ./nightly)")
    p.add_argument("--engines", help="comma-separated releases besides the newest and the pinned one "
                                     "(default: every release with a recipe)")
    p.add_argument("--write-snapshot", action="store_true",
                   help="write the installed release's surface to fixtures/surface/ and stop")
    args = p.parse_args(argv)
    newest = installed_sglang()
    if newest is None:
        print("nightly: SGLang is not installed here (run `tox -e nightly`)", file=sys.stderr)
        return 2
    try:
        if args.write_snapshot:
            SURFACES.mkdir(parents=True, exist_ok=True)
            surface = engine_for("sglang").surface()
            snapshot_path(newest).write_text(json.dumps(surface, indent=1, sort_keys=True) + "\n")
            print(f"wrote {snapshot_path(newest)}", file=sys.stderr)
            return 0
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        extra = [e.strip() for e in args.engines.split(",") if e.strip()] if args.engines else None
        specs = engine_specs(newest, extra)
        newest_spec = f"sglang=={newest}"
        subjects = {spec: bundled_subjects(engine="sglang" if spec == newest_spec else spec) for spec in specs}
        doc = matrix.run(subjects)
        doc["newest"], doc["pinned"] = newest_spec, pinned_spec()
        doc["newly_failing"] = newly_failing(doc, newest_spec)
        (out / "matrix.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
        (out / "matrix.md").write_text(f"# Contract matrix: newest SGLang {newest}\n\n" + matrix.markdown(doc))

        pinned_version = pinned_spec().partition("==")[2]
        snapshot = json.loads(snapshot_path(pinned_version).read_text())
        surface = engine_for("sglang").surface()
        rows = drift(snapshot, surface)
        (out / "drift.json").write_text(json.dumps({"pinned": snapshot["engine"], "newest": surface["engine"],
                                                    "drift": rows}, indent=2) + "\n")
        (out / "drift.md").write_text(f"# Contract-surface drift: SGLang {newest} vs {pinned_version}\n\n"
                                      + drift_markdown(snapshot, surface, rows))
    finally:
        close_all()
    print(matrix.markdown(doc))
    print(f"drift against the {pinned_version} snapshot: {len(rows)} difference(s); wrote {out}/matrix.md, "
          f"matrix.json, drift.md, drift.json")
    if doc["newly_failing"]:
        print("newly failing on the newest release: " + "; ".join(
            f"{c['subject']} {c['contract']}: {c['summary'][:200]}" for c in doc["newly_failing"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
