"""How each trainer numbers the target layers it trains the draft on and orders its reduced vocabulary (draft id i
is target id ``i + d2t[i]``), read off its profile (``contracts.trainer_profile``, where each convention is written
down with the trainer source it was read from). Used to express a trainer's aux layer ids as transformers
``hidden_states`` indices, the common ground on which ``hidden-width`` compares them with the layers the engine
captures. A ``t2d`` mask names the selected set, never an order, so a draft's order is judged only against its
trainer's.
"""

from __future__ import annotations

from contracts.trainer_profile import ASCENDING, PROFILES  # noqa: F401  (ASCENDING: re-exported)

TRAINERS = PROFILES  # name -> TrainerProfile, in the order reports list them


def d2t_order(trainer: str | None) -> str | None:
    """How TRAINER orders its draft vocabulary (``ASCENDING`` or a description), None when the trainer is unknown."""
    return TRAINERS[trainer].d2t_order if trainer in TRAINERS else None


def trainer_layer_ids(trainer: str, config: dict, num_target_layers: int) -> tuple[list[int], str]:
    """The ids the trainer trained on (from the saved config, else the trainer's default), and where from."""
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if ids is None and isinstance(config.get("eagle_config"), dict):
        ids = config["eagle_config"].get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        return list(ids), "the checkpoint's config"
    return TRAINERS[trainer].default_aux(num_target_layers), f"{trainer}'s default for a {num_target_layers}-layer target"


def hf_indices(trainer: str, ids: list[int]) -> list[int]:
    return [i + TRAINERS[trainer].aux_offset for i in ids]


# NVIDIA Model Optimizer's own draft switches (its export's eagle_config). They describe structure, so an engine that
# ignores one still computes one of its two values' math: the true math exactly when the draft the engine builds has
# the part the switch governs (read off the engine's own parameter names; None: no engine has such a part).
MODELOPT_SWITCHES = ("use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm",
                     "next_layer_regular")
# (engine parameter names: SGLang's and vLLM's module names, llama.cpp's GGUF tensor names)
GOVERNED_PART = {
    "use_last_layernorm": lambda name: name in ("model.norm.weight", "norm.weight", "output_norm.weight"),
    "use_input_layernorm_in_first_layer": lambda name: name.endswith(
        ("layers.0.input_layernorm.weight", "midlayer.input_layernorm.weight", "blk.0.attn_norm.weight")),
    "use_mtp_layernorm": None,
}
ONE_LAYER_ONLY = ("next_layer_regular",)  # describes draft layers after the first: no effect on a one-layer draft


def engine_fixed_value(switch: str, engine_params: set[str] | None) -> bool:
    """The value of ``switch`` whose math an engine that ignores it computes: false for the switches both trainers and
    engines default to false; for a structural switch, whether the engine's draft has the part it governs."""
    governs = GOVERNED_PART.get(switch)
    if governs is None or engine_params is None:
        return False
    return any(governs(name) for name in engine_params)
