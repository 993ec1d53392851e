"""An engine installed in this environment, driven in this process: the pinned SGLang's fast path, and what an
engine worker runs inside another release's (or another engine's) environment.

One class serves every engine: an engine is a sibling package ``contracts.engines.<name>`` whose ``adapter``
module answers the nine observations of ``contracts.engines.Engine`` with the same signatures (checked by
``tests/test_architecture.py``). Adding an engine is adding that folder; nothing here changes.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from contracts.engine_profile import EngineProfile, default_engine
from contracts.engine_spec import EngineSpec

OBSERVATIONS = ("info", "path", "load", "aux", "config", "embed_head", "forward", "surface", "ranks")


def installed(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def adapter_module(engine: EngineProfile):
    """ENGINE's ``adapter`` module (its profile's ``adapter``: ``contracts.engines.<name>.adapter``)."""
    return importlib.import_module(engine.adapter)


def installed_release(engine: EngineProfile) -> str | None:
    """The release of ENGINE installed in this environment (None: not installed)."""
    for distribution in engine.distributions:
        found = installed(distribution)
        if found:
            return found
    return None


def judged_in_process(spec: EngineSpec) -> bool:
    """SPEC is judged in this process: an in-process engine (its profile) asked for no release or for the one
    installed here; every other release runs in its own environment."""
    engine = spec.profile
    return engine.in_process and (not spec.version or spec.version == installed_release(engine))


def _path(p):
    return None if p is None else Path(p)


class InProcess:
    """An engine's adapter, run in this process on the release installed here (paths in, observations out)."""

    def __init__(self, spec: EngineSpec | None = None):
        self.spec = spec or EngineSpec(default_engine())
        self.name = self.spec.name
        self.adapter = adapter_module(self.spec.profile)

    def info(self) -> dict:
        return self.adapter.info()

    def path(self, engine_dir, target_dir, runner=None):
        return self.adapter.path(Path(engine_dir), _path(target_dir), runner)

    def load(self, engine_dir, target_dir=None, runner=None):
        return self.adapter.load(Path(engine_dir), _path(target_dir), runner)

    def aux(self, engine_dir, target_dir, trainer_hf_indices, runner=None):
        return self.adapter.aux(Path(engine_dir), Path(target_dir), trainer_hf_indices, runner)

    def config(self, engine_dir, trained_config, switches, target_config):
        return self.adapter.config(Path(engine_dir), trained_config, switches, target_config)

    def embed_head(self, engine_dir, target_dir, runner=None):
        return self.adapter.embed_head(Path(engine_dir), Path(target_dir), runner)

    def forward(self, engine_dir, target_dir, reference_path, runner=None):
        return self.adapter.forward(Path(engine_dir), _path(target_dir), _path(reference_path), runner)

    def surface(self):
        return self.adapter.surface()

    def ranks(self, engine_dirs, target_dir, tp, runner=None):
        return self.adapter.ranks([Path(d) for d in engine_dirs], Path(target_dir), int(tp), runner)
