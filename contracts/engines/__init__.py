"""Adapters over inference engines' real code. Each engine adapter takes paths in and gives plain,
serialisable observations out (see ``contracts.observations``); the checks never import an engine.

An ``Engine`` is the seam a ``Subject`` asks for observations: ``InProcessSGLang`` runs the SGLang installed
in this environment; ``WorkerEngine`` runs an adapter in a subprocess inside another environment (another SGLang
release, or vLLM's CPU build, each made from this project's recipe, ``contracts.engines.environments``) and
decodes the JSON it sends back into the same observation types, so one report can hold verdicts from several
releases of both engines.
"""

from __future__ import annotations

from typing import Protocol


class Engine(Protocol):
    """What a subject asks of an engine; every method returns an observation (or raises the adapter's
    ``EngineBuildError`` / ``TargetBuildError`` when the engine's own code refuses)."""

    spec: str  # "sglang" (the one installed here), "sglang==X", "vllm" (its pinned release) or "vllm==X"

    def info(self) -> dict: ...

    def load(self, engine_dir, target_dir=None): ...  # the target: vLLM builds a draft against its config

    def aux(self, engine_dir, target_dir, trainer_hf_indices): ...

    def config(self, engine_dir, trained_config: dict, switches: dict, target_config: dict | None): ...

    def embed_head(self, engine_dir, target_dir): ...

    def forward(self, engine_dir, target_dir, reference_path): ...

    def surface(self) -> dict: ...  # the release's EAGLE-3 contract surface (drift between releases)


class EngineSpecError(ValueError):
    """An ``--engine`` value that names no engine or no release this suite has a recipe for."""


ENGINES = ("sglang", "vllm")
# vLLM is never installed beside the suite (its CPU build pins its own torch and transformers): a bare
# ``vllm`` means this release, in its own environment.
VLLM_PINNED = "0.32.0"


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``"sglang"`` -> ("sglang", None); ``"sglang==0.5.9"`` -> ("sglang", "0.5.9"); ``"vllm"`` -> ("vllm", None)."""
    name, sep, version = spec.strip().partition("==")
    if name not in ENGINES:
        raise EngineSpecError(f"unsupported engine {name!r} (supported: sglang, sglang==VERSION, vllm, vllm==VERSION)")
    if sep and not version:
        raise EngineSpecError(f"{spec!r}: give a version after '=='")
    return name, version or None


def canonical(spec: str) -> str:
    """The spec an engine is known by in reports and caches: ``vllm`` is ``vllm==<pinned>``."""
    name, version = parse_spec(spec)
    if name == "vllm" and version is None:
        version = VLLM_PINNED
    return f"{name}=={version}" if version else name


_engines: dict[str, Engine] = {}
_unmade: dict[str, Exception] = {}  # releases whose environment could not be made, this process (not retried)


def engine_for(spec: str = "sglang") -> Engine:
    """The engine for ``spec``, one per process: in-process when it is the SGLang installed here (or no version
    is asked), else a worker in that release's cached environment (built on first use)."""
    from contracts.engines.inprocess import InProcessSGLang, installed_sglang

    key = canonical(spec)
    name, version = parse_spec(key)
    if key in _unmade:
        raise _unmade[key]
    if key not in _engines:
        if name == "sglang" and (version is None or version == installed_sglang()):
            _engines[key] = InProcessSGLang(key)
        else:
            from contracts.engines.environments import EnvironmentBuildError, environment_for
            from contracts.engines.remote import WorkerEngine

            try:
                _engines[key] = WorkerEngine(key, environment_for(name, version))
            except EnvironmentBuildError as e:
                _unmade[key] = e
                raise
    return _engines[key]


def close_others(spec: str) -> None:
    """Stop the workers of every engine but ``spec``: a run over many releases (the compatibility sweep: items
    grouped by release) holds one release's worker at a time, not one per release it has passed (each about
    0.4 GB)."""
    keep = canonical(spec)
    for key, engine in _engines.items():
        close = getattr(engine, "close", None)
        if key != keep and close is not None:
            close()  # (a later call starts it again: close_all still reaches it)


def close_all() -> None:
    """Stop every engine worker this process started."""
    for engine in _engines.values():
        close = getattr(engine, "close", None)
        if close is not None:
            close()
    _engines.clear()
