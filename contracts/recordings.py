"""The bundled examples' recorded engine answers (``fixtures/observed/<engine release>/<example>.json``): made by a
live run of the engine, replayed by the fast tier so every contract's check logic is judged on real observations in
seconds, with no engine environment (``contracts.engines.recorded``).

    python -m contracts.recordings [--engine SPEC]     (re-record one engine path; the engine tier says when that is due)
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts.engine_spec import EngineSpec
from contracts.engines.recorded import Recording, Replayed
from contracts.manifest import FIXTURES

OBSERVED = FIXTURES / "observed"


def recordings_dir(release: EngineSpec) -> Path:
    """Where the recordings of engine RELEASE (``sglang==0.5.23``, with its runner where one was asked for) are
    kept."""
    return OBSERVED / str(release).replace("==", "-").replace(":", "-")


def placeholders(subject) -> dict[str, Path | None]:
    """The directories a subject's answers may name, by the placeholder a recording keeps instead."""
    served = subject.engine_dir if subject.engine_dir != subject.checkpoint_path else None
    return {"{repo}": FIXTURES.parent, "{served}": served}


def record_subject(subject) -> dict:
    """Run every contract on SUBJECT through a ``Recording`` of its engine: {"subject", "engine", "answers",
    "verdicts"} (the verdicts the live run gave, which a replay must give again)."""
    recording = Recording(subject.adapter, placeholders(subject))
    subject.__dict__["adapter"] = recording
    results = subject.run()
    return {"subject": subject.name, "engine": str(recording.spec), "answers": recording.answers,
            "verdicts": {r.contract: r.status for r in results}}


def replay_subject(subject, recorded: dict):
    """SUBJECT answered by RECORDED's engine answers instead of an engine (the same subject the recording was made
    of: its checkpoint, target and reference are read as usual)."""
    subject.__dict__["adapter"] = Replayed(EngineSpec.parse(recorded["engine"]), recorded["answers"], placeholders(subject))
    return subject


def load_recordings(release: EngineSpec) -> dict[str, dict]:
    """Every recording of RELEASE, by example name."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(recordings_dir(release).glob("*.json"))}


# the bundled example whose drafter at TP=2 is recorded (``fixtures/observed/ranks``), on the pinned release of every
# engine with ranks: the fast tier judges rank-consistency's check logic on it (``tests/fast/test_rank_checks.py``)
RANKS_EXAMPLE = "speculators-default-hd32"
RANKS_TP = 2


def ranks_releases() -> list[str]:
    """The pinned release of each engine whose ranks build a drafter each (its profile has no ``no_ranks``)."""
    from contracts.engine_profile import profiles
    from contracts.manifest import EXPECTED

    pinned_here = json.loads(EXPECTED.read_text())["pinned"]  # the in-process engine's documented release
    return [pinned_here if p.in_process else f"{name}=={p.pinned}" for name, p in profiles().items() if not p.no_ranks]


RANKS_RECORDED = {release: RANKS_EXAMPLE for release in ranks_releases()}
VOLATILE = ("seconds", "peak_rss_mb")  # what differs between two runs of the same ranks


def ranks_recording(release: str) -> Path:
    return OBSERVED / "ranks" / f"{release.replace('==', '-')}-tp{RANKS_TP}-{RANKS_RECORDED[release]}.json"


def steady(observation: dict) -> dict:
    """A recorded ``RankObservation`` without what differs between runs (wall time, memory)."""
    out = {k: v for k, v in observation.items() if k not in VOLATILE}
    out["ranks"] = [{k: v for k, v in r.items() if k not in VOLATILE} for r in observation.get("ranks", [])]
    return out


def record_ranks(release: str) -> dict:
    """RELEASE's drafter of its recorded example at TP=2, observed by its engine (the ranks run as processes)."""
    from contracts.bundled import bundled_subjects

    subject = next(s for s in bundled_subjects(EngineSpec.parse(release)) if s.name == RANKS_RECORDED[release])
    subject.tp = RANKS_TP
    try:
        return steady(subject.ranks.to_dict())
    finally:
        subject.close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    from contracts.bundled import bundled_subjects
    from contracts.engine_spec import default_engine

    parser = argparse.ArgumentParser(prog="python -m contracts.recordings")
    parser.add_argument("--engine", default=default_engine(),
                        help="the engine path to record (a release, with its runner: vllm==0.32.0:v1)")
    parser.add_argument("--ranks", action="store_true", help="record the TP=2 drafters of RANKS_RECORDED instead")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # as tox runs the suite (OMP_NUM_THREADS=1): the same accumulation order
    if args.ranks:
        for release in RANKS_RECORDED:
            ranks_recording(release).parent.mkdir(parents=True, exist_ok=True)
            ranks_recording(release).write_text(json.dumps(record_ranks(release), sort_keys=True, indent=0) + "\n")
            print(ranks_recording(release))
        return 0
    spec = EngineSpec.parse(args.engine).canonical()
    subjects = bundled_subjects(spec)
    out = None
    for subject in subjects:
        try:
            recorded = record_subject(subject)
        finally:
            subject.close()
        if out is None:  # the release the engine says it is (the installed one, for a bare in-process name)
            info = recorded["answers"]["info"]["result"]
            out = recordings_dir(EngineSpec(spec.name, spec.version or info["version"], spec.runner))
            out.mkdir(parents=True, exist_ok=True)
        (out / f"{subject.name}.json").write_text(json.dumps(recorded, sort_keys=True, indent=0) + "\n")
        print(subject.name, recorded["verdicts"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
