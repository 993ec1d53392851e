"""What the environments' cache holds, and taking old entries out of it (``eagle3-contracts envs``).

Every engine release, trainer release and converged build a run needed is kept under ``$EAGLE3_CONTRACTS_ENVS``
(default ``~/.cache/eagle3-contracts/envs``), shared by every clone, tox and the console script; nothing else ever
removes them, so the cache only grows (a new recipe for the same release is a new directory). Each use marks the
entry (``last-used``), so what no run has needed for a while, and what a newer build of the same release
superseded, can be named and removed. An entry whose lock a build holds is never removed.

Sizes count each file's blocks once: a file hard-linked from uv's cache (``uv-cache``: what lets each further release
cost tens of MB) is counted as shared, not as the environment's own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from contracts.environments.recipes import envs_root

USED = "last-used"
BUILDS = "converged-builds"
UV_CACHE = "uv-cache"


def mark_used(env: Path) -> None:
    """ENV was needed now (its ``last-used`` mark; a read-only cache is left as it is)."""
    try:
        (Path(env) / USED).touch()
    except OSError:
        pass


@dataclass
class Entry:
    name: str
    kind: str  # engine, trainer, converged build
    release: str  # sglang==0.5.23, trainer speculators==0.9.0, the build's key
    ready: bool  # a finished environment (a build that crashed leaves one without its mark)
    own_bytes: int
    shared_bytes: int  # blocks of files hard-linked elsewhere (uv's cache)
    last_used: float  # epoch seconds: the last run that needed it (else when it was made)
    path: str

    def to_json(self) -> dict:
        return asdict(self)


def _stats(root: Path):
    """``os.lstat`` of every file under ROOT (one that vanished meanwhile left out)."""
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                yield os.lstat(os.path.join(folder, name))
            except OSError:
                continue


def _sizes(root: Path) -> tuple[int, int]:
    """(own, shared) bytes on disk under ROOT: a file with more than one link is shared."""
    own = shared = 0
    for st in _stats(root):
        if st.st_nlink > 1:
            shared += st.st_blocks * 512
        else:
            own += st.st_blocks * 512
    return own, shared


def _describe(path: Path) -> tuple[str, str]:
    """(kind, release) of an environment named ``<engine>-<version>-py311-<digest>`` or ``trainer-<name>-...``."""
    parts = path.name.split("-")
    if parts[0] == "trainer" and len(parts) >= 5:
        return "trainer", f"{parts[1]}=={parts[2]}"
    if len(parts) >= 4:
        return "engine", f"{parts[0]}=={parts[1]}"
    return "other", path.name


def entries(root: Path | None = None) -> list[Entry]:
    """Every environment and converged build in the cache, most recently used first."""
    root = Path(root or envs_root())
    found: list[Entry] = []
    if not root.is_dir():
        return found
    for path in sorted(root.iterdir()):
        if not path.is_dir() or path.name.startswith(".") or path.name in (UV_CACHE, BUILDS, "wheels"):
            continue
        kind, release = _describe(path)
        used = path / USED
        found.append(Entry(path.name, kind, release, (path / "ready").is_file(), *_sizes(path),
                           (used if used.exists() else path).stat().st_mtime, str(path)))
    builds = root / BUILDS
    if builds.is_dir():
        for path in sorted(builds.iterdir()):
            if path.is_dir() and not path.name.startswith("."):
                found.append(Entry(f"{BUILDS}/{path.name}", "converged build", path.name, True, *_sizes(path),
                                   path.stat().st_mtime, str(path)))
    return sorted(found, key=lambda e: -e.last_used)


def superseded(found: list[Entry]) -> list[Entry]:
    """Environments of a release that another environment of the same release was used after (a recipe or builder
    that moved on)."""
    newest: dict[tuple[str, str], Entry] = {}
    out = []
    for entry in found:  # most recently used first
        if entry.kind not in ("engine", "trainer"):
            continue
        key = (entry.kind, entry.release)
        if key in newest:
            out.append(entry)
        else:
            newest[key] = entry
    return out


def unused_for(found: list[Entry], days: float, now: float | None = None) -> list[Entry]:
    cutoff = (now or time.time()) - days * 86400
    return [e for e in found if e.last_used < cutoff]


def remove(entry: Entry) -> str | None:
    """Take ENTRY out of the cache; returns why it was kept instead (a build of it is running)."""
    path = Path(entry.path)
    lock_file = path.with_name(path.name + ".lock")
    if entry.kind in ("engine", "trainer"):
        with open(lock_file, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "a build of it is running"
            (path / "ready").unlink(missing_ok=True)  # never half-removed and still looking ready
            shutil.rmtree(path, ignore_errors=True)
        lock_file.unlink(missing_ok=True)
        path.with_name(path.name + ".log").unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
    return None


def disk_bytes(root: Path) -> int:
    """What ROOT takes on disk, each file's blocks counted once however many links it has."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for st in _stats(root):
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def _age(seconds: float) -> str:
    return f"{seconds / 3600:.0f} h ago" if seconds < 86400 else f"{seconds / 86400:.1f} days ago"


def render(found: list[Entry], root: Path) -> str:
    now = time.time()
    lines = [f"{root}: {len(found)} entries, {disk_bytes(root) / 2**30:.1f} GB on disk (uv's cache included; a file "
             f"hard-linked from it is 'shared')",
             f"{'entry':<58} {'release':<30} {'own':>9} {'shared':>9}  last used"]
    for e in found:
        state = "" if e.ready else "  (unfinished: rebuilt on next use)"
        lines.append(f"{e.name:<58} {e.release:<30} {e.own_bytes / 2**20:>7.0f}MB {e.shared_bytes / 2**20:>7.0f}MB  "
                     f"{_age(now - e.last_used)}{state}")
    uv = root / UV_CACHE
    if uv.is_dir():
        own, shared = _sizes(uv)
        lines.append(f"{UV_CACHE + '/':<58} {'(uv: what environments link to)':<30} {own / 2**20:>7.0f}MB "
                     f"{shared / 2**20:>7.0f}MB")
    return "\n".join(lines) + "\n"
