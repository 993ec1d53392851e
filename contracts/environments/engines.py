"""A cached environment per engine release, made from the recipe derived from that release's own metadata
(``contracts.environments.recipes``), with uv.

Any release on the package index can be asked for (``--engine sglang==X`` / ``vllm==X``); none needs a recipe
written by hand. SGLang goes in ``--no-deps`` beside its derived recipe (its declared dependencies are CUDA stacks);
vLLM's CPU build with its own dependencies, the CUDA builds of torchvision / torchaudio / torchcodec that come with
it removed. A new environment is then probed with the adapter's own steps (``contracts.engines.probe``) and each
module its EAGLE-3 path could not import is added from the release's own declared requirements until the path
runs; the recipe as finally installed and the probe's last answer are kept in the environment (``recipe.txt``,
``probe.json``).

Environments live in ``$EAGLE3_CONTRACTS_ENVS`` (default ``~/.cache/eagle3-contracts/envs``), one directory per
release and derived recipe, with uv's cache beside them (``uv-cache``, the same filesystem: files are hard-linked,
so each further release costs seconds and tens of MB). A file lock keeps parallel test workers from building the
same one twice; only a finished environment gets its ``ready`` mark.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import contracts
from contracts.engine_profile import InstallProfile
from contracts.environments.cache import mark_used
from contracts.engine_spec import EngineSpec, EngineSpecError
from contracts.environments.recipes import (TRITON_API_ERROR, Recipe, ReleaseNotFound, derive, envs_root,
                                            gpu_wheel_only, index_versions, paired_triton, release_sdist,
                                            requirement_for_module)

BUILDER = "uv-closure-4"  # bump when the way environments are made changes (part of each environment's key)
MAX_CLOSURE_ROUNDS = 10


class EnvironmentBuildError(RuntimeError):
    """The environment could not be made (the message ends with the installer's last line)."""


# Seconds this process spent making what a check needs once (environments, trainer references): a report says its
# check time and this apart, and a long first run says what it is doing as it goes (``progress``).
_SETUP = {"seconds": 0.0}
_STARTED: dict[str, float] = {}  # environment being made -> when its build began


def setup_seconds() -> float:
    return _SETUP["seconds"]


def add_setup_seconds(seconds: float) -> None:
    _SETUP["seconds"] += seconds


def build_started(env: Path) -> float:
    """Mark that ENV's build begins now (its progress lines count from here); returns the time."""
    _STARTED[str(env)] = time.perf_counter()
    return _STARTED[str(env)]


def progress(env: Path, label: str, what: str) -> None:
    """One line on stderr, with the time since this environment's build began (LABEL: the release it is for,
    ``sglang==0.5.23``): a first run that makes environments takes minutes, and used to say so in one line at its
    start."""
    since = time.perf_counter() - _STARTED.get(str(env), time.perf_counter())
    print(f"eagle3-contracts: [{since:4.0f} s] {label}: {what}", file=sys.stderr, flush=True)


def _describe(cmd: list[str]) -> str:
    """What an installer command does, said for the progress line."""
    if "venv" in cmd[:3]:
        return "making the virtual environment"
    if "uninstall" in cmd:
        return f"removing {', '.join(c for c in cmd[cmd.index('uninstall') + 1:] if not c.startswith('-') and '/' not in c)}"
    named = [c for c in cmd if "==" in c or (not c.startswith("-") and "/" not in c and c not in ("pip", "install"))]
    if "-r" in cmd:
        lines = [line for line in Path(cmd[cmd.index("-r") + 1]).read_text().splitlines()
                 if line.strip() and not line.startswith(("#", "-"))] if Path(cmd[cmd.index("-r") + 1]).is_file() else []
        extra = [c for c in named if "==" in c]
        return f"installing {', '.join(extra) + ' beside ' if extra else ''}its recipe ({len(lines)} requirements)"
    return f"installing {', '.join(named[-1:]) or ' '.join(cmd[-1:])}"


def release_order(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.replace(".post", ".").split("."))


def check_release(release: EngineSpec) -> None:
    """RELEASE (``name==version``) is a release on the package index (else ``EngineSpecError`` with the nearest ones); for
    vLLM, of its CPU build or, ahead of it, of its GPU wheel."""
    version = str(release.version)
    try:
        versions = index_versions(release.profile)
        if version not in versions and gpu_wheel_only(release):
            return
    except ReleaseNotFound:  # the index cannot be asked (offline): the environment builder says what it finds
        return
    if version not in versions:
        near = sorted(versions, key=lambda v: abs(_as_number(v) - _as_number(version)))[:5]
        raise EngineSpecError(f"{release.profile.package}=={version} is not a release on the package index (nearest: "
                              f"{', '.join(sorted(near, key=release_order))})")


def _as_number(version: str) -> float:
    parts = release_order(version) + (0, 0, 0, 0)
    return parts[0] * 1e6 + parts[1] * 1e4 + parts[2] * 1e2 + parts[3]


def environment_for(release: EngineSpec) -> Path:
    """The Python interpreter of the cached environment for RELEASE (``name==version``; built first if missing)."""
    try:
        recipe = derive(release)
    except ReleaseNotFound as e:
        raise EnvironmentBuildError(f"cannot make the {release} environment: {e}") from None
    text = recipe.text()
    digest = hashlib.sha256((text + BUILDER + sys.version).encode()).hexdigest()[:10]
    root = envs_root()
    root.mkdir(parents=True, exist_ok=True)
    env = root / f"{release.name}-{release.version}-py{sys.version_info.major}{sys.version_info.minor}-{digest}"
    python = env / "bin" / "python"
    with open(root / f"{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (env / "ready").is_file():
            _build(env, recipe, release)
    mark_used(env)
    return python


def build_report(python: Path) -> dict:
    """What the builder recorded in the environment of ``python``: the recipe installed, the probe's answer, the
    build time."""
    env = Path(python).parent.parent
    out = {}
    for key, file in (("recipe", "recipe.txt"), ("probe", "probe.json"), ("build", "build.json")):
        path = env / file
        if path.is_file():
            out[key] = path.read_text() if file.endswith(".txt") else json.loads(path.read_text())
    return out


def uv_binary() -> list[str] | None:
    """uv's binary (the ``uv`` package, a dependency of this one); None means pip (``EAGLE3_CONTRACTS_INSTALLER=pip``:
    where uv is not wanted, and for ``benchmarks/bench_environments.py``'s comparison)."""
    if os.environ.get("EAGLE3_CONTRACTS_INSTALLER", "uv") == "pip":
        return None
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    return [find_uv_bin()]


def install_command(env: Path) -> tuple[list[str], dict]:
    """The install command for ``env`` (uv when it is installed, else pip) and its environment."""
    uv = uv_binary()
    call_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    if uv is None:
        return [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"], call_env
    call_env.update(UV_CACHE_DIR=str(envs_root() / "uv-cache"), UV_LINK_MODE="hardlink", UV_NO_PROGRESS="1")
    links = [a for p in (os.environ.get("PIP_FIND_LINKS") or "").split() for a in ("--find-links", p)]
    return [*uv, "pip", "install", "--quiet", "--python", str(env / "bin" / "python"), *links], call_env


def _build(env: Path, recipe: Recipe, release: EngineSpec) -> None:
    """Make the environment in place (the caller holds its lock); only a finished one gets its ``ready`` mark,
    so a crash leaves a directory that is rebuilt, never one that looks ready."""
    start = build_started(env)
    shutil.rmtree(env, ignore_errors=True)
    log = env.with_name(env.name + ".log")
    print(f"eagle3-contracts: making the {release} environment once (cached in {env}; log {log})",
          file=sys.stderr, flush=True)
    # a GPU wheel's release (recipe.package) goes in --no-deps beside its recipe; else as the engine's profile says
    install = InstallProfile(with_deps=False) if recipe.package else release.profile.install
    package = recipe.package or release.profile.package
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        uv = uv_binary()
        make = [*uv, "venv", "--quiet", "--python", sys.executable, str(env)] if uv else \
            [sys.executable, "-m", "venv", str(env)]
        run_step(make, out, log, env, str(release), dict(os.environ))
        installer, call_env = install_command(env)
        recipe_file = env / "recipe.txt"
        recipe_file.write_text(recipe.text())
        run_step([*installer, "-r", str(recipe_file)], out, log, env, str(release), call_env)
        engine = [*installer, *([] if install.with_deps else ["--no-deps"]), "-r", str(recipe_file),
                  f"{package}=={release.version}"]
        run_step(engine, out, log, env, str(release), call_env)
        if install.remove:
            remove = [*(uv or []), "pip", "uninstall", "--quiet", "--python", str(env / "bin" / "python"), *install.remove] \
                if uv else [str(env / "bin" / "python"), "-m", "pip", "uninstall", "--quiet", "--yes", *install.remove]
            run_step(remove, out, log, env, str(release), call_env, check=False)
        if install.from_source:
            for local in pkgutil.resolve_name(install.from_source)(release_sdist(release), env):
                run_step([*installer, str(local)], out, log, env, str(release), call_env)
        installed = time.perf_counter()
        answer = _closure(env, recipe, release, installer, call_env, out, log)
        recipe_file.write_text(recipe.text())
        (env / "probe.json").write_text(json.dumps(answer) + "\n")
    done = time.perf_counter()
    (env / "build.json").write_text(json.dumps({"seconds": round(done - start, 1),
                                                "install_s": round(installed - start, 1),
                                                "closure_s": round(done - installed, 1),
                                                "installer": "uv" if uv else "pip"}) + "\n")
    (env / "ready").write_text(f"{release}\n")
    add_setup_seconds(done - start)
    progress(env, str(release), "ready")


def run_step(cmd: list[str], out, log: Path, env: Path, label: str, call_env: dict, check=True) -> None:
    progress(env, label, _describe(cmd))
    out.write("$ " + " ".join(cmd) + "\n")
    out.flush()
    done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False, env=call_env)
    if done.returncode and check:
        out.flush()
        last = (log.read_text().strip().splitlines() or ["?"])[-1]
        shutil.rmtree(env, ignore_errors=True)
        raise EnvironmentBuildError(f"could not make the {label} environment ({last}); see {log}")


def _closure(env: Path, recipe: Recipe, release: EngineSpec, installer, call_env, out, log) -> dict:
    """Probe the environment with the adapter's own steps; add what the path could not import; repeat."""
    answer = {}
    for _ in range(MAX_CLOSURE_ROUNDS):
        progress(env, str(release), "running its EAGLE-3 path once (the probe: what it imports that is missing)")
        answer = _probe(env, release)
        missing = answer.get("missing")
        if not missing and TRITON_API_ERROR.search(answer.get("error", "")) and not recipe_pins_triton(recipe):
            paired = paired_triton(recipe)
            if paired is not None:  # an older release's code reads a triton API the current series removed
                recipe.add(*paired)
                run_step([*installer, paired[0]], out, log, env, str(release), call_env)
                continue
        if not missing:
            return answer
        found = requirement_for_module(recipe, missing)
        if found is None:
            own = missing.split(".")[0] in (release.name, "contracts")  # the engine's own package, or this suite's
            where = f" ({answer['where']})" if answer.get("where") else ""
            answer["stopped"] = (f"{missing} is not part of {release}: the adapter has no path for this "
                                 f"release there{where}" if own else
                                 f"the EAGLE-3 path imports {missing}{where}, a CUDA stack never installed here")
            return answer
        requirement, note = found
        if requirement in recipe.lines:
            answer["stopped"] = f"{missing} still cannot be imported with {requirement} installed"
            return answer
        recipe.add(requirement, note)
        try:
            run_step([*installer, requirement], out, log, env, str(release), call_env)
        except EnvironmentBuildError as e:
            raise EnvironmentBuildError(f"{e} (adding {requirement} for the import of {missing})") from None
    answer["stopped"] = f"more than {MAX_CLOSURE_ROUNDS} missing imports"
    return answer


def recipe_pins_triton(recipe: Recipe) -> bool:
    return any(line.startswith("triton==") for line in recipe.lines)


def _probe(env: Path, release: EngineSpec) -> dict:
    """Run ``contracts.engines.probe`` in the environment (only this package on its path, as a worker has it)."""
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-probe-") as scratch:
        os.symlink(Path(contracts.__file__).resolve().parent, Path(scratch) / "contracts")
        call_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        call_env.update(PYTHONPATH=scratch, PYTHONNOUSERSITE="1")
        done = subprocess.run([str(env / "bin" / "python"), "-m", "contracts.engines.probe", release.name], cwd=scratch,
                              capture_output=True, text=True, env=call_env, check=False, timeout=900)
    line = (done.stdout.strip().splitlines() or [""])[-1]
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return {"error": f"the probe exited {done.returncode}: "
                         f"{(done.stderr.strip().splitlines() or ['(no output)'])[-1][:300]}", "step": "start"}
