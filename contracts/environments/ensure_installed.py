"""Install into this environment only what is missing or changed: ``tox -e check``'s setup.

The README runs every check through ``tox -e check``; tox reinstalls the project and re-ran ``pip install --no-deps
sglang==X`` on every call, 3-4 s before each check started (a one-contract check takes about 10 s). Here the
project is installed editable once (its code is read from the checkout, so a code change needs no reinstall) and
again only when what an editable install fixes moved: ``pyproject.toml``'s dependencies, scripts or plugin entry
points. Each pinned requirement is installed ``--no-deps`` only when its installed version differs (SGLang's
declared dependencies are CUDA stacks: it goes in without them, as everywhere in this project).

    python -m contracts.environments.ensure_installed --project DIR [NAME==VERSION ...]
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from importlib import metadata
from pathlib import Path

STAMP = "eagle3-contracts-project.sha256"  # beside the environment's interpreter: what the editable install saw


def project_stamp(project: Path) -> str:
    """sha256 of what an editable install of PROJECT fixes in the environment (its pyproject.toml's text)."""
    return hashlib.sha256((project / "pyproject.toml").read_bytes()).hexdigest()


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
                   check=True)


def ensure(project: Path, pins: list[str]) -> list[str]:
    """Install what PINS and PROJECT need that this environment lacks; returns what was installed."""
    done = []
    stamp_file = Path(sys.prefix) / STAMP
    stamp = project_stamp(project)
    if _installed("eagle3-contracts") is None or not stamp_file.is_file() or stamp_file.read_text() != stamp:
        _pip("-e", str(project))
        stamp_file.write_text(stamp)
        done.append(f"eagle3-contracts (editable, {project})")
    for pin in pins:
        name, _, version = pin.partition("==")
        if _installed(name) != version:
            _pip("--no-deps", pin)
            done.append(pin)
    return done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contracts.environments.ensure_installed")
    parser.add_argument("--project", required=True, type=Path)
    parser.add_argument("pins", nargs="*")
    args = parser.parse_args(argv)
    for what in ensure(args.project.resolve(), args.pins):
        print(f"installed {what}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
