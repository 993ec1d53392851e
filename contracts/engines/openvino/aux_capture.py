"""Which target layers OpenVINO GenAI hands the draft, observed by building the pair.

Contract served: ``hidden-width``. The exporter reads no layer-id key of the draft's config (top level or nested) and
writes none into the IR; GenAI takes the draft IR's rt_info ``hidden_layers_list`` if it has one, else ``{2, N/2,
N-3}`` of the target's ``num_hidden_layers``, and refuses a target under 10 layers (``extract_eagle3_info_from_config``
in ``eagle3_model_transforms.cpp``). Id k taps the residual add that closes target layer k (``transform_hidden_state``:
the Add fed by the MLP's down projection): transformers' ``hidden_states[k + 1]``. The pair is built here as a
deployment builds it (both IRs from the exporter, ``draft_model`` and ``LLMPipeline``): a refusal is GenAI's own; which
ids a built pair uses is its rule, quoted, since GenAI exposes no call that says (evidence "static"). The ids that feed
the trainer's layers are observed: the pair built again with them written into the draft IR's rt_info. A draft folder
that holds its own IR (``openvino_model.xml``, as ``convert --to openvino`` writes it) is served with the ids that IR's
rt_info names: GenAI's ``draft_model`` reads them from the folder it is given.
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts.checkpoint import text_config
from contracts.engines.openvino.export import export_target, full_size
from contracts.engines.openvino.pipeline import LAYERS_KEY, build, served_layers
from contracts.engines.openvino.version import engine
from contracts.observations import AuxCaptureObservation

WIRING = ("draft_model (rt_info hidden_layers_list) -> ContinuousBatchingPipeline: extract_eagle3_info_from_config, "
          "else {2, N/2, N-3} of the target's num_hidden_layers -> transform_hidden_state on each target layer")
IDS_KEY = (f"the exported draft IR's rt_info {LAYERS_KEY} (model.set_rt_info(\"<ids, space-separated>\", "
           f"\"{LAYERS_KEY}\") before openvino.save_model; the exporter writes none)")


def default_layers(n: int) -> list[int]:
    """GenAI's own choice for an N-layer target when the draft IR names none (eagle3_model_transforms.cpp)."""
    return [2, n // 2, n - 3]


def observe_aux_capture(engine_dir, target_dir, trainer_hf_indices=None, runner=None) -> AuxCaptureObservation:
    target = text_config(json.loads((Path(target_dir) / "config.json").read_text()))
    n_layers, hidden = int(target["num_hidden_layers"]), int(target["hidden_size"])
    target_ir = export_target(target_dir)
    made = full_size(engine_dir)
    written = served_layers(engine_dir, made.ir)
    fc = made.params.get("model.fc.weight")
    obs = AuxCaptureObservation(
        engine=engine(), target_architecture=(target.get("architectures") or ["?"])[0], num_target_layers=n_layers,
        target_hidden_size=hidden, target_class="OpenVINO GenAI target IR", hook="implemented", evidence="static",
        evidence_reason=("the pair was built by GenAI as a deployment builds it; the ids a built pair taps are its "
                         "rule (the draft IR's hidden_layers_list, else {2, N/2, N-3}), which no call exposes"),
        use_aux_hidden_state=True, ids_key=IDS_KEY, wiring=WIRING, fc_in_features=fc[1] if fc else None,
        hf_indices_from="GenAI's transform_hidden_state: id k taps the output of target layer k (hidden_states[k + 1])")
    pair = build(target_ir, made.ir, written)
    if pair.pipeline is None:
        obs.configure_error = f"OpenVINO GenAI refused the pair: {pair.refusal}"
    else:
        ids = written if written is not None else default_layers(n_layers)
        obs.layers_to_capture, obs.hf_indices = ids, [i + 1 for i in ids]
        obs.hidden_width = len(ids) * hidden
        obs.aux_layer_ids = ids if written is not None else None
    del pair
    wanted = [int(i) for i in trainer_hf_indices] if trainer_hf_indices is not None else None
    if wanted is not None and wanted != obs.hf_indices:
        _ids_for(obs, made.ir, target_dir, wanted)
    return obs


def _ids_for(obs, draft_ir: Path, target_dir, wanted: list[int]) -> None:
    """The rt_info ids that make GenAI feed the trainer's layers, observed: the pair built again with them."""
    ids = [h - 1 for h in wanted]
    if min(ids) < 0:
        obs.ids_unreachable = (f"GenAI taps layer outputs only: hidden_states {wanted} include the embedding's "
                               "output (hidden_states[0]), which no id taps")
        return
    again = build(export_target(target_dir), draft_ir, ids)
    if again.pipeline is not None:
        obs.ids_for_trainer_layers = ids
    else:
        obs.ids_unreachable = f"OpenVINO GenAI given {LAYERS_KEY} {ids} refused the pair: {again.refusal}"
