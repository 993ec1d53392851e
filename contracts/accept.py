"""``eagle3-contracts accept``: acceptance measured on an engine's own speculative decoding loop on a CPU.

The contracts predict from the engine's code whether a draft is served as trained; the failure they exist for is a
number, an accept length near 1.00. ``accept`` serves the target with the draft through vLLM's own ``LLM``
(``contracts.engines.vllm.acceptance``, in that release's environment) and reports vLLM's own counters: the mean
acceptance length (1 + accepted tokens per draft round) and the acceptance rate at each draft position. On a CPU
vLLM serves with Model Runner V1 (V2, a GPU server's default, runs Triton kernels only), and the report says so.
``--engine llamacpp[==X]`` measures llama.cpp's server instead (``contracts.engines.llamacpp.acceptance``: the GGUFs
the release's own converter writes, its EAGLE-3 loop, its counters), a loop that runs on a CPU as it does on a GPU.
SGLang's serving loop does not run on a CPU
(its EAGLE worker's draft attention needs a GPU), so it is refused with that reason.

Beside the measurement stands the trainer's expectation (``contracts.trainers.expectation``, in the trainer
release's own environment, run while vLLM serves): the same prompts decoded greedily with the draft computed by the
trainer's own forward and the target in transformers. A gap beyond ``NOISE`` is a verdict (exit 1), and ``check``
on the runner measured names the contracts that explain it. The expectation is kept (beside the references, keyed by
the files' content, the prompts, the trainer's environment and the expectation's code): a second accept of the same
draft does not run the trainer's forward again.
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from contracts.checkpoint import Checkpoint, text_config
from contracts.engine_spec import ENGINE_NAMES, EngineSpec
from contracts.engines.remote import last_error

# How far vLLM's measured mean acceptance length may sit from the trainer's expectation before it is a verdict. Both
# decode the same prompts greedily; they differ only by float rounding (vLLM's kernels vs transformers), which flips
# a near-tied argmax now and then: 3.91 vs 3.88 on the converged speculators draft, 1.03 vs 1.03 with its d2t zeroed.
NOISE = 0.25
# Below this mean acceptance length the engine rejects (almost) every draft token: fewer than one accepted token in ten
# rounds. A collapse is a failure whatever the trainer's expectation says: a break that lives in the checkpoint (a
# zeroed d2t) collapses the trainer's own forward on the same weights too, so no gap opens (1.03 beside 1.03).
COLLAPSE = 1.1


class AcceptUnavailable(Exception):
    """The engine's serving loop cannot run here (an invocation that cannot be served, exit 2)."""


class ServingRefused(Exception):
    """The engine refused to serve the draft (a finding: exit 1 with the engine's own error)."""


@dataclass(frozen=True)
class ServingLoop:
    """The engine loop ``accept`` measures: its release, the job that runs it in that release's environment, how a
    report names it, and the engine path ``check`` judges to explain a gap."""

    release: EngineSpec  # (its version always, no runner)
    job: str
    label: str
    path: str
    check_spec: EngineSpec
    runner: str | None = None


def serving_loop(engine: EngineSpec | None = None) -> ServingLoop:
    """The loop ENGINE names (``vllm[==X][:v1]``, ``llamacpp[==X]``; None: the first engine whose loop runs on a
    CPU, ``serving_engine``), from its profile's ``serving_loop``, or AcceptUnavailable saying why it cannot run
    here."""
    from contracts.engine_profile import profile, serving_engine, serving_engines

    spec = (engine or EngineSpec(serving_engine())).canonical()
    name, version = spec.name, str(spec.version)
    engine_profile = spec.profile
    loop = engine_profile.serving_loop
    if loop is None:
        others = " or ".join(f"{profile(n).label} (--engine {n}==X)" for n in serving_engines())
        raise AcceptUnavailable(f"accept: {engine_profile.no_serving_loop}; measure on {others}")
    runner = spec.runner
    if runner is not None and runner != loop.runner:
        raise AcceptUnavailable(f"accept: {loop.runner_refusals.get(runner, f'{name} serves with {loop.runner}')}")
    check_spec = spec.with_runner(loop.runner) if loop.runner else spec
    return ServingLoop(spec.release(), loop.job, engine_profile.release_label(version), loop.path.format(version=version),
                       check_spec, runner=loop.runner)


def measure(draft, target, *, engine: EngineSpec | None = None, tokens: int = 3, prompts: int = 4, max_tokens: int = 64,
            temperature: float = 0.0, expect: bool = True, explain: bool = True, tp: int = 1) -> dict:
    """The engine's own acceptance counters for DRAFT speculating for TARGET on its CPU serving loop (vLLM's, or
    llama.cpp's), with the engine and path measured and the wall time. Raises contracts.checkpoint.InputError
    (unusable inputs), AcceptUnavailable, ServingRefused."""
    draft, target = Path(draft).resolve(), Path(target).resolve()  # the job runs in a directory of its own
    Checkpoint.open(draft)
    Checkpoint.open_target(target, require_weights=True)  # with its weights: accept serves the target
    loop = serving_loop(engine)
    if tp > 1 and loop.release.profile.no_ranks:
        raise AcceptUnavailable(f"accept --tp {tp}: {loop.release.profile.no_ranks}")
    from contracts.environments.engines import environment_for
    from contracts.engines.remote import run_module

    python = environment_for(loop.release)
    options = {"tokens": tokens, "n_prompts": prompts, "max_tokens": max_tokens, "temperature": temperature,
               **({"tp": tp} if tp > 1 else {})}
    start = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:  # the trainer's expectation runs while the engine serves
        expected = pool.submit(trainer_expectation, draft, target, options) if expect and temperature == 0 else None
        done = run_module(python, loop.job, str(draft), str(target), json.dumps(options), engine=loop.release.name)
        expectation = expected.result() if expected is not None else {
            "unavailable": "not asked (--no-expectation)" if not expect else
            "greedy only: at temperature > 0 the draws differ from the engine's, so no like-for-like expectation"}
    wall = time.perf_counter() - start
    if done.returncode != 0:  # outside the engine's own calls: a defect of this suite, never a verdict
        raise RuntimeError(f"the acceptance job in {loop.label}'s environment failed: {last_error(done.stderr)}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "refused" in result:
        raise ServingRefused(f"{loop.label} did not serve the draft: {result['refused']}")
    out = {"engine": {"name": loop.release.name, "version": loop.release.version}, "runner": loop.runner,
           "path": loop.path, "draft": str(draft), "target": str(target), **result, "seconds_wall": round(wall, 1),
           "trainer_expectation": expectation}
    measured, wanted = result.get("mean_acceptance_length"), expectation.get("mean_acceptance_length")
    if measured is not None and wanted is not None:
        out["gap"] = round(wanted - measured, 3)
        out["noise"] = NOISE
        if out["gap"] > NOISE:
            out["verdict"] = "below the trainer's expectation"
    if collapsed(result):
        out["verdict"] = "collapsed"
    if out.get("verdict") and explain:  # what check says on the path measured: the root causes, or that none does
        out["check"] = _check_on_path(draft, target, loop.check_spec)
        out["explained_by"], out["warned_by"] = out["check"]["root_causes"], out["check"]["warnings"]
    return out


def collapsed(result: dict) -> bool:
    """The engine rejected (almost) every draft token: a mean acceptance length under ``COLLAPSE`` or, where the
    release counts no rounds (llama.cpp 2026.8.10229), no draft token accepted of those drafted."""
    length = result.get("mean_acceptance_length")
    if length is not None:
        return length < COLLAPSE
    return bool(result.get("draft_tokens")) and not result.get("accepted_tokens")


def trainer_expectation(draft: Path, target: Path, options: dict) -> dict:
    """The trainer's expectation for DRAFT (``contracts.trainers.expectation``) in the environment of the trainer
    release that saved it, or why there is none."""
    from contracts.engines.serving_prompts import prompts as fixed_prompts
    from contracts.trainer_profile import PROFILES

    checkpoint = Checkpoint.open(draft)
    trainer = checkpoint.trainer_format
    from contracts.references import kept_answer, trainer_release

    release, which = trainer_release(checkpoint, trainer)
    if trainer not in PROFILES or PROFILES[trainer].proposer is None or not release:
        return {"unavailable": f"no trainer expectation for {trainer} drafts yet"}
    from contracts.engines.remote import run_module
    from contracts.environments.trainers import TrainerBuildError, environment_for

    try:
        python = environment_for(trainer, release)
    except TrainerBuildError as e:
        return {"unavailable": str(e)}
    vocab = int(text_config(Checkpoint.open(target, require_weights=False, role="target").config).get("vocab_size") or 0)
    job = {"trainer": trainer, "tokens": options["tokens"], "n_prompts": options["n_prompts"],
           "max_tokens": options["max_tokens"], "prompts": fixed_prompts(vocab, options["n_prompts"])}
    failed: list[str] = []

    def run() -> dict | None:
        done = run_module(python, "contracts.trainers.expectation", str(draft), str(target), json.dumps(job))
        if done.returncode != 0:
            failed.append(last_error(done.stderr))
            return None
        return json.loads(done.stdout.strip().splitlines()[-1])

    # the trainer's forward is deterministic on the same weights, prompts and release: a second accept of the same
    # draft reuses its answer (keyed like the references: the files' content, the job, the trainer's environment)
    code = hashlib.sha256((Path(__file__).parent / "trainers" / "expectation.py").read_bytes()).hexdigest()[:12]
    answer, kept = kept_answer("expectations", [code, trainer, release, str(python), job], draft, target, run)
    if answer is None:
        return {"unavailable": f"{trainer} {release} could not run the draft: {failed[-1] if failed else '?'}"}
    return {"trainer": trainer, "version": release, "version_from": which, "kept": kept, **answer}


def _check_on_path(draft: Path, target: Path, engine: EngineSpec) -> dict:
    """What ``check`` says on the path measured: the root-cause contracts it fails (what explains a collapse or a
    gap), the warnings it gives ("contract: summary", which may explain the rest), and the contracts it could not
    judge, so a report never calls a check that did not run, or did not judge, a pass."""
    from contracts.bundled import bundled_subject_for
    from contracts.judging import report
    from contracts.subject import Subject

    subject = bundled_subject_for(draft, engine, target) or Subject(draft.name, draft, target, engine=engine)
    try:
        rep = report(subject)
    finally:
        subject.close()
    return {"engine": str(engine),
            "root_causes": [r["contract"] for r in rep["results"] if r["status"] == "fail" and r.get("root_cause")],
            "failed": [r["contract"] for r in rep["results"] if r["status"] == "fail"],
            "warnings": [f"{r['contract']}: {r['summary']}" for r in rep["results"] if r["status"] == "warn"],
            "not_judged": [f"{r['contract']}: {r['summary']}" for r in rep["results"] if r["status"] == "skip"]}


def render_text(result: dict) -> str:
    mode = "greedy" if result["temperature"] == 0 else f"temperature {result['temperature']:g}"
    length = result["mean_acceptance_length"]
    if length is None and result.get("unavailable"):
        return (f"{result['draft']}: no mean acceptance length from {_label(result)}: {result['unavailable']} "
                f"({result['accepted_tokens']} of {result['draft_tokens']} draft tokens accepted, "
                f"{result['generated_tokens']} tokens generated)\n")
    if length is None:
        return (f"{result['draft']}: {_label(result)} ran no draft round "
                f"({result['generated_tokens']} tokens generated)\n")
    rates = " ".join(f"{r:.2f}" for r in result["acceptance_rate_per_position"]) or \
        (f"- ({result['acceptance_rate_per_position_unavailable']})"
         if result.get("acceptance_rate_per_position_unavailable") else "")
    lines = [f"{result['draft']}: mean acceptance length {length:.2f} with {result['num_speculative_tokens']} "
             f"speculative tokens ({mode}; {result['prompts']} prompts x {result['max_tokens']} tokens, "
             f"{result['rounds']} draft rounds, {result['accepted_tokens']} of {result['draft_tokens']} draft tokens "
             f"accepted)",
             f"  acceptance rate per draft position: {rates or '-'}",
             f"  on {result['path']}, {_label(result)}; {result['seconds_wall']:.0f} s wall "
             f"({result['seconds_build']:.0f} s engine start-up"
             + (f", {result['seconds_convert']:.0f} s converting" if "seconds_convert" in result else "") + ")"]
    expected = result.get("trainer_expectation") or {}
    if expected.get("mean_acceptance_length") is not None:
        lines.append(f"  the trainer's expectation ({expected['trainer']} {expected['version']}'s own modules, the "
                     f"target in transformers, the same prompts): {expected['mean_acceptance_length']:.2f}; gap "
                     f"{result['gap']:+.2f} (noise {result['noise']:.2f})"
                     + ("; kept from an earlier run on the same files" if expected.get("kept") else ""))
    elif expected.get("unavailable"):
        lines.append(f"  the trainer's expectation: none ({expected['unavailable']})")
    if result.get("verdict") == "collapsed":
        also = expected.get("mean_acceptance_length")
        lines.append(f"  FAIL: acceptance collapsed ({length:.2f}: the engine rejects (almost) every draft token)"
                     + (f"; the trainer's own forward on these weights expects {also:.2f} too: the break is in the "
                        f"checkpoint itself, or the draft was never trained for this target" if also is not None
                        and also < COLLAPSE else ""))
    elif result.get("verdict"):
        lines.append(f"  FAIL: served {result['gap']:.2f} below the trainer's expectation")
    if result.get("check"):
        check = result["check"]
        lines.append(f"  check on {check['engine']} (the path measured): "
                     + (f"explained by {', '.join(check['root_causes'])}" if check["root_causes"] else
                        "no contract it judged fails"))
        lines += [f"  and warned: {w}" for w in check["warnings"]]
        lines += [f"  not judged: {w}" for w in check["not_judged"]]
        if not check["root_causes"] and not check["warnings"]:
            lines.append("  nothing check says explains it: report it")
    return "\n".join(lines) + "\n"


def _label(result: dict) -> str:
    tp = result.get("tensor_parallel_size") or 1
    return f"{ENGINE_NAMES[result['engine']['name']]} {result['engine']['version']}" + (f" at TP={tp}" if tp > 1 else "")
