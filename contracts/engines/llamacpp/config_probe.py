"""Ask llama.cpp which draft-config switches it honours, whether it builds an EAGLE-3 draft at all, and which rope it
applies, by running its converter and its graph, not by reading a list.

Contract served: ``config``. What llama.cpp computes is decided in two places of its own code: the converter reads a
few keys of config.json into the GGUF (``norm_before_residual``, default false, where vLLM's speculators reader
defaults it to true; ``norm_before_fc``; the top-level aux ids; never ``norm_output``; ``fc_norm`` tensors make it
refuse), and the loader and graph act on what the GGUF says. A switch is *honoured* when the draft converted again with
that switch flipped in config.json gives other step-0 logits or another pre-norm state (the one the loop feeds the
next step) on the same seeded inputs; a flip the converter or the loader refuses changes the build, so it is honoured.
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts.checkpoint import rope_of, text_config
from contracts.engines.errors import EngineBuildError, ReplayError
from contracts.engines.llamacpp.graph import DraftGraph, GraphError
from contracts.engines.llamacpp.loader import DRAFT_CLASS
from contracts.engines.llamacpp.pair import POSITIONS, converted_with, made_for, probed
from contracts.engines.llamacpp.version import engine
from contracts.checkpoint import trained_window
from contracts.engines.switch_effect import PROBE_WINDOW, switch_effect, window_effect
from contracts.observations import ConfigObservation

SEED = 1234
TOKENS = 4


def observe_config(engine_dir, trained_config: dict, candidate_switches: dict,
                   target_config: dict | None) -> ConfigObservation:
    """The draft as the pair this process loaded for it (``load`` comes first: the converter needs the target's
    folder, which this observation is not given)."""
    obs = ConfigObservation(engine=engine(), engine_dtype="float32", target_engine_dtype="float32")
    made = made_for(engine_dir)
    if made is None:
        raise ReplayError("llama.cpp's converter converts an EAGLE-3 draft only beside its target "
                          "(--target-model-dir): give --target")
    obs.architectures = list(json.loads((Path(engine_dir) / "config.json").read_text()).get("architectures") or [])
    if made.converter_refusal and not made.draft.get("tensors"):  # before any tensor: no model class for it
        obs.dispatch_error = f"llama.cpp's converter: {made.converter_refusal}"
        return obs
    if made.converter_refusal:  # the model class was chosen, then the conversion stopped
        raise EngineBuildError(f"llama.cpp's converter refused the draft: {made.converter_refusal}")
    arch = made.draft.get("architecture")
    obs.draft_class = DRAFT_CLASS if arch == "eagle3" else f"llama.cpp {arch}"
    obs.is_eagle3_draft = arch == "eagle3"
    if not obs.is_eagle3_draft:
        return obs
    graph = made.require_graph()
    obs.probed_on = "the checkpoint's own weights" if made.scale is None else \
        f"{made.scale.describe()}: the top-left block of each of the checkpoint's tensors"
    target_vocab = (target_config or {}).get("vocab_size")
    inputs = _inputs(graph, target_vocab if isinstance(target_vocab, int) and target_vocab > 0 else None)
    base = _outputs(graph, inputs)
    if candidate_switches or trained_window(trained_config) is not None:
        made.release_graph()  # one pair loaded at a time: each flipped conversion is loaded beside none
    for key, value in candidate_switches.items():
        flipped, refused = _converted_outputs(made, {key: not value}, f"flip-{key}", inputs)
        obs.switches[key] = switch_effect(value, base, flipped) if refused is None else \
            {"value": value, "honoured": True, "evidence": f"flipping it changes the build: {refused}"}
    window = trained_window(trained_config)
    if window is not None:  # the converter writes no window for an EAGLE-3 draft: observed, not assumed
        shrunk, refused = _converted_outputs(made, {"sliding_window": PROBE_WINDOW}, "window", inputs)
        obs.window = window_effect(window, base, shrunk) if refused is None else \
            {**window, "applied": True, "evidence": f"shrinking it changes the build: {refused}"}
    obs.rope = _rope(made.draft, trained_config, target_config)
    return obs


def _converted_outputs(made, changes: dict, tag: str, inputs):
    """The draft step's outputs after converting again with CHANGES in config.json: (outputs, None), or (None, the
    converter's or loader's refusal)."""
    again = converted_with(made, changes, tag)
    if not again["converted"]:
        return None, f"llama.cpp's converter refused it ({again['refusal'][:160]})"
    refusal = probed(Path(made.target["gguf"]), Path(again["gguf"]), made.folder)
    try:
        if refusal:
            raise GraphError(refusal)
        graph = DraftGraph(Path(made.target["gguf"]), Path(again["gguf"]), POSITIONS, made.folder / "llama-flip.log")
    except GraphError as e:
        return None, f"llama.cpp's loader refused it ({str(e)[:160]})"
    try:
        return _outputs(graph, inputs), None
    finally:
        graph.close()


def _inputs(graph, target_vocab: int | None):
    """Seeded token ids and target features. The ids are ones a deployment feeds: the target's tokenizer's, below
    its vocabulary where the draft's config claims a larger one (the embedding the draft looks them up in is the
    target's: an id past it stopped the replay in GGML's get_rows assert, a verdict about our input, not the draft)."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    return rng.integers(0, min(graph.n_vocab, target_vocab or graph.n_vocab), TOKENS).astype(np.int32), \
        rng.standard_normal((TOKENS, graph.n_embd_enc)).astype(np.float32)


def _outputs(graph, inputs):
    """((step-0 logits on the draft's map, finite), the pre-norm state fed to the next step) as numpy arrays (this
    worker never imports torch: ~155 MB beside a pair whose vocabulary may be millions of entries)."""
    import numpy as np

    ids, features = inputs
    g = graph.encode(features)
    graph.clear()
    logits, prenorm = graph.decode(0, ids, g)
    np.nan_to_num(logits, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return (logits,), prenorm


def _rope(draft: dict, trained_config: dict, target_config: dict | None) -> dict:
    """The rope llama.cpp applies (what its loader reads from the GGUF: the base, the scaling type, and for the llama3
    schedule the frequency factors the converter writes as ``rope_freqs.weight``) against the trainer's; ``same`` is
    None where the two cannot be compared this way (another scaling schedule)."""
    meta = draft.get("metadata", {})
    base = meta.get("eagle3.rope.freq_base")
    applied_type = "llama3" if "rope_freqs.weight" in (draft.get("tensors_gguf") or {}) else \
        meta.get("eagle3.rope.scaling.type") or "none"
    theta, trained_scaling = rope_of(trained_config)
    if theta is None and target_config is not None:
        theta, _ = rope_of(text_config(target_config))
    trained_type = (trained_scaling or {}).get("rope_type") or (trained_scaling or {}).get("type") or "none"
    trained_type = "none" if trained_type == "default" else trained_type
    applied = {"class": "ggml_rope_ext", "base": base, "scaling": applied_type}
    same = None
    if base is not None and theta is not None and trained_type in ("none", "linear", "yarn", "llama3"):
        same = float(base) == float(theta) and applied_type == trained_type
    return {"applied": applied, "trained": {"rope_theta": theta, "rope_scaling": trained_scaling}, "same": same}
