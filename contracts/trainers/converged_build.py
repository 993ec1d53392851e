"""A draft trained to convergence by the trainer release installed here: the pre-merge half of acceptance.

``pytest -m contracts --build-with TRAINER --accept`` asks whether a training library's new code still trains a draft
that an engine accepts. The installed release runs the same builder as the bundled ``fixtures/converged/<trainer>``
(its own training loop on the converged target and the synthetic language), and ``accept[TRAINER]`` measures both on
vLLM's serving loop in one run: the build fails when it is accepted less than the bundled draft minus noise. Step-0
contracts cannot see a training change that only hurts convergence (a loss mask shifted, a vocab mapping counted
over the wrong tokens); acceptance can.

    DIR/draft/                        what the trainer saved
    DIR/reference.safetensors         its own forward on the reference prompt (forward-parity)
    DIR/eagle3-contracts-build.json   trainer, release, the converged target, the ids its vocab mapping selected

A build whose trainer code, environment and inputs were built before on this machine is reused from the cache
(``contracts.trainers.converged_cache``: keyed by their sha256, verified by the files' sha256) and says so.

Run in a process of its own (the builders fix torch's thread count and SpecForge starts a process group), from the
repository root (the converged target is named repo-relative in what the trainers save):

    python -m contracts.trainers.converged_build TRAINER DIR
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
import tempfile
from pathlib import Path

from contracts.engine_spec import EngineSpec
from contracts.trainer_profile import PROFILES
from contracts.builds import RECORD
from contracts.trainers.common import REPO_ROOT, sha256_files
from contracts.trainers import converged_cache
from contracts.trainers.converged import CONVERGED, TARGET

# trainer -> (its builder module, the function that trains and saves the converged draft)
BUILDERS = {name: p.converged_builder for name, p in PROFILES.items() if p.converged_builder}  # "module:function"
TIMEOUT_S = 3600


def twin(trainer: str) -> Path:
    """The bundled draft the same builder made with the fixtures' release: the acceptance a build is held to."""
    return CONVERGED / trainer


def compare_to_twin(draft: Path, trainer: str, engine: EngineSpec) -> dict:
    """The build's and the bundled draft's mean acceptance length on ``engine``'s serving loop, measured in one run
    (greedy, the same prompts), and the failure when the build's falls more than ``accept.NOISE`` below."""
    from contracts.accept import NOISE, measure

    lengths = {who: measure(path, TARGET.directory, engine=engine, expect=False,
                            explain=False)["mean_acceptance_length"]
               for who, path in (("build", Path(draft)), ("bundled", twin(trainer)))}
    failure = None
    if lengths["build"] is None or lengths["bundled"] is None or lengths["build"] < lengths["bundled"] - NOISE:
        failure = (f"its converged draft's mean acceptance length on {engine} is {lengths['build']}, the bundled "
                   f"{trainer} draft's {lengths['bundled']} (noise {NOISE}): its training no longer converges to a "
                   f"draft the engine accepts")
    return {**lengths, "failure": failure}


def build(trainer: str, out: Path) -> dict:
    """Train into ``out`` with the installed release (this process); returns the record written beside it."""
    from contracts.trainers.tiny import _prepare, _refuse_foreign, trainer_version

    out = Path(out).resolve()
    _refuse_foreign(out)
    release = trainer_version(trainer)
    _prepare(out)
    parts = converged_cache.key_parts(trainer, PROFILES[trainer].distribution, [TARGET.directory])
    key = converged_cache.build_key(parts)
    reused = converged_cache.reuse(key, out, here={"target": str(TARGET.directory)})
    if reused is not None:
        return reused
    build = pkgutil.resolve_name(BUILDERS[trainer])
    kept: dict = {}

    def keep(name, directory, **details):  # the entry a fixture build writes into the manifest, kept here instead
        kept.update(details, files=sha256_files(directory))
        return kept

    os.chdir(REPO_ROOT)
    with tempfile.TemporaryDirectory(prefix=f"eagle3-contracts-converged-{trainer}-") as scratch:
        build(Path(scratch), directory=out / "draft", record=keep, reference_path=out / "reference.safetensors")
    record = {"trainer": trainer, "trainer_version": release, "draft": "draft", "target": str(TARGET.directory),
              "reference": "reference.safetensors", "selected_target_ids": kept.get("selected_target_ids"),
              "aux_layer_ids": kept.get("aux_layer_ids"), "bundled_twin": f"converged-{trainer}",
              "training": kept.get("training"), "files": kept["files"], "python": sys.version.split()[0],
              "key": key, "key_parts": parts}
    (out / RECORD).write_text(json.dumps(record, indent=1, default=str) + "\n")
    converged_cache.keep(key, out)
    return record


def build_in_subprocess(trainer: str, out: Path, python: str = sys.executable) -> dict:
    """``build`` in a process of its own; a failure raises ``BuildRefused`` with the last error line it printed."""
    from contracts.engines.remote import last_error
    from contracts.trainers.tiny import BuildRefused

    if trainer not in BUILDERS:
        raise BuildRefused(f"no converged builder for {trainer!r} (one of {', '.join(BUILDERS)})")
    if not (TARGET.directory / "model.safetensors").is_file():
        raise BuildRefused(f"--accept trains on the converged target, {TARGET.directory}, which this installation "
                           f"lacks (install eagle3-contracts from a checkout: pip install -e)")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    try:
        done = subprocess.run([python, "-m", "contracts.trainers.converged_build", trainer, str(Path(out).resolve())],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BuildRefused(f"{trainer}'s converged build ran past {TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise BuildRefused(f"{trainer}'s converged build failed: {last_error(done.stderr)}")
    return json.loads((Path(out) / RECORD).read_text())


def main(argv: list[str]) -> int:
    trainer, out = argv
    record = build(trainer, Path(out))
    how = f"reused (same trainer code and inputs: {record['reused']['key']})" if "reused" in record else "trained"
    print(f"{trainer} {record['trainer_version']}: converged draft in {out}, {how}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
