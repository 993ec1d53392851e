"""How each trainer numbers the target layers it trains the draft on (read from the trainers' sources;
see fixtures/manifest.json ``aux_layer_convention``). Used to express a trainer's aux layer ids as
transformers ``hidden_states`` indices, the common ground on which ``hidden-width`` compares them with the
layers the engine captures.

- speculators 0.9.0: id k is the residual stream entering target layer k (vLLM's capture point), i.e.
  ``hidden_states[k]``; default ``[2, N//2, N-3]`` (``resolve_target_layer_ids``).
- specforge 0.2.0: ids go to SGLang's ``set_eagle3_layers_to_capture``, which captures the input of
  layer k+1, i.e. ``hidden_states[k+1]``; default ``[1, N//2-1, N-4]`` (``resolve_eagle_capture_layers``).
- modelopt 0.47.0: id k is the output of layer k (forward hooks on ``layers[k]``), i.e. ``hidden_states[k+1]``;
  default ``sorted({1, N//2-1, N-4})``.
- automodel 0.7.0 (NeMo Automodel): id k is the output of layer k (forward hooks on ``layers[k]``,
  ``HFEagle3TargetModel``), i.e. ``hidden_states[k+1]``; default ``[1, N//2-1, N-4]``
  (``default_eagle3_aux_layer_ids``); its draft config records no ids, so only its default reaches an engine.

And in which order each lays out its reduced vocabulary (draft id i is target id ``i + d2t[i]``): ``d2t_order``.
A ``t2d`` mask names the selected set, never an order, so a draft's order is judged only against its trainer's.
"""

from __future__ import annotations

ASCENDING = "ascending"
TRAINERS = {
    "speculators": {"offset": 0, "default": lambda n: [2, n // 2, n - 3], "d2t_order": ASCENDING},
    "specforge": {"offset": 1, "default": lambda n: [1, n // 2 - 1, n - 4], "d2t_order": ASCENDING},
    "modelopt": {"offset": 1, "default": lambda n: sorted({1, max(0, n // 2 - 1), max(0, n - 4)}),
                 "d2t_order": "by frequency (calibrate_frequent_vocab: draft id i is the i-th most frequent target id)"},
    "automodel": {"offset": 1, "default": lambda n: [1, n // 2 - 1, n - 4],
                  "d2t_order": "the tokenizer's special tokens first, then by descending supervised-token frequency "
                               "(build_eagle3_token_mapping)"},
}


def d2t_order(trainer: str | None) -> str | None:
    """How TRAINER orders its draft vocabulary (``ASCENDING`` or a description), None when the trainer is unknown."""
    return TRAINERS[trainer]["d2t_order"] if trainer in TRAINERS else None


def trainer_layer_ids(trainer: str, config: dict, num_target_layers: int) -> tuple[list[int], str]:
    """The ids the trainer trained on (from the saved config, else the trainer's default), and where from."""
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if ids is None and isinstance(config.get("eagle_config"), dict):
        ids = config["eagle_config"].get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        return list(ids), "the checkpoint's config"
    return TRAINERS[trainer]["default"](num_target_layers), f"{trainer}'s default for a {num_target_layers}-layer target"


def hf_indices(trainer: str, ids: list[int]) -> list[int]:
    return [i + TRAINERS[trainer]["offset"] for i in ids]


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
