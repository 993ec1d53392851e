"""SGLang's EAGLE-3 contract surface, as this release's own code shows it (for drift reports between releases).

Four aspects, each observed by running the engine, never read from its source:
  draft_params      parameter names and shapes of the draft class built (on ``meta``) for canonical draft
                    configs: the specforge export and the speculators drafts as converted for SGLang;
  renames           which parameter(s) each spelling of a checkpoint key reaches through the engine's
                    ``load_weights`` (``midlayer.*``, ``layers.0.*``, ``model.``-prefixed; "dropped" when none);
  config_keys_read  the draft-config keys the engine reads while building and loading the draft;
  aux_capture       the registered target architectures whose class implements the aux-capture hook.

A release that renames a parameter, stops applying a legacy rename, stops reading a switch or drops a
target's hook shows up as a difference against the committed snapshot of the pinned release
(``fixtures/surface/sglang-<version>.json``), before any user's draft is served by it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from contracts.checkpoint import Checkpoint
from contracts.trainer_profile import nested
from contracts.engines.sglang.context import engine_version, ensure_context
from contracts.engines.load_tracer import fates_of
from contracts.observations import SurfaceObservation, TensorFate

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CANONICAL_DRAFTS = ("specforge", "speculators-default", "speculators-train")
SPELLINGS = ("{layer}", "model.{layer}")  # each key as saved, and with the "model." prefix some exports add
LAYER_PREFIXES = ("midlayer.", "layers.0.")


def _engine_dir(name: str, tmp: Path) -> Path:
    source = FIXTURES / "drafts" / name
    if not nested(Checkpoint.open(source).trainer_format):
        return source
    from contracts.hand_conversion import convert_to_sglang

    return convert_to_sglang(source, tmp / name)


def _params(model) -> dict:
    return {n: list(p.shape) for n, p in sorted(model.named_parameters())}


def _keys_read(engine_dir: Path) -> list[str]:
    """Config keys the engine reads (attribute reads on its config object) while building and loading the draft."""
    from contracts.engines.sglang.loader import build_model, model_config, tracer

    mc = model_config(engine_dir)
    cfg = mc.hf_config
    fields = set(cfg.to_dict()) | set(json.loads((engine_dir / "config.json").read_text()))
    reads: set[str] = set()
    cls = type(cfg)
    had_own = "__getattribute__" in vars(cls)
    inherited = cls.__getattribute__

    def recording(self, name):  # the config's own class, patched for the duration (its type must not change)
        if self is cfg and name in fields:
            reads.add(name)
        return inherited(self, name)

    cls.__getattribute__ = recording  # type: ignore[assignment]  # (restored below)
    try:
        model = build_model(mc, device="meta")
        ckpt = Checkpoint.open(engine_dir)
        import torch

        fates = fates_of(ckpt)
        tracer(model).load(((k, torch.empty(i.shape, dtype=getattr(torch, i.dtype), device="meta"))
                                 for k, i in ckpt.tensors.items()), fates)
    finally:
        if had_own:
            cls.__getattribute__ = inherited
        else:
            del cls.__getattribute__
    return sorted(reads)


def _renames(engine_dir: Path) -> dict:
    """Which parameters each spelling of every checkpoint key reaches through the engine's own load_weights."""
    from contracts.engines.sglang.loader import build_model, model_config, tracer

    ckpt = Checkpoint.open(engine_dir)
    out = {}
    for key in sorted(ckpt.tensors):
        tensor = ckpt.load_tensor(key)
        stems = [key]
        for a, b in (LAYER_PREFIXES, LAYER_PREFIXES[::-1]):
            if key.startswith(a):
                stems.append(b + key[len(a):])
        for stem in stems:
            for spelling in SPELLINGS:
                name = spelling.format(layer=stem)
                if name in out:
                    continue
                model = build_model(model_config(engine_dir))
                fate = TensorFate(key=name, shape=list(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch."))
                error = tracer(model).load([(name, tensor)], {name: fate})
                reached = sorted({c.param + (f"[{c.shard}]" if c.shard is not None else "") for c in fate.calls})
                out[name] = (reached or ([f"side channel: {fate.side_channel}"] if fate.side_channel else
                                         [f"error: {error}"] if error else ["dropped"]))
    return out


def _aux_capture() -> dict:
    from contracts.engines.sglang.aux_capture import _hook_kind
    from contracts.engines.sglang.registry_cache import all_models

    out = {}
    for arch, cls in sorted(all_models().items()):
        if isinstance(cls, type) and hasattr(cls, "set_eagle3_layers_to_capture"):
            out[arch] = _hook_kind(cls)
    return out


def observe_surface() -> SurfaceObservation:
    ensure_context()
    tmp = Path(tempfile.mkdtemp(prefix="eagle3-contracts-surface-"))
    try:
        dirs = {name: _engine_dir(name, tmp) for name in CANONICAL_DRAFTS}
        from contracts.engines.sglang.loader import build_model, model_config

        return SurfaceObservation(
            engine={"name": "sglang", "version": engine_version()},
            canonical_drafts={n: f"fixtures/drafts/{n}" + (" (converted for SGLang)" if d != FIXTURES / "drafts" / n
                                                           else "") for n, d in dirs.items()},
            draft_params={n: _params(build_model(model_config(d), device="meta")) for n, d in dirs.items()},
            renames=_renames(dirs["specforge"]),
            config_keys_read={n: _keys_read(d) for n, d in dirs.items()},
            aux_capture=_aux_capture(),
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
