"""Candidate fixes for a tensor an engine dropped: other names, or config switches, under which the engine
might load it. Candidates are only guesses; an engine adapter asks the engine itself (by loading the tensor
again under each candidate) and only what the engine accepts becomes a suggested fix.
"""

from __future__ import annotations

import re

_LAYER = re.compile(r"(^|\.)(layers\.(\d+)|midlayer)\.")

# Config switches that make an EAGLE-3 draft build extra parameters. Tried when a tensor is dropped;
# the engine decides whether the switch makes it load (so a switch the engine lacks suggests nothing).
CONFIG_SWITCHES = (
    {"norm_before_fc": True},
    {"fc_norm": True},
    {"bias": True},
)


def layer_index(key: str) -> int | None:
    m = _LAYER.search(key)
    if not m:
        return None
    return 0 if m.group(2) == "midlayer" else int(m.group(3))


def candidate_names(key: str) -> list[str]:
    """Names to try for a dropped ``key``: its suffixes without leading prefixes (``model.decoder.fc.weight``
    → ``fc.weight``) and the two spellings of the first decoder layer (``layers.0.`` / ``midlayer.``)."""
    parts = key.split(".")
    suffixes = [".".join(parts[i:]) for i in range(1, len(parts) - 1)]
    out: list[str] = []
    for name in [key] + suffixes:
        for variant in (name, _LAYER.sub(r"\1layers.0.", name, count=1), _LAYER.sub(r"\1midlayer.", name, count=1)):
            if variant != key and variant not in out:
                out.append(variant)
    return out


def config_switches(dropped: list[str], num_hidden_layers: int) -> list[dict]:
    """Config changes worth asking the engine about for these dropped keys."""
    switches: list[dict] = [dict(s) for s in CONFIG_SWITCHES]
    deepest = max((i for i in map(layer_index, dropped) if i is not None), default=None)
    if deepest is not None and deepest >= num_hidden_layers:
        switches.append({"num_hidden_layers": deepest + 1})
    return switches


def layers_held(reached_params: list[str]) -> int | None:
    """How many decoder layers the checkpoint's tensors reached (1 + the deepest layer index), if any."""
    deepest = max((i for i in map(layer_index, reached_params) if i is not None), default=None)
    return None if deepest is None else deepest + 1


def dropped_keys(fates) -> list[str]:
    """The tensors an engine's load dropped, less the target->draft mask SGLang and vLLM skip by design (``t2d``: they
    map draft ids with ``d2t`` alone)."""
    return [f.key for f in fates if f.dropped and "t2d" not in f.key]


def explaining_switches(observation) -> list[dict]:
    """Settings worth asking the engine about when parameters of a load (a ``LoadObservation``) stay unwritten: the
    layer count the tensors hold when every unwritten parameter lies in a layer the checkpoint does not hold (a config
    whose ``num_hidden_layers`` was copied from the target), and each switch the config turns on that makes a draft
    build extra parameters. The engine decides: a setting is a fix only when, rebuilt under it, the checkpoint loads
    whole."""
    unwritten = [p.name for p in observation.params if p.unwritten_fraction and not p.shared_from_target]
    if not unwritten:
        return []
    out = []
    held = layers_held([c.param for f in observation.tensors for c in f.calls if c.error is None])
    idx = [layer_index(k) for k in unwritten]
    if held is not None and all(i is not None and i >= held for i in idx) and held < int(
            observation.config.get("num_hidden_layers") or 1):
        out.append({"num_hidden_layers": held})
    for switch in CONFIG_SWITCHES:
        (key, on), = switch.items()
        if observation.config.get(key) is on:
            out.append({key: not on})
    return out
