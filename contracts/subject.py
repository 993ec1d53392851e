"""A subject of the contracts: one draft checkpoint and its target, with the engine observations about
them gathered lazily (once per subject, shared by every contract) through an engine adapter.

The user's directories are only read. A speculators checkpoint, which SGLang cannot load as saved, is
judged after the conversion a user would apply (``contracts.convert``), written to a private temporary
directory that is removed on ``close()``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from contracts.checkpoint import Checkpoint, InputError
from contracts.registry import FAIL, SKIP, Result, select


class EngineRefused(Exception):
    """The engine's own code refused to build the draft for this checkpoint (an observation, not a crash)."""


@dataclass
class Subject:
    name: str
    checkpoint_path: Path
    target_path: Path | None = None
    intended_ids: list[int] | None = None  # the target ids the trainer's vocab mapping selected, when known
    engine: str = "sglang"

    def __post_init__(self):
        self.checkpoint_path = Path(self.checkpoint_path)
        self.target_path = None if self.target_path is None else Path(self.target_path)
        self._tmp: str | None = None

    @cached_property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint.open(self.checkpoint_path)

    @cached_property
    def target(self) -> Checkpoint | None:
        if self.target_path is None:
            return None
        return Checkpoint.open(self.target_path, require_weights=False)

    @property
    def trainer_format(self) -> str:
        return self.checkpoint.trainer_format

    @cached_property
    def engine_dir(self) -> Path:
        """The directory the engine reads: the checkpoint itself, or its converted copy for speculators."""
        if self.trainer_format != "speculators":
            return self.checkpoint_path
        from contracts.convert import convert_to_sglang

        self._tmp = tempfile.mkdtemp(prefix="eagle3-contracts-")
        return convert_to_sglang(self.checkpoint_path, Path(self._tmp) / "sglang")

    @cached_property
    def _load(self):
        from contracts.engines.sglang import EngineBuildError, observe_load

        try:
            return observe_load(self.engine_dir), None
        except EngineBuildError as e:
            return None, str(e)

    @property
    def load(self):
        """The engine's ``LoadObservation``; raises ``EngineRefused`` when the engine cannot build the draft."""
        observation, refusal = self._load
        if refusal is not None:
            raise EngineRefused(refusal)
        return observation

    def engine_info(self) -> dict:
        from contracts.engines.sglang.context import engine_version

        return {"name": self.engine, "version": engine_version()}

    def run(self, only: list[str] | None = None) -> list[Result]:
        results, refused_in = [], None
        for c in select(only):
            try:
                results.append(c.check(self))
            except EngineRefused as e:
                # The root cause is reported once, as a failure; contracts that need the same engine
                # model are skipped with a pointer to it rather than repeating it as failures of their own.
                if refused_in is None:
                    refused_in = c.id
                    results.append(Result(c.id, FAIL, f"the engine cannot build this draft: {e}",
                                          {"engine_error": str(e)},
                                          "make config.json name an EAGLE-3 draft class the engine knows "
                                          "(for SGLang: architectures [\"LlamaForCausalLMEagle3\"])"))
                else:
                    results.append(Result(c.id, SKIP, f"not judged: the engine cannot build this draft (see {refused_in})",
                                          {"engine_error": str(e)}))
        return results

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def report(subject: Subject, only: list[str] | None = None) -> dict:
    """Run the selected contracts on one subject; the JSON document of DESIGN.md."""
    start = time.perf_counter()
    try:
        results = subject.run(only)
        return {
            "checkpoint": str(subject.checkpoint_path),
            "target": None if subject.target_path is None else str(subject.target_path),
            "engine": subject.engine_info(),
            "trainer_format": subject.trainer_format,
            "results": [r.to_dict() for r in results],
            "duration_s": round(time.perf_counter() - start, 3),
        }
    finally:
        subject.close()


__all__ = ["EngineRefused", "InputError", "Subject", "report"]
