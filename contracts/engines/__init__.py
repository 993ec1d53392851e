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

from contracts.engines.errors import EngineSpecError  # noqa: F401  (re-exported: the CLI and plugin catch it here)


class Engine(Protocol):
    """What a subject asks of an engine; every method returns an observation (or raises the adapter's
    ``EngineBuildError`` / ``TargetBuildError`` when the engine's own code refuses). ``runner``: the code path
    judged (vLLM's "v1" / "v2"; None: the one a GPU deployment of this release takes by default), as ``path``
    resolved it; SGLang's adapter always judges its release's default worker."""

    spec: str  # the release: "sglang" (the one installed here), "sglang==X", "vllm" (its pinned release) or "vllm==X"

    def info(self) -> dict: ...

    def path(self, engine_dir, target_dir, runner=None): ...  # which code path serves this draft, and why

    def load(self, engine_dir, target_dir=None, runner=None): ...  # the target: vLLM builds a draft against its config

    def aux(self, engine_dir, target_dir, trainer_hf_indices, runner=None): ...

    def config(self, engine_dir, trained_config: dict, switches: dict, target_config: dict | None): ...

    def embed_head(self, engine_dir, target_dir, runner=None): ...

    def forward(self, engine_dir, target_dir, reference_path, runner=None): ...

    def surface(self) -> dict: ...  # the release's EAGLE-3 contract surface (drift between releases)


ENGINES = ("sglang", "vllm")
# vLLM is never installed beside the suite (its CPU build pins its own torch and transformers): a bare
# ``vllm`` means this release, in its own environment.
VLLM_PINNED = "0.32.0"
# The code paths an engine release can serve a draft on, asked for with a ``:PATH`` suffix (``vllm==0.32.0:v1``,
# ``--runner v1``); without one, the path a GPU deployment of that release takes by default, found from the
# release's own code (contracts.engines.vllm.runners, contracts.engines.sglang.workers).
RUNNERS = {"vllm": ("v1", "v2")}


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``"sglang"`` -> ("sglang", None); ``"sglang==0.5.9"`` -> ("sglang", "0.5.9"); ``"vllm==0.32.0:v1"`` ->
    ("vllm", "0.32.0") (the runner: ``runner_of``)."""
    base, runner = _split_runner(spec)
    name, sep, version = base.partition("==")
    if name not in ENGINES:
        raise EngineSpecError(f"unsupported engine {name!r} (supported: sglang, sglang==VERSION, vllm, vllm==VERSION)")
    if sep and not version:
        raise EngineSpecError(f"{spec!r}: give a version after '=='")
    if runner is not None and runner not in RUNNERS.get(name, ()):
        allowed = RUNNERS.get(name)
        raise EngineSpecError(f"{spec!r}: {name} has no runner {runner!r}" +
                              (f" (its runners: {', '.join(allowed)})" if allowed else
                               " (--runner applies to vLLM; SGLang is judged on the worker its release uses)"))
    return name, version or None


def _split_runner(spec: str) -> tuple[str, str | None]:
    base, sep, runner = spec.strip().partition(":")
    return base, (runner.strip().lower() or None) if sep else None


def runner_of(spec: str) -> str | None:
    """The runner a spec asks for (``vllm==0.32.0:v1`` -> "v1"); None: the release's default path."""
    parse_spec(spec)
    return _split_runner(spec)[1]


def with_runner(spec: str, runner: str | None) -> str:
    """SPEC asking for RUNNER (None: the default path)."""
    base = _split_runner(spec)[0]
    out = f"{base}:{runner}" if runner else base
    parse_spec(out)
    return out


def canonical(spec: str) -> str:
    """The spec an engine path is known by in reports and caches: ``vllm`` is ``vllm==<pinned>``; a runner asked
    for stays (``vllm==0.32.0:v1``)."""
    name, version = parse_spec(spec)
    runner = _split_runner(spec)[1]
    if name == "vllm" and version is None:
        version = VLLM_PINNED
    base = f"{name}=={version}" if version else name
    return f"{base}:{runner}" if runner else base


def release(spec: str) -> str:
    """The engine release of SPEC, without a runner (one environment and one worker serve both runners)."""
    return with_runner(canonical(spec), None)


_engines: dict[str, Engine] = {}
_unmade: dict[str, Exception] = {}  # releases whose environment could not be made, this process (not retried)


def engine_for(spec: str = "sglang") -> Engine:
    """The engine for ``spec``, one per process: in-process when it is the SGLang installed here (or no version
    is asked), else a worker in that release's cached environment (built on first use)."""
    from contracts.engines.inprocess import InProcessSGLang, installed_sglang

    key = release(spec)
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
    keep = release(spec)
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
