"""Recorded engine answers: what an engine release said about one subject, kept as the JSON its worker sends, and
replayed so the checks can be judged with no engine environment (the suite's fast tier, ``tox -e fast``).

``Recording`` wraps a real engine and keeps each answer (an observation, or the engine's own refusal); ``Replayed``
answers from a recording exactly as ``WorkerEngine`` decodes a worker's reply (``contracts.engines.remote.DECODE``),
so a check cannot tell a replayed answer from a live one. A recording is only as true as the engine run that made
it: ``python -m contracts.recordings`` writes one per bundled example, and the engine tier
(``tests/test_recordings.py``) fails when a fresh run of the engine answers differently.

Paths the engine names in its answers (a refusal names the directory it read) are kept as placeholders (``{repo}``
for the checkout the recording was made in, ``{served}`` for a converted copy), put back on replay, so a recording
made in one checkout replays in another.

A recording stands for one subject (one draft, one target, one engine path), which it names. Each answer is keyed by
the operation and the config the engine read (``load@<sha256 of config.json, 12 hex>``): a subject asks some
operations of two directories (a speculators draft as saved, and the form SGLang reads), never of two targets.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from contracts.engine_spec import EngineSpec
from contracts.engines.errors import EngineBuildError, ReplayError, TargetBuildError

RAISES: dict[str, type[Exception]] = {"TargetBuildError": TargetBuildError, "EngineBuildError": EngineBuildError, "ReplayError": ReplayError}
OPS = ("path", "load", "aux", "config", "embed_head", "forward")


def answer_key(op: str, engine_dir) -> str:
    """``op@<config digest>``: which directory's config the engine was asked about, whatever its path."""
    digest = hashlib.sha256((Path(engine_dir) / "config.json").read_bytes()).hexdigest()[:12]
    return f"{op}@{digest}"


def _swap(value, pairs: list[tuple[str, str]]):
    """VALUE (JSON data) with each ``old`` string replaced by ``new`` inside every string, in order."""
    text = json.dumps(value)
    for old, new in pairs:
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    return json.loads(text)


def _placeholders(paths: dict[str, Path | None]) -> list[tuple[str, str]]:
    """(path, placeholder) pairs, the longest path first (a copy inside the checkout is named before the checkout)."""
    return sorted(((str(Path(p).resolve()), name) for name, p in paths.items() if p is not None),
                  key=lambda pair: -len(pair[0]))


class Recording:
    """An engine whose every answer is kept (``answers``): op -> {"result": dict} or {"raises": kind, "message"}.
    ``paths``: placeholder -> the directory it stands for in the answers (``{repo}``, ``{served}``)."""

    def __init__(self, engine, paths: dict[str, Path | None] | None = None):
        self.engine = engine
        self.spec = engine.spec
        self.pairs = _placeholders(paths or {})
        self.answers: dict[str, dict] = {"info": {"result": engine.info()}}

    def info(self) -> dict:
        return self.answers["info"]["result"]

    def _keep(self, op: str, engine_dir, *args):
        key = answer_key(op, engine_dir)
        try:
            result = getattr(self.engine, op)(engine_dir, *args)
        except tuple(RAISES.values()) as e:
            kind = next(name for name, cls in RAISES.items() if type(e) is cls)
            self.answers[key] = _swap({"raises": kind, "message": str(e)}, self.pairs)
            raise
        self.answers[key] = _swap({"result": result.to_dict()}, self.pairs)
        return result

    def path(self, engine_dir, target_dir, runner=None):
        return self._keep("path", engine_dir, target_dir, runner)

    def load(self, engine_dir, target_dir=None, runner=None):
        return self._keep("load", engine_dir, target_dir, runner)

    def aux(self, engine_dir, target_dir, trainer_hf_indices, runner=None):
        return self._keep("aux", engine_dir, target_dir, trainer_hf_indices, runner)

    def config(self, engine_dir, trained_config, switches, target_config):
        return self._keep("config", engine_dir, trained_config, switches, target_config)

    def embed_head(self, engine_dir, target_dir, runner=None):
        return self._keep("embed_head", engine_dir, target_dir, runner)

    def forward(self, engine_dir, target_dir, reference_path, runner=None):
        return self._keep("forward", engine_dir, target_dir, reference_path, runner)

    def surface(self):
        return self.engine.surface()

    def ranks(self, engine_dirs, target_dir, tp, runner=None):
        return self.engine.ranks(engine_dirs, target_dir, tp, runner)  # (not recorded: the fast tier judges TP=1)


class NotRecorded(RuntimeError):
    """A subject asked a recording for an answer the recorded run never gave."""


class Replayed:
    """An engine that answers from a recording (``answers`` as ``Recording`` keeps them); ``paths`` puts this
    checkout's directories back where the recording holds placeholders."""

    def __init__(self, spec: EngineSpec, answers: dict[str, dict], paths: dict[str, Path | None] | None = None):
        self.spec = spec
        self.answers = answers
        self.pairs = [(name, path) for path, name in _placeholders(paths or {})]

    def info(self) -> dict:
        return dict(self.answers["info"]["result"])

    def _answer(self, op: str, engine_dir):
        from contracts.engines.remote import DECODE

        key = answer_key(op, engine_dir)
        if key not in self.answers:
            raise NotRecorded(f"the recording of {self.spec} has no answer to {op!r} about this config ({key})")
        answer = self.answers[key]
        answer = _swap(answer, self.pairs)  # a fresh copy: a check may not alter the recording
        if "raises" in answer:
            raise RAISES[answer["raises"]](answer["message"])
        return DECODE[op](answer["result"])

    def path(self, engine_dir, target_dir, runner=None):
        return self._answer("path", engine_dir)

    def load(self, engine_dir, target_dir=None, runner=None):
        return self._answer("load", engine_dir)

    def aux(self, engine_dir, target_dir, trainer_hf_indices, runner=None):
        return self._answer("aux", engine_dir)

    def config(self, engine_dir, trained_config, switches, target_config):
        return self._answer("config", engine_dir)

    def embed_head(self, engine_dir, target_dir, runner=None):
        return self._answer("embed_head", engine_dir)

    def forward(self, engine_dir, target_dir, reference_path, runner=None):
        return self._answer("forward", engine_dir)

    def surface(self):
        raise NotRecorded("a recording holds no surface")

    def ranks(self, engine_dirs, target_dir, tp, runner=None):
        raise NotRecorded("a recording holds no tensor-parallel ranks")
