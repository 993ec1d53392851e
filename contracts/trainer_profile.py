"""What the suite knows about each trainer, in one typed record per trainer (``TrainerProfile``): its distribution and
first EAGLE-3 release, how it numbers the target layers it trains on, how it orders its reduced vocabulary, and the
modules that build its drafts (tiny and converged) and make its reference forward. The tables that used to spread
these facts over eight modules (conventions, build-tiny, the trainer environments, the converged builders, the
reference job, the trainer grid) read them here, so a fifth trainer is one record and its builder modules.

Layer conventions (read from the trainers' sources; fixtures/manifest.json ``aux_layer_convention``), each id k
expressed as the transformers ``hidden_states`` index ``k + aux_offset``:

- speculators 0.9.0: id k is the residual stream entering target layer k (vLLM's capture point), i.e.
  ``hidden_states[k]``; default ``[2, N//2, N-3]`` (``resolve_target_layer_ids``).
- specforge 0.2.0: ids go to SGLang's ``set_eagle3_layers_to_capture``, which captures the input of layer k+1, i.e.
  ``hidden_states[k+1]``; default ``[1, N//2-1, N-4]`` (``resolve_eagle_capture_layers``).
- modelopt 0.47.0: id k is the output of layer k (forward hooks on ``layers[k]``), i.e. ``hidden_states[k+1]``;
  default ``sorted({1, N//2-1, N-4})``.
- automodel 0.7.0 (NeMo Automodel): id k is the output of layer k (forward hooks on ``layers[k]``,
  ``HFEagle3TargetModel``), i.e. ``hidden_states[k+1]``; default ``[1, N//2-1, N-4]``
  (``default_eagle3_aux_layer_ids``); its draft config records no ids, so only its default reaches an engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

ASCENDING = "ascending"

# eagle_config keys only NVIDIA Model Optimizer's export writes (modelopt/torch/export/plugins/hf_spec_configs.py)
MODELOPT_EAGLE_KEYS = {"use_input_layernorm_in_first_layer", "use_mtp_layernorm", "next_layer_regular",
                       "parallel_draft_step", "parallel_draft_heads_num_layers"}
# the draft class NVIDIA NeMo Automodel's EAGLE-3 recipe writes into its checkpoints' architectures
# (nemo_automodel/recipes/llm/train_eagle3.py); no engine registers it, its serve helpers rewrite it
AUTOMODEL_DRAFT_CLASS = "LlamaEagle3DraftModel"


@dataclass(frozen=True)
class SavedForm:
    """How a trainer's own code saves (and reads) a draft: what recognises a checkpoint as its, why, and the form
    ``contracts.trainer_forms.staged`` writes of another writer's draft for its code to read."""

    # (config, tensor names) -> the checkpoint is in this trainer's form; tried in ``rank`` order, lowest first
    recognise: Callable[[dict, frozenset], bool]
    rank: int
    basis: str  # how a report says it was recognised
    guessed: bool  # another writer can produce the same form (a flat config does not name its trainer)
    nested_config: bool = False  # speculators' nested config (speculators_config / transformer_layer_config)
    layer_prefix: str = "layers.0"  # its first decoder layer's tensor prefix
    architectures: tuple[str, ...] | None = None  # the draft class its code dispatches on, where it insists on one
    served_architecture: str | None = None  # the class its serve helpers write for the engines, when it saves another
    version_key: str | None = None  # the config key recording the trainer release that saved it


def _eagle_keys(config: dict) -> set:
    eagle = config.get("eagle_config")
    return set(eagle) if isinstance(eagle, dict) else set()


@dataclass(frozen=True)
class TrainerProfile:
    name: str  # as --trainer and the reports spell it
    label: str  # as a sentence names it
    distribution: str  # on the package index
    import_name: str  # the top-level module it is imported as
    first_release: str  # the first release with an EAGLE-3 draft (the trainer grid starts there)
    aux_offset: int  # its aux id k is transformers' hidden_states[k + aux_offset]
    default_aux: Callable[[int], list[int]]  # its default ids for an N-layer target
    d2t_order: str  # how it lays out its reduced vocabulary (ASCENDING or a description)
    builder: str  # the module that builds its tiny drafts (the fixtures and build-tiny)
    bundled_twin: str  # the bundled draft build-tiny's default build matches
    converged_builder: str | None = None  # "module:function": a draft trained to convergence by its own loop
    form: SavedForm | None = None  # how its drafts are saved and recognised
    makes_references: bool = True  # its own forward can be run on a user's draft (contracts.trainers.reference_job)
    # what its export writes into a draft's rope where training used none: (rope type, factor, why, the fix)
    export_rope: tuple[str, float, str, str] | None = None
    # "module:function": its own modules proposing draft tokens greedily, the expectation ``accept`` measures a serving
    # loop against (``contracts.trainers.expectation``); None: no expectation for its drafts yet
    proposer: str | None = None


PROFILES: dict[str, TrainerProfile] = {p.name: p for p in (
    TrainerProfile(
        name="speculators", label="speculators", distribution="speculators", import_name="speculators",
        first_release="0.3.0",  # its Eagle3 model arrives in 0.3.0
        aux_offset=0, default_aux=lambda n: [2, n // 2, n - 3], d2t_order=ASCENDING,
        builder="contracts.trainers.speculators", bundled_twin="speculators-default-hd32",
        converged_builder="contracts.trainers.converged:train_speculators",
        proposer="contracts.trainers.expectation:speculators_proposer",
        form=SavedForm(lambda c, _t: "transformer_layer_config" in c or "speculators_config" in c
                       or bool(c.get("speculators_model_type")), rank=0,
                       basis="speculators' own config format (speculators_config / transformer_layer_config)",
                       guessed=False, nested_config=True, version_key="speculators_version")),
    TrainerProfile(
        name="specforge", label="SpecForge", distribution="specforge", import_name="specforge", first_release="0.1.0",
        aux_offset=1, default_aux=lambda n: [1, n // 2 - 1, n - 4], d2t_order=ASCENDING,
        builder="contracts.trainers.specforge", bundled_twin="specforge-hd32",
        converged_builder="contracts.trainers.converged_specforge:train_specforge",
        proposer="contracts.trainers.expectation:specforge_proposer",
        form=SavedForm(lambda _c, t: any(n.startswith("midlayer.") for n in t), rank=2,
                       basis="guessed from the tensor names midlayer.*, which SpecForge's SGLang export writes",
                       guessed=True, layer_prefix="midlayer", architectures=("LlamaForCausalLMEagle3",))),
    TrainerProfile(
        name="modelopt", label="NVIDIA Model Optimizer", distribution="nvidia-modelopt", import_name="modelopt",
        first_release="0.35.0",  # its Hugging Face EAGLE-3 module arrives in 0.35.0
        aux_offset=1, default_aux=lambda n: sorted({1, max(0, n // 2 - 1), max(0, n - 4)}),
        d2t_order="by frequency (calibrate_frequent_vocab: draft id i is the i-th most frequent target id)",
        builder="contracts.trainers.modelopt", bundled_twin="modelopt-default-hd32",
        converged_builder="contracts.trainers.converged_modelopt:train_modelopt",
        proposer="contracts.trainers.expectation:modelopt_proposer",
        form=SavedForm(lambda c, _t: bool(MODELOPT_EAGLE_KEYS & _eagle_keys(c)), rank=3,
                       basis="guessed from Model Optimizer's own switches in eagle_config", guessed=True),
        export_rope=("yarn", 32.0, "Model Optimizer's export writes exactly this over a default training rope unless "
                     "eagle_export_rope_scaling={} is set",
                     "if the draft was trained with the default rope, export it with eagle_export_rope_scaling={} (or "
                     "write that rope into config.json)")),
    TrainerProfile(
        name="automodel", label="NVIDIA NeMo Automodel", distribution="nemo-automodel", import_name="nemo_automodel",
        first_release="0.5.0",  # its recipes/llm/train_eagle3.py arrives in 0.5.0
        aux_offset=1, default_aux=lambda n: [1, n // 2 - 1, n - 4],
        d2t_order="the tokenizer's special tokens first, then by descending supervised-token frequency "
                  "(build_eagle3_token_mapping)",
        builder="contracts.trainers.automodel", bundled_twin="automodel-vllm-hd32", makes_references=False,
        form=SavedForm(lambda c, _t: c.get("architectures") == [AUTOMODEL_DRAFT_CLASS], rank=1,
                       basis="NeMo Automodel's own draft class LlamaEagle3DraftModel in architectures (its recipe "
                             "writes it, its serve helpers rewrite it)", guessed=False,
                       served_architecture="LlamaForCausalLMEagle3")),  # (nemo_automodel's serve_sglang / serve_vllm)
)}


def trainer(name: str) -> TrainerProfile:
    return PROFILES[name]


# a flat config no trainer's form recognises: the Llama-style draft SGLang's loader reads
FLAT = "sglang"


def saved_form_of(config: dict, tensors) -> str:
    """The trainer whose saved form CONFIG and the TENSORS' names are in (``FLAT`` when none recognises them)."""
    names = frozenset(tensors)
    for p in sorted((p for p in PROFILES.values() if p.form), key=lambda p: p.form.rank if p.form else 0):
        if p.form is not None and p.form.recognise(config, names):
            return p.name
    return FLAT


def nested(trainer_format: str) -> bool:
    """TRAINER_FORMAT (``Checkpoint.trainer_format``) is a nested config a flat-config-only engine cannot dispatch."""
    p = PROFILES.get(trainer_format)
    return p is not None and p.form is not None and p.form.nested_config
