"""What a draft's config says, read the same way by the subject and by the checks: the layer config the trainer
trained with, the switches that change the math and which of them an engine ignores, and a rope the draft
scales where its target does not.

Kept below both (``contracts.subject`` and ``contracts.checks.config`` import it; it imports neither), so the
checks never reach these facts through the subject and the subject never borrows from a check.
"""

from __future__ import annotations

import json

from contracts.checkpoint import rope_of, text_config
from contracts.conventions import MODELOPT_SWITCHES, ONE_LAYER_ONLY, engine_fixed_value
from contracts.refusals import EngineRefused

# Boolean switches that change the math. Which of them an engine honours is not listed anywhere: it is measured by
# flipping each one present in the checkpoint's config. The first ones default to false in the trainers and the
# engines, so an engine that ignores one computes its false math.
SWITCHES = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output", "use_aux_norm", "bias",
            "attention_bias", "mlp_bias", *MODELOPT_SWITCHES)


def trained_config(ckpt_config: dict) -> dict:
    """The layer config the trainer trained with (speculators nests it)."""
    layer = ckpt_config.get("transformer_layer_config")
    return layer if isinstance(layer, dict) else ckpt_config


def trained_without_aux(ckpt_config: dict, tensor_names) -> str | None:
    """Why the trainer's own record says the draft was trained on no aux hidden states (the target's last one fed in
    directly, as NVIDIA's gpt-oss ``Eagle3-v2`` heads are), else None: its ``eagle_config`` sets
    ``use_aux_hidden_state: false`` and the checkpoint holds no ``fc`` to combine aux states with."""
    nested = ckpt_config.get("eagle_config")
    if not isinstance(nested, dict) or nested.get("use_aux_hidden_state") is not False:
        return None
    if any(name.split(".")[-2:] == ["fc", "weight"] for name in tensor_names):
        return None
    return "its eagle_config sets use_aux_hidden_state: false and the checkpoint has no fc"


def served_without_aux(subject, aux) -> str | None:
    """The trainer's record of a draft trained without aux hidden states (``trained_without_aux``) when the engine,
    wired with the target for this config (AUX, its observation), handed the draft one state of the target's width
    and ran its forward without applying ``fc``: served as trained. None otherwise."""
    no_aux = trained_without_aux(subject.checkpoint.config, subject.checkpoint.tensors)
    if no_aux and aux is not None and aux.evidence == "observed" and aux.fc_ran is False \
            and not aux.draft_forward_error and aux.hidden_width == aux.tiny_hidden_size:
        return no_aux
    return None


def trained_embedding_frozen(ckpt_config: dict) -> str | None:
    """Why the trainer's own record says the draft trained with the target's embedding, copied in and frozen, whatever
    embedding the checkpoint saves, else None: speculators' ``embed_requires_grad: false`` (its default; ``model.py``
    copies the verifier's embedding in, ``eagle3/core.py`` freezes it)."""
    if ckpt_config.get("embed_requires_grad") is False and ckpt_config.get("speculators_config") is not None:
        return "speculators trains with the verifier's embedding frozen (embed_requires_grad: false)"
    return None


def switches_in(flat: dict, original: dict) -> dict[str, bool]:
    nested = flat.get("eagle_config")
    eagle: dict = nested if isinstance(nested, dict) else {}
    found = {}
    for key in SWITCHES:
        for source in (eagle, flat, original):
            if isinstance(source.get(key), bool):
                found[key] = source[key]
                break
    return found


def switches_from_step_1(obs) -> list[str]:
    """The switches set on (the EAGLE-3.1 variants; every one defaults to off) whose effect the engine begins at
    draft step 1 (the state fed to the next step)."""
    return [k for k, s in obs.switches.items() if s["honoured"] and s["value"] is True and
            s.get("first_acts_at_step") == 1]


def rope_type(scaling: dict | None) -> str:
    return str((scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default")


def rope_scaled(scaling: dict | None) -> bool:
    return scaling is not None and rope_type(scaling) != "default"


def draft_only_scaling(subject, scaling: dict | None) -> tuple[str, str]:
    """A draft whose config scales its rope where the target does not: the engine applies it to every position.
    Model Optimizer's export writes yarn (factor 32) over a default training rope unless told not to, so for its
    drafts the warning names that rule (forward-parity measures what it costs against the trainer's own forward)."""
    scaling = scaling or {}
    detail = ", ".join(f"{k} {v}" for k, v in scaling.items() if k not in ("rope_type", "type", "rope_theta"))
    text = (f"the draft's config scales its rope ({rope_type(scaling)}: {detail}) and the target's does not: the "
            f"engine applies it at every draft position")
    fix = "keep the rope the draft was trained with in config.json"
    from contracts.trainer_profile import PROFILES

    exporter = PROFILES.get(subject.trainer_format)
    written = exporter.export_rope if exporter is not None else None
    if written and rope_type(scaling) == written[0] and float(scaling.get("factor", 0)) == written[1]:
        text += f"; {written[2]}"
        fix = written[3]
    return text, fix


def ignored_switches(subject, obs) -> dict[str, tuple[bool, bool]]:
    """Switch -> (the checkpoint's value, the value whose math the engine computes) for each switch the engine
    ignores (flipping it changes nothing) where it could matter (a one-layer draft has no later layers)."""
    flat = json.loads((subject.engine_dir / "config.json").read_text())
    layers = int(flat.get("num_hidden_layers") or trained_config(subject.checkpoint.config).get("num_hidden_layers") or 1)
    params = engine_params(subject)
    return {key: (s["value"], engine_fixed_value(key, params)) for key, s in obs.switches.items()
            if not s["honoured"] and not (key in ONE_LAYER_ONLY and layers == 1)}


def mismatched_switches(subject, obs) -> list[str]:
    """The switches the engine ignores while computing the other value's math than the checkpoint sets."""
    return [key for key, (value, fixed) in ignored_switches(subject, obs).items() if value != fixed]


def draft_only_rope_scaling(subject) -> str | None:
    """The warning that the draft's config scales its rope where the target's does not (None: it does not)."""
    if subject.target is None:
        return None
    _, t_scaling = rope_of(text_config(subject.target.config))
    _, d_scaling = rope_of(trained_config(subject.checkpoint.config))
    if rope_scaled(d_scaling) and not rope_scaled(t_scaling):
        return draft_only_scaling(subject, d_scaling)[0]
    return None


def engine_params(subject) -> set[str] | None:
    """The parameter names of the draft the engine built (None when it could not build one)."""
    try:
        return {p.name for p in subject.load.params}
    except EngineRefused:
        return None
