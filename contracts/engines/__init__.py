"""Adapters over inference engines' real code. Each engine adapter takes paths in and gives plain,
serialisable observations out (see ``contracts.observations``); the checks never import an engine.

An ``Engine`` is the seam a ``Subject`` asks for observations: ``InProcess`` runs the adapter of the engine installed
in this environment (the in-process engine of the profiles, ``contracts.engine_profile``: SGLang); ``WorkerEngine``
runs an adapter in a subprocess inside another environment (another release, vLLM's CPU build, llama.cpp's wheel,
each made from this project's recipe, ``contracts.environments.engines``) and decodes the JSON it sends back into the
same observation types, so one report can hold verdicts from several releases of every engine.
"""

from __future__ import annotations

from typing import Protocol

from contracts.engine_spec import ENGINES, RUNNERS, EngineSpec, EngineSpecError  # noqa: F401  (re-exported)


class Engine(Protocol):
    """What a subject asks of an engine; every method returns an observation (or raises the adapter's
    ``EngineBuildError`` / ``TargetBuildError`` when the engine's own code refuses). ``runner``: the code path
    judged (vLLM's "v1" / "v2"; None: the one a GPU deployment of this release takes by default), as ``path``
    resolved it; SGLang's adapter always judges its release's default worker."""

    spec: EngineSpec  # the release (a version always; no runner)

    def info(self) -> dict: ...

    def path(self, engine_dir, target_dir, runner=None): ...  # which code path serves this draft, and why

    def load(self, engine_dir, target_dir=None, runner=None): ...  # the target: vLLM builds a draft against its config

    def aux(self, engine_dir, target_dir, trainer_hf_indices, runner=None): ...

    def config(self, engine_dir, trained_config: dict, switches: dict, target_config: dict | None): ...

    def embed_head(self, engine_dir, target_dir, runner=None): ...

    def forward(self, engine_dir, target_dir, reference_path, runner=None): ...

    def surface(self) -> dict: ...  # the release's EAGLE-3 contract surface (drift between releases)

    def ranks(self, engine_dirs, target_dir, tp, runner=None): ...  # each draft as TP ranks build it: RankObservations


_engines: dict[EngineSpec, Engine] = {}
_unmade: dict[EngineSpec, Exception] = {}  # releases whose environment could not be made, this process (not retried)


def engine_for(spec: EngineSpec | None = None) -> Engine:
    """The engine for ``spec`` (None: the default engine), one per process: in-process when it is the release of an
    in-process engine installed here (or no version is asked), else a worker in that release's cached environment
    (built on first use)."""
    from contracts.engine_profile import default_engine
    from contracts.engines.inprocess import InProcess, judged_in_process

    key = (spec or EngineSpec(default_engine())).release()
    if key in _unmade:
        raise _unmade[key]
    if key not in _engines:
        if judged_in_process(key):
            _engines[key] = InProcess(key)
        else:
            from contracts.environments.engines import EnvironmentBuildError, environment_for
            from contracts.engines.remote import WorkerEngine

            try:
                _engines[key] = WorkerEngine(key, environment_for(key))
            except EnvironmentBuildError as e:
                _unmade[key] = e
                raise
    return _engines[key]


def close_others(spec: EngineSpec) -> None:
    """Stop the workers of every engine but ``spec``: a run over many releases (the compatibility sweep: items
    grouped by release) holds one release's worker at a time, not one per release it has passed (each about
    0.4 GB)."""
    keep = spec.release()
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
