"""A cached environment per trainer release, for the trainer-release axis of the compatibility table: each release of
speculators, SpecForge, NVIDIA Model Optimizer and NVIDIA NeMo Automodel on the package index, made with uv like the
engines' environments (``contracts.environments.engines``: one shared cache, hard links), from a recipe derived from
the release's own metadata, and a tiny draft built there by ``build-tiny`` (``contracts.trainers.tiny``).

The recipe: the release's base ``Requires-Dist`` (plus the ``transformers`` pin of an extra where the base declares
none: Model Optimizer keeps it in ``[hf]``), without CUDA stacks and the multi-GPU training stacks a one-process CPU
build never imports (``TRAINING_STACKS``), torch 2.13.0's CPU wheel kept; the trainer itself goes in ``--no-deps``
(its torch pins are CUDA builds). Then ``build-tiny`` runs in the new environment and each module it could not import
is added from the release's declarations (or as its own distribution), until it builds or stops at an API change.

A release published only as an sdist whose build is broken is made from its own files where that is possible
(``SDIST_FIXES``, each with the reason); the rest are rows with the installer's last line.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import contracts
from contracts.trainer_profile import PROFILES
from contracts.environments.cache import mark_used
from contracts.environments.engines import (EnvironmentBuildError, add_setup_seconds, build_started, envs_root,
                                           install_command, progress, release_order, run_step,
                                           uv_binary)
from contracts.environments.recipes import (CPU_TORCH, CUDA_STACKS, IMPORT_TO_DIST, Recipe, ReleaseNotFound, canonical,
                                       distribution_versions, wheels_dir)

BUILDER = "trainer-uv-3"
DISTRIBUTION = {name: p.distribution for name, p in PROFILES.items()}  # (contracts.trainer_profile)
FIRST = {name: p.first_release for name, p in PROFILES.items()}  # the first with an EAGLE-3 draft (earlier: not swept)
# Declared by trainers for multi-GPU training or logging, never imported by a one-process CPU build of a draft
# (and several compile CUDA code at install): deepspeed (speculators 0.3.0, Model Optimizer's [hf]), yunchang
# (SpecForge's sequence parallelism, pulls flash-attn), sglang (SpecForge 0.2.0's online data generation: an engine,
# with its CUDA stack), megatron-fsdp and flashoptim (NeMo Automodel's sharded training and fused optimizers: its
# EAGLE-3 recipe runs without either installed).
TRAINING_STACKS = re.compile(r"^(deepspeed|yunchang|sglang|liger-kernel|pre-commit|megatron-fsdp|flashoptim)$")
# Releases whose sdist does not build as published, made from their own files.
SDIST_FIXES = {
    ("specforge", "0.1.0"): "its setup.py reads requirements.txt, which the sdist lacks; the sdist's own "
                            "specforge.egg-info/requires.txt (the requirements it was published with) is put there",
}
# GPU stacks a trainer imports at module level that install and import on a CPU: triton (SpecForge 0.2.0's loss
# kernels; 3.7 is the series torch 2.13 pairs with, as for the engines, contracts.environments.recipes); its kernels are
# defined, never run, by a build; torchao (NeMo Automodel's recipe imports it for FP8 and QAT, which a CPU build does
# not turn on; 0.18.0 imports beside torch 2.13's CPU wheel, its CUDA extensions left unloaded).
CPU_IMPORTABLE = {"triton": "triton<3.8", "torchao": "torchao==0.18.0"}
MAX_ROUNDS = 8
NEEDS = re.compile(r"(?:needs|imports) (\S+), which (?:is not installed here|the installed)")


class TrainerBuildError(RuntimeError):
    """The trainer release's environment could not be made, or build-tiny failed there (the message says why)."""


def releases(trainer: str) -> list[str]:
    """The trainer's releases on the package index since ``FIRST``, oldest first."""
    first = release_order(FIRST[trainer])
    return sorted((v for v in distribution_versions(DISTRIBUTION[trainer])
                   if release_order(v) >= first and not re.search(r"[a-z]", v)), key=release_order)


def _sources() -> Path:
    return wheels_dir() / "trainer-sources"


def _sdist_requirements(trainer: str, version: str) -> tuple[list[str], Path]:
    """Requires-Dist of a release published as an sdist only, from its own egg-info; the unpacked (and, per
    ``SDIST_FIXES``, repaired) source tree to install from."""
    dist = DISTRIBUTION[trainer]
    root = _sources() / f"{dist}-{version}"
    if not root.is_dir():
        archive = _download_sdist(dist, version)
        with tempfile.TemporaryDirectory(dir=_sources()) as tmp, tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
            shutil.move(str(next(Path(tmp).iterdir())), root)
    requires = next(root.glob("*.egg-info/requires.txt"), None)
    lines = []
    if requires is not None:
        for line in requires.read_text().splitlines():
            if line.startswith("["):  # an extra's section: the base requirements come first
                break
            if line.strip():
                lines.append(line.strip())
    if (trainer, version) in SDIST_FIXES and not (root / "requirements.txt").exists():
        (root / "requirements.txt").write_text("\n".join(lines) + "\n")
    return lines, root


def _download_sdist(dist: str, version: str) -> Path:
    """The release's sdist, from the index's simple page (PEP 503), its sha256 checked. ``pip download`` cannot
    fetch it: pip prepares the metadata of what it downloads, and a broken setup.py is why this path exists."""
    import hashlib
    import urllib.request

    download = _sources() / "downloads"
    download.mkdir(parents=True, exist_ok=True)
    archive = download / f"{dist}-{version}.tar.gz"
    if archive.is_file():
        return archive
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    try:
        page = urllib.request.urlopen(f"{index}/{dist}/", timeout=60).read().decode()
    except OSError as e:
        raise ReleaseNotFound(f"cannot read the index page of {dist} ({e})") from None
    links = re.findall(rf'href="([^"]*/{re.escape(archive.name)}#sha256=([0-9a-f]{{64}}))"', page)
    if not links:
        raise ReleaseNotFound(f"no wheel or sdist of {dist}=={version} on the package index")
    url, digest = links[0]
    try:
        data = urllib.request.urlopen(url.split("#")[0], timeout=120).read()
    except OSError as e:
        raise ReleaseNotFound(f"cannot download {archive.name} ({e})") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise ReleaseNotFound(f"{archive.name}: sha256 differs from the index's")
    archive.write_bytes(data)
    return archive


def _metadata(trainer: str, version: str) -> tuple[list[str], Path | None]:
    """The release's Requires-Dist (PEP 658 metadata of its wheel, else its sdist's egg-info) and, for an sdist, the
    source tree to install."""
    from contracts.environments.recipes import distribution_metadata

    try:
        return distribution_metadata(DISTRIBUTION[trainer], version), None
    except ReleaseNotFound:
        return _sdist_requirements(trainer, version)


def derive(trainer: str, version: str) -> tuple[Recipe, Path | None]:
    """The trainer release's environment recipe (before the closure) and its source tree when it has no wheel."""
    from packaging.requirements import Requirement

    lines, source = _metadata(trainer, version)
    reqs = [Requirement(line) for line in lines]
    base = [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]
    declared = {canonical(r.name): (f"{r.name}{r.specifier}" if str(r.specifier) else r.name) for r in reqs}
    if not any(canonical(r.name) == "transformers" for r in base):
        base += [r for r in reqs if canonical(r.name) == "transformers"][:1]  # Model Optimizer: its [hf] extra
    recipe = Recipe(trainer, version, [f"torch=={CPU_TORCH}"], declared=declared, installed_by_builder="the trainer")
    dropped = []
    for r in base:
        name = canonical(r.name)
        if CUDA_STACKS.match(name) or TRAINING_STACKS.match(name) or name == canonical(DISTRIBUTION[trainer]):
            dropped.append(str(r))
            continue
        recipe.lines.append(f"{r.name}{r.specifier}" if str(r.specifier) else r.name)
    recipe.notes.append(f"from {DISTRIBUTION[trainer]}=={version}'s Requires-Dist; left out (CUDA or multi-GPU "
                        f"training stacks, the CPU torch kept): {', '.join(dropped) or 'nothing'}")
    if (trainer, version) in SDIST_FIXES:
        recipe.notes.append(f"sdist only: {SDIST_FIXES[(trainer, version)]}")
    return recipe, source


def environment_for(trainer: str, version: str) -> Path:
    """The Python interpreter of the cached environment for ``trainer==version`` (made first if missing)."""
    try:
        recipe, source = derive(trainer, version)
    except ReleaseNotFound as e:
        raise TrainerBuildError(f"cannot make the {trainer}=={version} environment: {e}") from None
    digest = hashlib.sha256((recipe.text() + BUILDER + sys.version).encode()).hexdigest()[:10]
    root = envs_root()
    root.mkdir(parents=True, exist_ok=True)
    env = root / f"trainer-{trainer}-{version}-py{sys.version_info.major}{sys.version_info.minor}-{digest}"
    with open(root / f"{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (env / "ready").is_file():
            _build(env, recipe, source, trainer, version)
    mark_used(env)
    return env / "bin" / "python"


def _build(env: Path, recipe: Recipe, source: Path | None, trainer: str, version: str) -> None:
    start = build_started(env)
    shutil.rmtree(env, ignore_errors=True)
    log = env.with_name(env.name + ".log")
    print(f"eagle3-contracts: making the {trainer}=={version} environment once (cached in {env}; log {log})",
          file=sys.stderr, flush=True)
    name = f"{trainer}=={version}"
    with open(log, "w") as out:
        try:
            answer = _make(env, recipe, source, trainer, version, out, log)
            if "predates" in answer and uv_binary():
                day = upload_day(DISTRIBUTION[trainer], version)
                recipe.notes.append(f"made as of {day}, the release's upload (uv --exclude-newer; torch kept): "
                                    f"{answer['predates']}")
                shutil.rmtree(env, ignore_errors=True)
                answer = _make(env, recipe, source, trainer, version, out, log, as_of=day)
        except EnvironmentBuildError as e:
            raise TrainerBuildError(str(e)) from None
        recipe_file = env / "recipe.txt"
        recipe_file.write_text(recipe.text())
        (env / "probe.json").write_text(json.dumps(answer) + "\n")
    (env / "build.json").write_text(json.dumps({"seconds": round(time.perf_counter() - start, 1)}) + "\n")
    (env / "ready").write_text(f"{name}\n")
    add_setup_seconds(time.perf_counter() - start)
    progress(env, f"{trainer}=={version}", "ready")


def _make(env: Path, recipe: Recipe, source: Path | None, trainer: str, version: str, out, log,
          as_of: str | None = None) -> dict:
    """venv, the recipe, the trainer ``--no-deps``, then the closure; ``as_of``: resolve only what the index held
    that day (torch, pinned to its CPU wheel, exempt)."""
    uv = uv_binary()
    make = [*uv, "venv", "--quiet", "--python", sys.executable, str(env)] if uv else \
        [sys.executable, "-m", "venv", str(env)]
    run_step(make, out, log, env, f"{trainer}=={version}", dict(os.environ))
    installer, call_env = install_command(env)
    if as_of:
        installer = [*installer, "--exclude-newer", as_of, "--exclude-newer-package", "torch=2100-01-01"]
    recipe_file = env / "recipe.txt"
    recipe_file.write_text(recipe.text())
    run_step([*installer, "-r", str(recipe_file)], out, log, env, f"{trainer}=={version}", call_env)
    package = str(source) if source is not None else f"{DISTRIBUTION[trainer]}=={version}"
    run_step([*installer, "--no-deps", "-r", str(recipe_file), package], out, log, env, f"{trainer}=={version}", call_env)
    return _closure(env, recipe, trainer, installer, call_env, out, log, version)


def upload_day(dist: str, version: str) -> str:
    """The day after ``dist==version`` was uploaded (PEP 691 JSON of the index's simple page), for
    ``--exclude-newer``."""
    import datetime
    import urllib.request

    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(f"{index}/{dist}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        files = json.load(urllib.request.urlopen(request, timeout=60))["files"]
    except (OSError, ValueError, KeyError) as e:
        raise TrainerBuildError(f"cannot read when {dist}=={version} was uploaded ({e})") from None
    times = [f["upload-time"] for f in files if f.get("upload-time")
             and re.match(rf"{re.escape(dist.replace('-', '_'))}-{re.escape(version)}(-|\.tar)", f["filename"])]
    if not times:
        raise TrainerBuildError(f"the index gives no upload time for {dist}=={version}")
    first = datetime.datetime.fromisoformat(min(times).replace("Z", "+00:00"))
    return (first + datetime.timedelta(days=1)).date().isoformat()


def _closure(env: Path, recipe: Recipe, trainer: str, installer, call_env, out, log, version) -> dict:
    """Run build-tiny in the environment; add each module it could not import; repeat."""
    answer = {}
    for _ in range(MAX_ROUNDS):
        progress(env, f"{trainer}=={version}", "building a tiny draft once (the probe: what it imports that is missing)")
        with tempfile.TemporaryDirectory(prefix="eagle3-contracts-trainer-probe-") as scratch:
            answer = run_build_tiny(env / "bin" / "python", trainer, Path(scratch) / "out", reference=False)
        missing = NEEDS.search(answer.get("error", ""))
        if not missing:
            return answer
        module = missing.group(1)
        top = module.split(".")[0]
        dist = canonical(IMPORT_TO_DIST.get(top, top))
        if dist in CPU_IMPORTABLE and CPU_IMPORTABLE[dist] not in recipe.lines:
            recipe.add(CPU_IMPORTABLE[dist], f"{top}: imported by build-tiny at module level; "
                                             f"{CPU_IMPORTABLE[dist]} (importable without a GPU)")
            run_step([*installer, CPU_IMPORTABLE[dist]], out, log, env, f"{trainer}=={version}", call_env)
            continue
        if CUDA_STACKS.match(dist) or TRAINING_STACKS.match(dist):
            answer["stopped"] = f"build-tiny imports {module}, a CUDA or multi-GPU stack never installed here"
            return answer
        requirement = recipe.declared.get(dist, dist)
        installed = _installed_version(env, dist)
        if installed is not None and module != top and dist == "torch":
            answer["stopped"] = f"torch {installed} (the CPU wheel every environment keeps) has no {module}"
            return answer
        if installed is not None and module != top:
            # the distribution is there but no longer has the module the release imports (speculators 0.3.0 imports
            # transformers.modeling_attn_mask_utils, which transformers 5 removed): the release predates what was
            # resolved today, so the environment is made again as of the release's upload (``_build``)
            answer["predates"] = f"{dist} {installed} has no {module}, which build-tiny imports"
            return answer
        if requirement in recipe.lines:
            answer["stopped"] = f"{module} still cannot be imported with {requirement} installed"
            return answer
        recipe.add(requirement, f"{top}: imported by build-tiny; "
                                + (f"{requirement} as declared" if dist in recipe.declared else "undeclared (unpinned)"))
        run_step([*installer, requirement], out, log, env, f"{trainer}=={version}", call_env)
    answer["stopped"] = f"more than {MAX_ROUNDS} missing imports"
    return answer


def _installed_version(env: Path, dist: str) -> str | None:
    """The version of ``dist`` installed in ``env`` (None: not installed)."""
    done = subprocess.run([str(env / "bin" / "python"), "-c", "import sys, importlib.metadata as m; "
                           "print(m.version(sys.argv[1]))", dist], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def run_build_tiny(python: Path, trainer: str, out: Path, reference: bool = True, timeout: int = 1800) -> dict:
    """``python -m contracts.trainers.tiny`` in a trainer's environment (only this package on its path): the
    record's summary, or ``{"error": the one line build-tiny printed}``."""
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-build-") as scratch:
        os.symlink(Path(contracts.__file__).resolve().parent, Path(scratch) / "contracts")
        call_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        call_env.update(PYTHONPATH=scratch, PYTHONNOUSERSITE="1", TOKENIZERS_PARALLELISM="false")
        cmd = [str(python), "-m", "contracts.trainers.tiny", trainer, str(out)] + ([] if reference else
                                                                                   ["--no-reference"])
        try:
            done = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True, env=call_env, check=False,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"build-tiny ran past {timeout} s"}
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    lines = [l for l in done.stderr.strip().splitlines() if l.startswith("build-tiny: ")]
    if lines:
        return {"error": lines[-1].removeprefix("build-tiny: ")}
    tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"error": f"build-tiny exited {done.returncode}: {tail[:400]}"}
