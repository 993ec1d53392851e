"""A draft whose trainer is unknown (a flat config: a hand conversion, a third party's export), written in the form
each known trainer's own code reads, so that trainer's forward can be run on the same weights and the engine's
forward compared with each: "served as speculators would train it, not as SpecForge does" is a finding in itself.

The forms change names and config layout only, never a value: SpecForge reads its first layer as ``midlayer.*``
(the engines map ``layers.0.*`` onto it), speculators reads its nested config (the inverse of
``hand_conversion.speculators_to_sglang_config``), Model Optimizer reads ``layers.N.*`` and its ``eagle_config``.
Whether a trainer's code takes the result is its own code's answer (``contracts.trainers.reference_job``). The weight
files are header-renamed copies or links in a directory of the caller's (the user cache), never beside the
checkpoint.
"""

from __future__ import annotations

import re
from pathlib import Path

from contracts.checkpoint import Checkpoint
from contracts.hand_conversion import MATH_KEYS, ROPE_KEYS, write_copy

FIRST_LAYER = re.compile(r"^(model\.)?(layers\.0|midlayer)\.")
IDS = "eagle_aux_hidden_state_layer_ids"
# config keys that belong to the draft head, not to its decoder layer (speculators keeps them at the top level)
DRAFT_KEYS = set(MATH_KEYS) | {IDS, "eagle_config", "architectures", "target_hidden_size", "auto_map", "d2t", "t2d"}


def renamed_first_layer(names, to: str) -> dict[str, str]:
    """old -> new for every tensor of the first decoder layer, spelt ``to`` (``midlayer`` or ``layers.0``)."""
    return {n: FIRST_LAYER.sub(f"{to}.", n) for n in names if FIRST_LAYER.match(n) and FIRST_LAYER.sub(f"{to}.", n) != n}


def speculators_config(flat: dict, target_config: dict, target: str) -> dict:
    """speculators' nested config for a flat draft config: its layer in ``transformer_layer_config``, its head's keys
    (norm flags, draft vocabulary, aux ids wherever the flat config keeps them) at the top level, the target as its
    verifier."""
    layer = {k: v for k, v in flat.items() if k not in DRAFT_KEYS}
    layer.setdefault("model_type", "llama")
    nested = {k: flat[k] for k in MATH_KEYS + ROPE_KEYS if flat.get(k) is not None}
    ids = flat.get(IDS) or (flat.get("eagle_config") or {}).get(IDS)
    if ids is not None:
        nested[IDS] = list(ids)
    if flat.get("target_hidden_size") is not None:
        nested["target_hidden_size"] = flat["target_hidden_size"]
    nested.update({
        "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "transformer_layer_config": layer,
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1,
                                  "accept_tolerance": 0.0}],
            "verifier": {"architectures": list(target_config.get("architectures") or []), "name_or_path": target}},
    })
    return nested


def staged(checkpoint: Path, trainer: str, target: Path, into: Path) -> Path:
    """CHECKPOINT written into INTO in the form TRAINER's own code reads (config layout and tensor names only)."""
    from contracts.trainer_profile import PROFILES

    profile = PROFILES.get(trainer)
    form = profile.form if profile is not None and profile.makes_references else None
    if form is None:
        raise ValueError(f"no staged form for {trainer}")
    ckpt = Checkpoint.open(checkpoint)
    flat = dict(ckpt.config)
    renames = renamed_first_layer(ckpt.tensors, form.layer_prefix)
    if form.nested_config:
        import json

        target_config = json.loads((Path(target) / "config.json").read_text())
        return _written(checkpoint, speculators_config(flat, target_config, str(target)), renames, into)
    if form.architectures:
        flat["architectures"] = list(form.architectures)
    return _written(checkpoint, flat, renames, into)


def _written(src: Path, config: dict, renames: dict[str, str], into: Path) -> Path:
    """``hand_conversion.write_copy``: the renamed files' headers rewritten (values streamed over unchanged), every
    other file linked."""
    return write_copy(Path(src), config, into, link=True, renames=renames)
