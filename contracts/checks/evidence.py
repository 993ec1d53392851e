"""Helpers that make evidence readable (as transformers' loading report does: layer indices collapsed)."""

from __future__ import annotations

import re

from contracts.engine_spec import ENGINE_NAMES

_INDEX = re.compile(r"\.(\d+)\.")


def collapse_layers(names: list[str], limit: int = 12) -> str:
    """``layers.{0..3}.mlp.up_proj.weight``-style summary of a list of names, quoted, at most ``limit`` groups."""
    groups: dict[str, list[int]] = {}
    order = []
    for name in names:
        m = _INDEX.search(name)
        key = _INDEX.sub(".{}.", name, count=1) if m else name
        if key not in groups:
            groups[key] = []
            order.append(key)
        if m:
            groups[key].append(int(m.group(1)))
    parts = []
    for key in order:
        idx = sorted(set(groups[key]))
        if not idx:
            parts.append(f"`{key}`")
        elif len(idx) == 1:
            parts.append(f"`{key.replace('{}', str(idx[0]))}`")
        else:
            span = f"{idx[0]}..{idx[-1]}" if idx == list(range(idx[0], idx[-1] + 1)) else ",".join(map(str, idx))
            parts.append(f"`{key.replace('{}', '{' + span + '}')}`")
    more = f" (+{len(parts) - limit} more)" if len(parts) > limit else ""
    return ", ".join(parts[:limit]) + more


def engine_label(engine: dict) -> str:
    """``SGLang 0.5.23`` / ``vLLM 0.32.0``: how a verdict names the engine release that produced it."""
    name = str(engine.get("name"))
    return f"{ENGINE_NAMES.get(name, name)} {engine.get('version')}"


def nothing_built(contract_id: str, obs):
    """The result of a contract that judges the draft the engine built, when its load stopped before building any
    (llama.cpp's converter raising on a tensor writes no GGUF): not judged, pointing at the stop, rather than a pass
    over nothing. None when there is a draft to judge."""
    from contracts.registry import SKIP, Result

    if obs.load_error and not obs.params:
        return Result(contract_id, SKIP, f"not judged: the engine's load stopped before it built the draft "
                      f"({obs.load_error[:200]}; see key-naming)", {"load_error": obs.load_error})
    return None
