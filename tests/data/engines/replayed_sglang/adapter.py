"""The eight observations of ``contracts.engines.Engine`` answered from SGLang 0.5.23's recordings of the bundled
examples (``contracts.engines.recorded.Replayed``): the recording whose answers hold this config's key answers, as the
fast tier replays it. A config no recording holds is the engine's refusal to say (``NotRecorded``)."""

from __future__ import annotations

from pathlib import Path

from contracts.engine_spec import EngineSpec
from contracts.engines.recorded import NotRecorded, Replayed, answer_key
from contracts.recordings import load_recordings

RELEASE = EngineSpec("sglang", "0.5.23")
REPO = Path(__file__).resolve().parents[4]


def _engine(op: str, engine_dir) -> Replayed:
    key = answer_key(op, engine_dir)
    for recorded in load_recordings(RELEASE).values():
        if key in recorded["answers"]:
            served = None if Path(engine_dir).resolve().is_relative_to(REPO / "fixtures") else Path(engine_dir)
            return Replayed(EngineSpec("replayed"), recorded["answers"], {"{repo}": REPO, "{served}": served})
    raise NotRecorded(f"no recording of {RELEASE} answers {op!r} about {engine_dir}")


def info() -> dict:
    recorded = next(iter(load_recordings(RELEASE).values()))
    return {**recorded["answers"]["info"]["result"], "name": "replayed", "replays": str(RELEASE)}


def path(engine_dir, target_dir, runner=None):
    return _engine("path", engine_dir).path(engine_dir, target_dir, runner)


def load(engine_dir, target_dir=None, runner=None):
    return _engine("load", engine_dir).load(engine_dir, target_dir, runner)


def aux(engine_dir, target_dir, trainer_hf_indices, runner=None):
    return _engine("aux", engine_dir).aux(engine_dir, target_dir, trainer_hf_indices, runner)


def config(engine_dir, trained_config, switches, target_config):
    return _engine("config", engine_dir).config(engine_dir, trained_config, switches, target_config)


def embed_head(engine_dir, target_dir, runner=None):
    return _engine("embed_head", engine_dir).embed_head(engine_dir, target_dir, runner)


def forward(engine_dir, target_dir, reference_path, runner=None):
    return _engine("forward", engine_dir).forward(engine_dir, target_dir, reference_path, runner)


def surface() -> dict:
    raise NotRecorded("a recording holds no surface")


def ranks(engine_dirs, target_dir, tp, runner=None):
    raise NotRecorded("a recording holds no tensor-parallel ranks")
