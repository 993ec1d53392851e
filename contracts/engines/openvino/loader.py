"""What OpenVINO GenAI serves of a draft's tensors: each checkpoint tensor the exporter placed, found in the IR it
wrote (a named constant holding the checkpoint's values), the ones it dropped (its load report's UNEXPECTED), and
each parameter of the IR no tensor wrote (MISSING: the exporter's random initialisation, served unless the pipeline
replaces it: the draft's embedding, which GenAI copies from the target when it compiles the pair).

Contracts served: key-naming and tensor-shapes (every tensor consumed, every served parameter written); d2t-semantics
(the IR's ``d2t`` output is the sampler's offsets: GenAI's draft sampler takes ``index + d2t[index]``,
``src/cpp/src/sampling/sampler.cpp``; its sampler has no Python entry point, so the map is read off the served
constant under that rule).
"""

from __future__ import annotations

from pathlib import Path

from contracts.checkpoint import Checkpoint
from contracts.engines.openvino.export import export, ir_constants
from contracts.engines.openvino.version import engine
from contracts.observations import LoadCall, LoadObservation, ParamState, RenameProbe, TensorFate

IR_PREFIX = "self."  # the IR names a parameter's constant after the module path it was traced from
EMBED = "model.embed_tokens.weight"
EMBED_COPIED = "the target's embedding (GenAI's pipeline copies it into the draft when it compiles the pair)"
D2T = "model.d2t"


def _param_of(key: str, params: dict) -> str | None:
    """The exporter's parameter a checkpoint tensor loads into (transformers' ``base_model_prefix`` "model")."""
    for name in (key, f"model.{key}"):
        if name in params:
            return name
    return None


def observe_load(engine_dir, target_dir=None, runner=None) -> LoadObservation:
    """Each checkpoint tensor placed where the exporter's load put it (its load report), checked against the IR's
    named constant where the IR keeps one under that name (a norm's weight is folded into its op), and each parameter
    the IR serves, written or not; a buffer the IR has no constant for (``t2d``) is not served."""
    import numpy as np

    engine_dir = Path(engine_dir)
    ckpt = Checkpoint.open(engine_dir)
    made = export(engine_dir, scaled=True)
    served = ir_constants(made.ir)
    given = ckpt if made.given is None else Checkpoint.open(made.given)  # a scaled copy's blocks are what it exported
    tensors, written = [], {}
    for key, info in sorted(ckpt.tensors.items()):
        fate = TensorFate(key=key, shape=list(info.shape), dtype=str(info.dtype))
        param = None if key in made.unexpected else _param_of(key, made.params)
        if param is not None and param in made.buffers and IR_PREFIX + param not in served:
            param = None  # loaded into a buffer the IR never uses: not served
        if param is not None:
            constant = served.get(IR_PREFIX + param)
            saved = given.load_tensor(key)
            saved = (saved.float() if saved.is_floating_point() else saved).numpy()
            same = constant is None or (constant.size == saved.size and bool(np.array_equal(
                constant.reshape(-1).astype(saved.dtype), saved.reshape(-1))))
            fate.calls.append(LoadCall(param=param, error=None if same else "the IR holds other values",
                                       written=info.numel if same else 0))
            written[param] = same
            if param == D2T:
                fate.side_channel = "hot_token_id"
        tensors.append(fate)
    params = [ParamState(name=name, shape=shape, dtype=str(served[IR_PREFIX + name].dtype) if name in made.buffers
                         else "float32",
                         unwritten_fraction=0.0 if written.get(name) else 1.0,
                         shared_from_target=EMBED_COPIED if name == EMBED else None)
              for name, shape in sorted(made.params.items())
              if name not in made.buffers or IR_PREFIX + name in served]
    d2t = served.get(IR_PREFIX + D2T)
    hot = None if d2t is None else [int(i + off) for i, off in enumerate(d2t.reshape(-1).tolist())]
    config_fix = _layer_count_fix(engine_dir, made, target_dir)
    obs = LoadObservation(config_fix=config_fix, engine=engine(), draft_class=made.draft_class, config=made.config,
                          model_dtype="float32", tensors=tensors, params=params, hot_token_id=hot,
                          probes=[RenameProbe(**p) for p in made.probes],
                          hot_token_id_dtype=None if d2t is None else str(d2t.dtype),
                          is_eagle3_draft=made.architecture is not None and made.draft_class.endswith("Eagle3ForCausalLM"),
                          reads_not_observed="the IR's forward is not run here yet")
    if made.scale is not None:
        obs.observed_on = f"OpenVINO GenAI's exporter was given {made.scale.describe()} (a real-size draft)"
    return obs


def _layer_count_fix(engine_dir: Path, made, target_dir) -> dict | None:
    """``num_hidden_layers: 1`` where GenAI's own pair build asks for it: the exporter builds one ``midlayer``
    whatever the config says, but exports the KV-cache state of every layer the config counts, and GenAI refuses the
    pair of such an IR (``Model references undeclared parameters: ... beam_idx``, observed on a NeMo Automodel draft
    whose config copies the target's count). Observed by building the pair on the draft as exported and on it
    exported under ``num_hidden_layers: 1``, both with the layer ids GenAI needs; None where the first builds, the
    second does not either, or no target is given."""
    import json

    from contracts.checkpoint import text_config
    from contracts.engines.errors import EngineBuildError, ReplayError
    from contracts.engines.openvino.aux_capture import default_layers
    from contracts.engines.openvino.export import config_changed, export_target
    from contracts.engines.openvino.pipeline import build, served_layers, trained_ids

    n = made.config.get("num_hidden_layers")
    if target_dir is None or not isinstance(n, int) or n <= 1 or made.scale is not None:
        return None  # (a scaled copy pairs with no full-size target: not observed)
    try:
        target_ir = export_target(target_dir)
    except (EngineBuildError, ReplayError):  # no pair to build here: not observed
        return None
    layers = served_layers(engine_dir, made.ir) or trained_ids(engine_dir, target_dir)[0] or default_layers(
        int(text_config(json.loads((Path(target_dir) / "config.json").read_text()))["num_hidden_layers"]))
    if build(target_ir, made.ir, layers).pipeline is not None:
        return None
    with config_changed(engine_dir, {"num_hidden_layers": 1}) as one:
        try:
            fixed = build(target_ir, export(one).ir, layers)  # kept: the same copy every run
        except EngineBuildError:
            return None
    return {"num_hidden_layers": 1} if fixed.pipeline is not None else None
