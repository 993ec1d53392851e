"""vLLM's EAGLE-3 contract surface, as this release's own code shows it (for drift reports between releases):
the same aspects as SGLang's (``contracts.engines.sglang.surface``), observed by running vLLM.

  draft_params   parameter names and shapes of the draft class vLLM builds (on ``meta``) for the canonical drafts
                 (the specforge export and the speculators drafts as saved: vLLM reads their format);
  renames        which parameter(s) each spelling of a checkpoint key reaches through vLLM's ``load_weights``
                 ("dropped" when none, "raises" when the spelling makes the load raise);
  aux_capture    the registered target architectures whose class implements ``SupportsEagle3``.
"""

from __future__ import annotations

from pathlib import Path

from contracts.checkpoint import Checkpoint
from contracts.engines.vllm.context import draft_configs, engine_version
from contracts.engines.vllm.loader import LoadTracer, build_draft
from contracts.observations import SurfaceObservation, TensorFate

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CANONICAL_DRAFTS = ("specforge", "speculators-default", "speculators-train")
SPELLINGS = ("{layer}", "model.{layer}")
LAYER_PREFIXES = ("midlayer.", "layers.0.")


def _reached(model, key: str, tensor) -> list[str]:
    fate = TensorFate(key=key, shape=list(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch."))
    error = LoadTracer(model).load([(key, tensor)], {key: fate})
    if error:
        return ["raises"]
    return [c.param + (f"[{c.shard}]" if c.shard is not None else "") for c in fate.calls if c.error is None] or \
        ["dropped"]


def observe_surface() -> SurfaceObservation:
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import supports_eagle3

    target = FIXTURES / "targets" / "llama-tiny"
    draft_params, renames = {}, {}
    for name in CANONICAL_DRAFTS:
        configs = draft_configs(FIXTURES / "drafts" / name, target)
        model = build_draft(configs, device="meta")
        draft_params[name] = {n: list(p.shape) for n, p in sorted(model.named_parameters())}
    configs = draft_configs(FIXTURES / "drafts" / "specforge", target)
    ckpt = Checkpoint.open(FIXTURES / "drafts" / "specforge")
    for key, tensor in ckpt.iter_tensors():
        stem = key.removeprefix("midlayer.")
        layered = [p + stem for p in LAYER_PREFIXES] if key.startswith("midlayer.") else [key]
        for spelling in (s.format(layer=k) for k in layered for s in SPELLINGS):
            renames[spelling] = _reached(build_draft(configs), spelling, tensor)
    aux = {}
    for arch in sorted(ModelRegistry.get_supported_archs()):
        try:
            cls = ModelRegistry._try_load_model_cls(arch)
        except Exception:  # noqa: BLE001  (a class that cannot be imported on a CPU build has no row)
            cls = None
        if cls is not None and supports_eagle3(cls):
            aux[arch] = "implemented (SupportsEagle3)"
    return SurfaceObservation(engine={"name": "vllm", "version": engine_version()}, draft_params=draft_params,
                              renames=renames, aux_capture=aux)
