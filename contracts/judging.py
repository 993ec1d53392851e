"""Judging a subject: every selected contract run on the observations its engine made once, an engine's refusal
reported once (by ``config`` when selected, else by the first contract that meets it) and pointed at by the contracts
that need the same draft, root causes marked; and the report document of one subject.

Apart from ``contracts.subject.Subject`` (its inputs and the engine observations it gathers) so that what a subject
is and how its contracts are judged change separately.
"""

from __future__ import annotations

import time
from typing import Protocol

from contracts.checks import mark_causes, select
from contracts.engine_spec import EngineSpec
from contracts.refusals import EngineRefused, NotADraft, TargetRefused
from contracts.registry import FAIL, SKIP, Result, SubjectView


class JudgedSubject(SubjectView, Protocol):
    """What a report asks of its subject beyond what the checks do (``contracts.subject.Subject``)."""

    engine: EngineSpec

    @property
    def path(self): ...  # PathObservation (raises the adapter's EngineBuildError / ReplayError)

    def engine_info(self) -> dict: ...

    def judged_as(self) -> dict | None: ...

    def close(self) -> None: ...


NEEDS_DOWNLOAD = "the draft's full weights (--download)"


def judge(subject: SubjectView, only: list[str] | None = None) -> list[Result]:
    """The selected contracts (default all) on SUBJECT, in registry order, root causes marked."""
    from contracts.checkpoint import WeightsNotFetched
    from contracts.engines.errors import ReplayError
    from contracts.refusals import DRAFT_ARCHITECTURE_FIX, REFUSED, fix_for_refusal

    selected = [c for c in select(only) if only or c.applies is None or c.applies(subject)]
    # A refused or non-draft build is a finding about the config: with config selected it is config's
    # failure, and the contracts that need the draft point at it; otherwise the first that meets it fails.
    judged_by_config = "config" in {c.id for c in selected}
    if "forward-parity" in {c.id for c in selected}:
        # the trainer's reference forward made first, while no engine is loaded: made on the spot it is a process of
        # its own (~0.5 GB: torch and the trainer's modules), and beside a loaded engine the tree held both
        try:
            getattr(subject, "reference", None)
        except (Exception, WeightsNotFetched):  # noqa: BLE001  (forward-parity meets the same error again)
            pass
    results, refused_in = [], None
    for c in selected:
        try:
            results.append(c.check(subject))
        except EngineRefused as e:
            # The root cause is reported once, as a failure; contracts that need the same engine
            # model are skipped with a pointer to it rather than repeating it as failures of their own.
            owner = refused_in or ("config" if judged_by_config else c.id)
            if owner == c.id:
                refused_in = c.id
                fix = DRAFT_ARCHITECTURE_FIX if isinstance(e, NotADraft) else \
                    fix_for_refusal(str(e), subject.checkpoint.config, subject.checkpoint.tensors)
                results.append(Result(c.id, FAIL, f"{REFUSED}: {e}",
                                      {"engine_error": str(e)}, fix))
            else:
                what = "builds no EAGLE-3 draft for this config" if isinstance(e, NotADraft) else \
                    "cannot build this draft"
                results.append(Result(c.id, SKIP, f"not judged: the engine {what} (see {owner})",
                                      {"engine_error": str(e)}))
        except TargetRefused as e:  # the engine cannot build the target: this contract cannot be judged here
            results.append(Result(c.id, SKIP, f"not judged: the engine cannot build the target: {e}",
                                  {"engine_error": str(e)}, f"give {e.needs}" if e.needs else None,
                                  needs=e.needs))
        except ReplayError as e:  # this suite cannot replay that part of the engine on this release
            results.append(Result(c.id, SKIP, f"not judged: {e}", {"replay_error": str(e)}))
        except WeightsNotFetched as e:  # a Hub draft read by ranges: this contract reads a tensor left unread
            results.append(Result(c.id, SKIP, f"not judged: it reads the draft's weights, and {e}",
                                  {"not_fetched": str(e)}, "rerun with --download (every file of the repository)",
                                  needs=NEEDS_DOWNLOAD))
    return mark_causes(_pointers_kept(results, refused_in))


def _pointers_kept(results: list[Result], refused_in: str | None) -> list[Result]:
    """A contract that met the engine's refusal points at the contract that reports it (config, when selected). When
    config judged the draft without meeting it (the engine built the draft from its config, then refused its weights:
    vLLM's loader on a 4-state fc its config sizes for 3), the pointers go to the failure that reports the refusal
    (tensor-shapes' shape error), else the first of them becomes that failure: a refusal is never only pointed at."""
    from contracts.refusals import REFUSED

    by = {r.contract: r for r in results}
    if refused_in is not None or by.get("config") is None or by["config"].status == FAIL:
        return results
    pointing = [r for r in results if r.status == SKIP and r.summary.endswith("(see config)")]
    if not pointing:
        return results
    error = pointing[0].evidence.get("engine_error", "")
    reported = next((r.contract for r in results if r.status == FAIL and error and error.split(":")[-1].strip()
                     in str(r.evidence)), None)
    if reported is None:
        first = pointing[0]
        first.status, first.summary = FAIL, f"{REFUSED}: {error}"
        reported, pointing = first.contract, pointing[1:]
    for r in pointing:
        r.summary = r.summary.replace("(see config)", f"(see {reported})")
    return results


def path_record(subject: JudgedSubject) -> dict | None:
    """What a report says of the path it judged: which one, whether a GPU deployment takes it by default, and how
    the release's own code decides the default (None when the engine could not be asked)."""
    from contracts.engines.errors import EngineBuildError, ReplayError

    try:
        p = subject.path
    except (EngineBuildError, ReplayError) as e:
        return {"label": None, "why_unknown": str(e)[:300]}
    return {"kind": p.kind, "judged": p.judged, "label": p.label, "default": p.default,
            "default_label": p.default_label, "is_default": p.is_default, "default_why": p.default_why,
            "asked": p.asked, "available": p.available}


def report(subject: JudgedSubject, only: list[str] | None = None) -> dict:
    """Run the selected contracts on one subject; the JSON document of docs/checking-a-draft.md."""
    from contracts.environments.engines import setup_seconds

    start, setup = time.perf_counter(), setup_seconds()
    try:
        results = judge(subject, only)
        doc = {
            "checkpoint": str(subject.checkpoint_path),
            "target": None if subject.target_path is None else str(subject.target_path),
            "engine": subject.engine_info(),
            "engine_spec": str(subject.engine.canonical()),
            "path": path_record(subject),
            "tp": getattr(subject, "tp", 1),
            "trainer_format": subject.trainer_format,
            "results": [r.to_dict() for r in results],
            "duration_s": round(time.perf_counter() - start, 3),
            # of it, making what a first run makes once: environments, the trainer's reference forward
            "setup_s": round(setup_seconds() - setup, 3),
        }
        judged_as = subject.judged_as()
        if judged_as:  # converted: every verdict is for the form a user's conversion writes, not the saved one
            doc["judged_as"] = judged_as
        return doc
    finally:
        subject.close()



def observe_ranks_together(subjects: list) -> None:
    """Several subjects' rank observations made in one set of ranks per engine path and target (starting N engine
    processes is most of a rank observation's cost: about 20 s per rank for vLLM's import), kept on each subject as
    if it had made its own. A set whose ranks fail leaves its subjects to observe alone, so the failure is the one
    draft's that caused it."""
    from contracts.engines.errors import EngineBuildError, ReplayError

    groups: dict[tuple, list] = {}
    for s in subjects:
        if s.tp > 1 and s.target_path is not None and s.target.has_weights:
            try:
                key = (id(s.adapter), str(s.target_path), s.runner, s.tp)
            except (EngineBuildError, ReplayError):
                continue
            groups.setdefault(key, []).append(s)
    for (_, target, runner, tp), members in groups.items():
        try:
            found = members[0].adapter.ranks([s.engine_dir for s in members], target, tp, runner=runner)
        except (EngineBuildError, ReplayError):
            continue
        for s, observation in zip(members, found):
            s.__dict__["_ranks"] = (observation, None)
