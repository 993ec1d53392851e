"""Which target layers llama.cpp hands the draft, read from what its own code wrote and will read.

Contract served: ``hidden-width``. The converter alone decides the layers: only the draft config's top-level
``eagle_aux_hidden_state_layer_ids`` (a nested ``eagle_config`` list is never read, llama.cpp#27040), else its own
default ``[2, n // 2, n - 3]``, written as the GGUF's ``eagle3.target_layers``. At serving time
``common_speculative_impl_draft_eagle3`` turns on ``llama_set_embeddings_layer_inp`` for each id (the input of target
layer k: transformers' ``hidden_states[k]``; id n, the last layer's output, through ``llama_set_embeddings_nextn``)
and feeds the encoder the three rows side by side; the draft's loader sizes ``fc`` for exactly three of them. The ids
here are the GGUF's, as llama.cpp's loader read them (``llama_model_target_layer_ids``); what each id means is its
loop's code, quoted above: no target forward runs here, so the evidence is "static" (the converted target is not
asked which layer a row came from).
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts.checkpoint import text_config
from contracts.engines.llamacpp.loader import row_major
from contracts.engines.llamacpp.pair import pair
from contracts.engines.llamacpp.version import engine
from contracts.observations import AuxCaptureObservation

WIRING = ("convert_hf_to_gguf (eagle3.target_layers) -> common_speculative_impl_draft_eagle3: "
          "llama_set_embeddings_layer_inp(ctx_tgt, id) for each id")


def observe_aux_capture(engine_dir, target_dir, trainer_hf_indices=None, runner=None) -> AuxCaptureObservation:
    made = pair(engine_dir, target_dir)
    graph = made.require_graph()
    target = text_config(json.loads((Path(target_dir) / "config.json").read_text()))
    n_layers, hidden = int(target["num_hidden_layers"]), int(target["hidden_size"])
    ids = [int(i) for i in made.draft["metadata"].get("eagle3.target_layers") or []]
    fc = made.draft["tensors_gguf"].get("fc.weight")
    obs = AuxCaptureObservation(
        engine=engine(), target_architecture=(target.get("architectures") or ["?"])[0], num_target_layers=n_layers,
        target_hidden_size=hidden, target_class="llama.cpp target graph", hook="implemented",
        evidence="static", evidence_reason=("the layer ids are the GGUF's as llama.cpp's loader read them; the id -> "
                                           "hidden_states mapping is its speculative loop's "
                                           "(llama_set_embeddings_layer_inp: the input of layer k)"),
        use_aux_hidden_state=True, layers_to_capture=ids, hf_indices=list(ids),
        hidden_width=len(ids) * hidden, fc_in_features=row_major(fc["shape"])[1] if fc else None,
        fc_ran=graph is not None, ids_key="eagle_aux_hidden_state_layer_ids (top level of config.json only)",
        hf_indices_from="llama.cpp's loop: id k is the input of target layer k (hidden_states[k])", wiring=WIRING)
    config = json.loads((Path(engine_dir) / "config.json").read_text())
    if isinstance(config.get("eagle_aux_hidden_state_layer_ids"), list):
        obs.aux_layer_ids = list(config["eagle_aux_hidden_state_layer_ids"])
    if trainer_hf_indices is not None and list(trainer_hf_indices) != ids:
        _ids_for(obs, made, [int(i) for i in trainer_hf_indices])
    return obs


def _ids_for(obs, made, wanted: list[int]) -> None:
    """The top-level ids that make llama.cpp feed the trainer's layers, observed: the draft converted again with
    them, the GGUF's target_layers read back."""
    from contracts.engines.llamacpp.pair import converted_with

    again = converted_with(made, {"eagle_aux_hidden_state_layer_ids": wanted}, "ids")
    got = [int(i) for i in (again.get("metadata") or {}).get("eagle3.target_layers") or []]
    if again["converted"] and got == wanted:
        obs.ids_for_trainer_layers = wanted
    else:
        obs.ids_unreachable = (f"llama.cpp's converter given eagle_aux_hidden_state_layer_ids {wanted} "
                               + (f"wrote target_layers {got}" if again["converted"] else
                                  f"refused: {again['refusal']}"))
