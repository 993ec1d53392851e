"""Adapters over inference engines' real code. Each engine adapter takes paths in and gives plain,
serialisable observations out (see ``contracts.observations``); the checks never import an engine.

An ``Engine`` is the seam a ``Subject`` asks for observations: ``InProcessSGLang`` runs the SGLang installed
in this environment; ``WorkerEngine`` runs the same adapter in a subprocess inside another SGLang release's
environment (made from that release's recipe, ``contracts.engines.environments``) and decodes the JSON it
sends back into the same observation types, so one report can hold verdicts from several releases.
"""

from __future__ import annotations

from typing import Protocol


class Engine(Protocol):
    """What a subject asks of an engine; every method returns an observation (or raises the adapter's
    ``EngineBuildError`` / ``TargetBuildError`` when the engine's own code refuses)."""

    spec: str  # "sglang" (the one installed here) or "sglang==X"

    def info(self) -> dict: ...

    def load(self, engine_dir): ...

    def aux(self, engine_dir, target_dir, trainer_hf_indices): ...

    def config(self, engine_dir, trained_config: dict, switches: dict, target_config: dict | None): ...

    def embed_head(self, engine_dir, target_dir): ...

    def forward(self, engine_dir, target_dir, reference_path): ...

    def surface(self) -> dict: ...  # contracts.engines.sglang.surface: the release's EAGLE-3 contract surface


class EngineSpecError(ValueError):
    """An ``--engine`` value that names no engine or no release this suite has a recipe for."""


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``"sglang"`` -> ("sglang", None); ``"sglang==0.5.9"`` -> ("sglang", "0.5.9")."""
    name, sep, version = spec.strip().partition("==")
    if name != "sglang":
        raise EngineSpecError(f"unsupported engine {name!r} (supported: sglang, sglang==VERSION)")
    if sep and not version:
        raise EngineSpecError(f"{spec!r}: give a version after '=='")
    return name, version or None


_engines: dict[str, Engine] = {}


def engine_for(spec: str = "sglang") -> Engine:
    """The engine for ``spec``, one per process: in-process when the release is the one installed here (or no
    version is asked), else a worker in that release's cached environment (built on first use)."""
    from contracts.engines.inprocess import InProcessSGLang, installed_sglang

    name, version = parse_spec(spec)
    key = f"{name}=={version}" if version else name
    if key not in _engines:
        if version is None or version == installed_sglang():
            _engines[key] = InProcessSGLang(key)
        else:
            from contracts.engines.environments import environment_for
            from contracts.engines.remote import WorkerEngine

            _engines[key] = WorkerEngine(key, environment_for(name, version))
    return _engines[key]


def close_all() -> None:
    """Stop every engine worker this process started."""
    for engine in _engines.values():
        close = getattr(engine, "close", None)
        if close is not None:
            close()
    _engines.clear()
