"""A converged build kept by the hash of what made it, so the next run with the same trainer code reuses it
instead of training again (about 17 minutes for speculators on two cores).

``--accept`` asks whether the trainer's code still trains a draft an engine accepts; retraining when nothing that
decides the weights moved tells nothing new. The key is a sha256 over everything that decides them:
  - the trainer and its builder (``contracts/trainers/*.py``: the training loop and the synthetic language),
  - the trainer's own code as installed: its wheel's RECORD (which lists each file's sha256), or, for an editable
    install (a training repository), the bytes of every ``.py`` file in its source tree,
  - every distribution the trainer requires, transitively, as installed in the interpreter that trains (name and
    version: torch's kernels, transformers; not the test tools beside them),
  - the converged target's files (the synthetic language is the builder's code),
  - the CPU's instruction-set flags (AVX-512 and AVX2 machines train drafts 1.3% apart).
A change to any of them trains again. A kept build is reused only when every file its record lists still has the
sha256 recorded at build time (a damaged cache trains again, never serves a different draft). Kept under the
environments' cache (``$EAGLE3_CONTRACTS_ENVS/converged-builds``), shared by clones; ``EAGLE3_CONTRACTS_RETRAIN=1``
trains regardless.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from contracts.builds import RECORD
from contracts.trainers.common import sha256_files

CACHE_DIR = "converged-builds"
HERE = Path(__file__).resolve().parent


def cache_root() -> Path:
    from contracts.environments.recipes import envs_root

    return envs_root() / CACHE_DIR


def _tree_digest(root: Path, pattern: str = "*.py") -> str:
    """sha256 over the relative names and bytes of ROOT's files matching PATTERN (hidden and cache folders left out)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob(pattern)):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts) or not path.is_file():
            continue
        digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def trainer_code_digest(distribution: str) -> str:
    """The trainer's code as this interpreter imports it: its RECORD, or its editable source tree's bytes."""
    dist = metadata.distribution(distribution)
    direct = dist.read_text("direct_url.json")
    if direct:
        info = json.loads(direct)
        if info.get("dir_info", {}).get("editable"):
            return "editable:" + _tree_digest(Path(unquote(urlparse(info["url"]).path)))
    return "record:" + hashlib.sha256("\n".join(_record_lines(dist.read_text("RECORD") or "")).encode()).hexdigest()


# RECORD entries that differ between two installs of one wheel: the installer's own marks, and the scripts it writes
# outside the package ("../../../bin/..."), whose shebang names each environment's interpreter: counted, one CI run
# after another trained the converged draft again with the same trainer code
INSTALL_MARKS = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")


def _record_lines(record: str) -> list[str]:
    """The RECORD's entries for the package's own files (path, hash, size), sorted; compiled bytecode left out."""
    keep = []
    for line in record.splitlines():
        path = line.split(",", 1)[0]
        if not path or path.startswith("..") or path.endswith(".pyc") or path.rsplit("/", 1)[-1] in INSTALL_MARKS:
            continue
        keep.append(line)
    return sorted(keep)


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    import platform

    return platform.machine()


def requirement_closure(distribution: str) -> list[str]:
    """DISTRIBUTION and every distribution it requires, transitively, as installed here (``name==version``, sorted):
    what the training can import. Test tools installed beside it (Hypothesis publishes several releases a day) are
    not part of it, so a new one does not retrain the draft."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, str] = {}
    todo = [distribution]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist.version
        for line in dist.requires or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return sorted(f"{name}=={version}" for name, version in seen.items())


def build_key(parts: dict) -> str:
    """The key of a converged build made of PARTS (``key_parts``)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def key_parts(trainer: str, distribution: str, inputs: list[Path]) -> dict:
    """What the key of a converged build of TRAINER (its package DISTRIBUTION) by this interpreter on INPUTS' files is
    made of (kept in its record: two keys for one build can then be told apart)."""
    installed = requirement_closure(distribution)
    return {
        "trainer": trainer,
        "builder": _tree_digest(HERE),
        "trainer_code": trainer_code_digest(distribution),
        "installed": installed,
        "inputs": {str(p.name): sha256_files(p) if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
                   for p in inputs},
        "python": sys.version,
        "cpu": _cpu_flags(),
    }


def reuse(key: str, out: Path, here: dict | None = None) -> dict | None:
    """The kept build under KEY copied into OUT (its record says so), when every file it lists is as recorded; HERE:
    the record's fields that name this checkout's paths (the converged target the build was judged beside), which a
    build kept by another clone names in its own."""
    if os.environ.get("EAGLE3_CONTRACTS_RETRAIN") == "1":
        return None
    kept = cache_root() / key
    record_file = kept / RECORD
    if not record_file.is_file():
        return None
    record = json.loads(record_file.read_text())
    if sha256_files(kept / record["draft"]) != record["files"]:
        return None
    for name in os.listdir(kept):
        source = kept / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, out / name)
    os.utime(kept)  # used now (``eagle3-contracts envs`` lists and removes builds by their last use)
    record.update(here or {}, reused={"key": key, "from": str(kept)})
    (out / RECORD).write_text(json.dumps(record, indent=1, default=str) + "\n")
    return record


def keep(key: str, out: Path) -> None:
    """Keep OUT's build under KEY (written beside and renamed in one step: two runs never see half of one)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    try:
        for name in os.listdir(out):
            source = out / name
            (shutil.copytree if source.is_dir() else shutil.copy2)(source, scratch / name)
        os.rename(scratch, root / key)
    except OSError:  # another run kept the same build first
        shutil.rmtree(scratch, ignore_errors=True)
