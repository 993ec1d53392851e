"""OpenVINO GenAI's EAGLE-3 contract surface in one release, read from its exporter and the IR it writes: the draft
architectures the exporter builds as EAGLE-3 drafts, the parameters its draft module has for the canonical draft
(``contracts.engines.canonical``), and the IR's outputs and EAGLE-3 rt_info keys the pipeline reads.

Contract served: the surface drift report (``contracts.engines.surface_drift``)."""

from __future__ import annotations

from contracts.engines.openvino.export import eagle3_architectures, export
from contracts.engines.canonical import CANONICAL_DRAFT
from contracts.engines.openvino.version import engine
from contracts.observations import SurfaceObservation


def observe_surface() -> SurfaceObservation:
    import openvino as ov
    made = export(CANONICAL_DRAFT)
    model = ov.Core().read_model(str(made.ir / "openvino_model.xml"))
    rt_info = model.get_rt_info()
    return SurfaceObservation(
        engine=engine(),
        draft_architectures=eagle3_architectures(),
        draft_params={CANONICAL_DRAFT.name: {name: shape for name, shape in sorted(made.params.items())}},
        ir_outputs=sorted(name for out in model.outputs for name in out.get_names()),
        rt_info_keys=sorted(key for key in ("eagle3_mode", "hidden_layers_list") if rt_info.__contains__(key)))
