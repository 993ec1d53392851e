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
    makes_references: bool = True  # its own forward can be run on a user's draft (contracts.trainers.reference_job)


PROFILES: dict[str, TrainerProfile] = {p.name: p for p in (
    TrainerProfile(
        name="speculators", label="speculators", distribution="speculators", import_name="speculators",
        first_release="0.3.0",  # its Eagle3 model arrives in 0.3.0
        aux_offset=0, default_aux=lambda n: [2, n // 2, n - 3], d2t_order=ASCENDING,
        builder="contracts.trainers.speculators", bundled_twin="speculators-default-hd32",
        converged_builder="contracts.trainers.converged:train_speculators"),
    TrainerProfile(
        name="specforge", label="SpecForge", distribution="specforge", import_name="specforge", first_release="0.1.0",
        aux_offset=1, default_aux=lambda n: [1, n // 2 - 1, n - 4], d2t_order=ASCENDING,
        builder="contracts.trainers.specforge", bundled_twin="specforge-hd32",
        converged_builder="contracts.trainers.converged_specforge:train_specforge"),
    TrainerProfile(
        name="modelopt", label="NVIDIA Model Optimizer", distribution="nvidia-modelopt", import_name="modelopt",
        first_release="0.35.0",  # its Hugging Face EAGLE-3 module arrives in 0.35.0
        aux_offset=1, default_aux=lambda n: sorted({1, max(0, n // 2 - 1), max(0, n - 4)}),
        d2t_order="by frequency (calibrate_frequent_vocab: draft id i is the i-th most frequent target id)",
        builder="contracts.trainers.modelopt", bundled_twin="modelopt-default-hd32",
        converged_builder="contracts.trainers.converged_modelopt:train_modelopt"),
    TrainerProfile(
        name="automodel", label="NVIDIA NeMo Automodel", distribution="nemo-automodel", import_name="nemo_automodel",
        first_release="0.5.0",  # its recipes/llm/train_eagle3.py arrives in 0.5.0
        aux_offset=1, default_aux=lambda n: [1, n // 2 - 1, n - 4],
        d2t_order="the tokenizer's special tokens first, then by descending supervised-token frequency "
                  "(build_eagle3_token_mapping)",
        builder="contracts.trainers.automodel", bundled_twin="automodel-vllm-hd32", makes_references=False),
)}


def trainer(name: str) -> TrainerProfile:
    return PROFILES[name]
