"""An engine path as users name it: ``sglang``, ``sglang==0.5.9``, ``vllm``, ``vllm==0.32.0:v1``. One typed value
(``EngineSpec``) instead of a string split by hand wherever it travels: reports, tables, caches and the CLI all
parse it here, so ``vllm`` always means the pinned vLLM release and a runner suffix is always checked."""

from __future__ import annotations

from dataclasses import dataclass, replace

from contracts.engine_profile import EngineProfile, default_engine, profiles, serving_engine  # noqa: F401  (re-exported)

# Every engine, by name, from its own folder's profile (contracts/engines/<name>/profile.py)
ENGINES = tuple(profiles())
# how reports write each engine
ENGINE_NAMES = {name: p.label for name, p in profiles().items()}
# What a bare name means for an engine never installed beside the suite (its CPU build pins its own torch and
# transformers): this release, in its own environment.
PINNED = {name: p.pinned for name, p in profiles().items() if p.pinned}
# The code paths an engine release can serve a draft on, asked for with a ``:PATH`` suffix (``vllm==0.32.0:v1``,
# ``--runner v1``); without one, the path a GPU deployment of that release takes by default, found from the
# release's own code (each engine's adapter).
RUNNERS = {name: p.runners for name, p in profiles().items() if p.runners}


class EngineSpecError(ValueError):
    """An ``--engine`` value that names no engine or no release this suite has a recipe for."""


@dataclass(frozen=True)
class EngineSpec:
    name: str
    version: str | None = None  # None: the release installed here (the in-process engine) or its pinned one
    runner: str | None = None  # None: the path a GPU deployment of the release takes by default

    @classmethod
    def parse(cls, spec: "str | EngineSpec") -> "EngineSpec":
        if isinstance(spec, EngineSpec):
            return spec
        base, sep, asked = spec.strip().partition(":")
        runner = (asked.strip().lower() or None) if sep else None
        name, sep, version = base.partition("==")
        if name not in ENGINES:
            raise EngineSpecError(f"unsupported engine {name!r} (supported: "
                                  + ", ".join(f"{e}, {e}==VERSION" for e in ENGINES) + ")")
        if sep and not version:
            raise EngineSpecError(f"{spec!r}: give a version after '=='")
        if runner is not None and runner not in RUNNERS.get(name, ()):
            allowed = RUNNERS.get(name)
            with_runners = ", ".join(ENGINE_NAMES[e] for e in RUNNERS)
            raise EngineSpecError(f"{spec!r}: {name} has no runner {runner!r}" +
                                  (f" (its runners: {', '.join(allowed)})" if allowed else
                                   f" (--runner applies to {with_runners}; {profiles()[name].single_path})"))
        return cls(name, version or None, runner)

    def __str__(self) -> str:
        base = f"{self.name}=={self.version}" if self.version else self.name
        return f"{base}:{self.runner}" if self.runner else base

    def canonical(self) -> "EngineSpec":
        """As reports and caches know it: ``vllm`` is ``vllm==<pinned>``; a runner asked for stays."""
        return replace(self, version=PINNED[self.name]) if self.name in PINNED and self.version is None else self

    def release(self) -> "EngineSpec":
        """The release without a runner (one environment and one worker serve both runners)."""
        return replace(self.canonical(), runner=None)

    def with_runner(self, runner: str | None) -> "EngineSpec":
        return EngineSpec.parse(str(replace(self, runner=runner)))

    @property
    def profile(self) -> EngineProfile:
        """The engine's own description (its folder's ``profile.py``)."""
        return profiles()[self.name]

    @property
    def label(self) -> str:
        """``SGLang 0.5.9`` / ``vLLM 0.32.0`` (the release, as a report names it)."""
        return f"{ENGINE_NAMES[self.name]} {self.version}" if self.version else ENGINE_NAMES[self.name]
