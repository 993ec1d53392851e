"""An engine installed in this environment, driven in this process: the pinned SGLang's fast path, and what an
engine worker runs inside another release's (or another engine's) environment.

One class serves every engine: an engine is a sibling package ``contracts.engines.<name>`` whose ``adapter``
module answers the eight observations of ``contracts.engines.Engine`` with the same signatures (checked by
``tests/test_architecture.py``). Adding an engine is adding that folder; nothing here changes.
"""

from __future__ import annotations

import importlib
from pathlib import Path

OBSERVATIONS = ("info", "path", "load", "aux", "config", "embed_head", "forward", "surface")


def installed(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def adapter_module(name: str):
    """The ``adapter`` module of engine NAME (its profile's ``adapter``: ``contracts.engines.<name>.adapter``)."""
    from contracts.engine_profile import profile

    return importlib.import_module(profile(name).adapter)


def installed_release(name: str) -> str | None:
    """The release of engine NAME installed in this environment (None: not installed)."""
    from contracts.engine_profile import profile

    for distribution in profile(name).distributions:
        found = installed(distribution)
        if found:
            return found
    return None


def judged_in_process(name: str, version: str | None) -> bool:
    """NAME==VERSION is judged in this process: an in-process engine (its profile) asked for no release (None or
    "") or for the one installed here; every other release runs in its own environment."""
    from contracts.engine_profile import profile

    return profile(name).in_process and (not version or version == installed_release(name))


def _path(p):
    return None if p is None else Path(p)


class InProcess:
    """Engine NAME's adapter, run in this process on the release installed here (paths in, observations out)."""

    def __init__(self, name: str | None = None, spec: str | None = None):
        from contracts.engine_profile import default_engine

        name = name or default_engine()
        self.name = name
        self.spec = spec or name
        self.adapter = adapter_module(name)

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
