"""The trainer's reference forward that ``forward-parity`` replays through the engine, for any subject: the bundled
draft's (``fixtures/references``), the one ``build-tiny`` recorded, or, for a draft a user brings, one made on the
spot by the trainer's own forward on the user's weights, in the trainer release's own environment
(``contracts.trainers.reference_job``, run like an engine worker: in another environment, by module name).

Which trainer: ``--trainer``, the copy's conversion record, or the checkpoint's own format. Which release: the one the
checkpoint records (speculators writes ``speculators_version``), else the newest this project's bundled drafts were
built with. Which inputs: the target's real aux hidden states when the target has its weights; otherwise a synthetic
target (its config, seeded random weights, the draft's own embedding where it saved one), and the verdict says so.
Memory stays bounded: a draft or target whose float32 forward would hold more than ``BUDGET_ELEMENTS`` is not run
whole, and the verdict says why. References are kept in the user cache (never beside the checkpoint), keyed by what
they were made from, so ``matrix`` and later checks make each one once.

Why it exists: before it, a copy of a bundled draft outside ``fixtures/`` got ``forward-parity`` SKIP and exit 0,
although the bundled twin fails it (Model Optimizer's first layer and its export's yarn rope).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from contracts.trainer_profile import PROFILES

JOB = "contracts.trainers.reference_job"
JOB_VERSION = "reference-job-1"  # part of every cached reference's key: bump when what the job writes changes
# the trainers whose own forward this suite runs on a user's draft (their profiles' ``makes_references``)
TRAINERS_WITH_JOBS = tuple(name for name, p in PROFILES.items() if p.makes_references)
# the most float32 elements the trainer's forward may hold for the draft, and for the target (256 MB each)
BUDGET_ELEMENTS = 64_000_000


@dataclass(frozen=True)
class Reference:
    """A trainer reference forward (``path``), or why there is none (``unavailable``, and ``needs``: the input the
    user could give that would make one, e.g. ``--target DIR``)."""

    path: Path | None = None
    origin: str | None = None  # "bundled", "recorded by build-tiny", "made on the spot"
    trainer: str | None = None
    version: str | None = None
    version_from: str | None = None
    inputs: str | None = None  # "target" (its real aux hidden states) or "synthetic"
    inputs_how: str | None = None
    replay_target: Path | None = None  # the target the engine's replay is wired to (the synthetic one, if any)
    unavailable: str | None = None
    needs: str | None = None
    seconds: float | None = None  # spent making it (0 when it came from the cache)
    # for a draft whose trainer is unknown: each known trainer's forward on these weights, in the form its own code
    # reads (``contracts.trainer_forms``), or why that trainer's code did not take them
    candidates: tuple = ()

    def describe(self) -> str:
        if self.path is None:
            return f"none: {self.unavailable}"
        if self.origin != "made on the spot":  # the file a bundled draft or a build-tiny output carries
            return str(self.path)
        who = f"{self.trainer} {self.version}" if self.trainer else "the trainer"
        return (f"{who}'s own forward on these weights, made on the spot in its environment (release: "
                f"{self.version_from}); inputs: {self.inputs_how}")


def trainer_release(checkpoint, trainer: str) -> tuple[str | None, str]:
    """The trainer release whose code computes a reference or an expectation for CHECKPOINT: the one it records
    (speculators writes ``speculators_version``), else the newest one the bundled drafts were built with (Model
    Optimizer's, SpecForge's and NeMo Automodel's exports name none)."""
    form = PROFILES[trainer].form if trainer in PROFILES else None
    key = form.version_key if form is not None else None
    if key and isinstance(checkpoint.config.get(key), str):
        return checkpoint.config[key], f"the checkpoint's {key}"
    from contracts.environments.engines import release_order
    from contracts.manifest import manifest

    known = sorted({e["trainer_version"] for e in manifest().values()
                    if e.get("trainer") == trainer and e.get("trainer_version")}, key=release_order)
    if not known:
        return None, f"no release of {trainer} is known to this project"
    return known[-1], f"the checkpoint names no release: the newest this project builds its {trainer} drafts with"


def reference_for(subject) -> Reference:
    """The reference ``forward-parity`` replays for SUBJECT (a ``contracts.subject.Subject``), made if need be."""
    if subject.target_path is None:
        return Reference(unavailable="no --target: the trainer's forward is fed the target's aux hidden states and "
                                     "the engine shares the target's embedding into the draft", needs="--target DIR")
    if subject.reference_path is not None:
        meta = _metadata(subject.reference_path)
        origin = "recorded by build-tiny" if subject.trainer_hidden_states is not None else "bundled"
        return Reference(Path(subject.reference_path), origin, meta.get("trainer"), meta.get("version"),
                         inputs="target", replay_target=subject.target_path)
    if subject.no_reference_because:
        return Reference(unavailable=subject.no_reference_because)
    trainer = subject.trainer_name
    if trainer is None:
        return Reference(unavailable=f"the trainer is unknown ({subject.trainer_basis[0]}): which trainer's forward "
                                     f"the engine must match is the user's to say", needs="--trainer NAME",
                         candidates=tuple(_candidates(subject)))
    if trainer not in TRAINERS_WITH_JOBS:
        return Reference(trainer=trainer, unavailable=f"no trainer reference is made on the spot for {trainer} drafts "
                                                      f"(its forward needs the training recipe's own state)")
    release, why = trainer_release(subject.checkpoint, trainer)
    if release is None:
        return Reference(trainer=trainer, unavailable=why)
    too_big = _beyond_budget(subject)
    if too_big:
        return Reference(trainer=trainer, version=release, unavailable=too_big)
    # a flat draft named by --trainer (or by convert's record) is read in that trainer's own form first
    form = None if subject.trainer_format == trainer else trainer
    return _made(subject, trainer, release, why, synthetic=not _has_layers(subject.target), form=form)


def _has_layers(target) -> bool:
    """Whether the target's weights can run its forward: it has weights beyond its vocabulary tensors (a target kept
    with only its embedding and head, as the Kimi-K2.5 replay's, is fed synthetic states like a config-only one)."""
    return any(".layers." in name or name.startswith("layers.") for name in target.tensors)


def _candidates(subject) -> list[Reference]:
    """Each known trainer's reference on SUBJECT's weights, staged in the form that trainer's code reads (its
    config layout and tensor names; no value changed), for a draft whose trainer is unknown."""
    out = []
    for trainer in TRAINERS_WITH_JOBS:
        release, why = trainer_release(subject.checkpoint, trainer)
        too_big = _beyond_budget(subject)
        if release is None or too_big:
            out.append(Reference(trainer=trainer, version=release, unavailable=too_big or why))
            continue
        out.append(_made(subject, trainer, release, why, synthetic=not _has_layers(subject.target), form=trainer))
    return out


def _beyond_budget(subject) -> str | None:
    """Why the trainer's forward cannot be run whole within the memory bound (None: it can). The draft is sized by
    the larger of what its checkpoint holds and what a model built from its config allocates (the trainer builds
    the config's embedding and head whatever the checkpoint holds: ``vocab_size: 2000000`` in a tiny draft's config
    had SpecForge's forward hold 1.2 GB)."""
    from contracts.engines.scaling import estimated_elements
    from contracts.engines.tracing import checkpoint_elements, configured_elements

    draft = max(checkpoint_elements(subject.checkpoint), configured_elements(subject.checkpoint))
    target = estimated_elements(subject.target.config)
    for what, n in (("draft", draft), ("target", target)):
        if n > BUDGET_ELEMENTS:
            return (f"the trainer's forward would hold the {what}'s {n / 1e6:.0f} M parameters in float32 "
                    f"({4 * n / 2**30:.1f} GiB), beyond this check's memory bound ({4 * BUDGET_ELEMENTS // 2**20} MiB)")
    return None


def _metadata(path) -> dict:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception:  # noqa: BLE001  (a malformed reference is forward-parity's to report)
        return {}


def _cache_root() -> Path:
    from contracts.environments.recipes import envs_root

    return envs_root().parent / "references"


HASHED_BYTES = 256 * 2**20  # files up to this size are keyed by content, larger ones by path, size and mtime


def _fingerprint(directory: Path) -> list:
    """What a directory's reference depends on: each file by content (so a copy of a draft finds the reference its
    original made), a file larger than ``HASHED_BYTES`` by its path, size and time of last change (a rewritten
    weight file makes a new reference; hashing 16 GB would take minutes)."""
    out = []
    for p in sorted(Path(directory).iterdir()):
        if not p.is_file():
            continue
        st = p.stat()
        if st.st_size > HASHED_BYTES:
            out.append([p.name, str(p.resolve()), st.st_size, st.st_mtime_ns])
            continue
        digest = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(2**20), b""):
                digest.update(chunk)
        out.append([p.name, digest.hexdigest()])
    return out


def kept_answer(kind: str, parts: list, draft: Path, target: Path, make) -> tuple[dict | None, bool]:
    """A trainer job's JSON answer for DRAFT beside TARGET, kept in the same cache as the references under the key
    of KIND, PARTS and both folders' fingerprints: ``make()`` runs only when no answer was kept (``None``: nothing
    kept, e.g. the job failed). Returns (answer, whether it came from the cache)."""
    key = hashlib.sha256(json.dumps([kind, parts, _fingerprint(Path(draft).resolve()),
                                     _fingerprint(Path(target).resolve())]).encode()).hexdigest()[:16]
    home = _cache_root() / kind
    home.mkdir(parents=True, exist_ok=True)
    answer_file = home / f"{key}.json"
    with open(home / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if answer_file.is_file():
            return json.loads(answer_file.read_text()), True
        answer = make()
        if answer is not None:
            answer_file.write_text(json.dumps(answer) + "\n")
        return answer, False


def _made(subject, trainer: str, release: str, why: str, synthetic: bool, form: str | None = None) -> Reference:
    """The reference TRAINER RELEASE's job makes on SUBJECT's weights (``form``: staged first in the form that trainer's
    code reads, for a draft whose trainer is unknown), from the cache when it was made before."""
    if subject.checkpoint.not_fetched:  # a Hub draft read by ranges: the trainer's forward reads every weight
        from contracts.judging import NEEDS_DOWNLOAD

        return Reference(trainer=trainer, version=release, needs=NEEDS_DOWNLOAD,
                         unavailable=f"the trainer's forward reads every weight, and "
                                     f"{len(subject.checkpoint.not_fetched)} tensor(s) of this Hub draft were not fetched")
    from contracts.environments.engines import add_setup_seconds
    from contracts.engines.remote import run_module
    from contracts.environments.trainers import TrainerBuildError, environment_for

    draft, target = Path(subject.checkpoint_path).resolve(), Path(subject.target_path).resolve()
    key = hashlib.sha256(json.dumps([JOB_VERSION, trainer, release, synthetic, form, _fingerprint(draft),
                                     _fingerprint(target)]).encode()).hexdigest()[:16]
    home = _cache_root() / key
    home.parent.mkdir(parents=True, exist_ok=True)
    out, summary, synthetic_dir = home / "reference.safetensors", home / "summary.json", home / "synthetic-target"
    base: dict = dict(origin="made on the spot", trainer=trainer, version=release, version_from=why)
    with open(home.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if summary.is_file():
            done = json.loads(summary.read_text())
            return _from_summary(done, base, out, synthetic_dir if synthetic else target, 0.0)
        try:
            python = environment_for(trainer, release)
        except TrainerBuildError as e:
            return Reference(**base, unavailable=f"{trainer} {release}'s environment could not be made: {e}")
        start = time.perf_counter()
        inputs = "synthetic aux hidden states (the target has no layer weights here)" if synthetic else \
            "the target's real aux hidden states"
        print(f"eagle3-contracts: making {trainer} {release}'s reference forward on {subject.checkpoint_path} (its "
              f"own forward in its environment; {inputs})", file=sys.stderr, flush=True)
        home.mkdir(exist_ok=True)
        if form is not None:  # the same weights, named and configured as this trainer's own code reads them
            from contracts.trainer_forms import staged

            shutil.rmtree(home / "form", ignore_errors=True)
            draft = staged(draft, form, target, home / "form")
        job = {"trainer": trainer, "draft": str(draft), "target": str(target), "out": str(out),
               "synthetic_target": str(synthetic_dir) if synthetic else None}
        done = run_module(python, JOB, json.dumps(job), timeout=1800)
        seconds = round(time.perf_counter() - start, 1)
        add_setup_seconds(seconds)
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.startswith("reference-job: ")]
            why_not = lines[-1].removeprefix("reference-job: ") if lines else \
                f"the reference job failed: {(done.stderr.strip().splitlines() or ['(no output)'])[-1][:300]}"
            return Reference(**base, unavailable=why_not, seconds=seconds)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        summary.write_text(json.dumps(result) + "\n")
        print(f"eagle3-contracts: made {trainer} {release}'s reference forward in {seconds:.0f} s (kept in {home})",
              file=sys.stderr, flush=True)
        return _from_summary(result, base, out, synthetic_dir if synthetic else target, seconds)


def _from_summary(done: dict, base: dict, out: Path, replay_target: Path, seconds: float) -> Reference:
    return Reference(out, **{**base, "version": done["version"]}, inputs=done["inputs"], inputs_how=done["inputs_how"],
                     replay_target=replay_target, seconds=seconds)
