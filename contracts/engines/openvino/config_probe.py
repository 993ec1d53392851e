"""Ask OpenVINO GenAI's exporter which draft-config switches it honours, and whether it builds an EAGLE-3 draft at
all, by exporting the draft and running the IR, not by reading a list.

Contract served: ``config``. The exporter builds its own draft module (``model_patcher.LlamaEagle3Model``) for the
architectures it maps (``_CUSTOM_DRAFT_MODEL_MAP``) and exports anything else as an ordinary model; its module has no
``norm_before_residual`` branch (always false), and no ``norm_before_fc``, ``fc_norm`` or ``norm_output`` parameter. A
switch is *honoured* when the draft exported again with that switch flipped in config.json gives other step-0 logits
or another pre-norm state (the one GenAI feeds the next step) on the same seeded inputs, run by OpenVINO's runtime.
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts.engines.errors import EngineBuildError
from contracts.engines.openvino.export import (config_changed, eagle3_architectures, export, exporter_class,
                                              ir_constants, saved_architecture)
from contracts.engines.openvino.ir_run import EMBED, DraftIR
from contracts.engines.openvino.version import engine
from contracts.engines.switch_effect import switch_effect
from contracts.observations import ConfigObservation

SEED = 1234
TOKENS = 8


def _outputs(ir: Path, ids, hidden, embedding):
    import torch

    logits, prenorm = DraftIR(ir, embedding).step(ids, hidden)
    return [torch.from_numpy(logits)], torch.from_numpy(prenorm if prenorm is not None else logits)


def observe_config(engine_dir, trained_config: dict, candidate_switches: dict,
                   target_config: dict | None) -> ConfigObservation:
    import numpy as np

    engine_dir = Path(engine_dir)
    obs = ConfigObservation(engine=engine(), engine_dtype="float32", target_engine_dtype="float32")
    config = json.loads((engine_dir / "config.json").read_text())
    obs.architectures = list(config.get("architectures") or [])
    try:
        architecture = saved_architecture(engine_dir)
    except EngineBuildError as e:  # the exporter cannot read the config: no class for it
        obs.dispatch_error = str(e)
        return obs
    if exporter_class(architecture) is None:  # not a draft it knows: it would export an ordinary model, or stop
        obs.is_eagle3_draft = False
        obs.dispatch_error = (f"optimum-intel's exporter has no EAGLE-3 draft class for {architecture} (it builds "
                              f"{', '.join(eagle3_architectures())} only) and exports the folder as an ordinary model")
        return obs
    made = export(engine_dir, scaled=True)  # its refusal from here on is the load's (a tensor it cannot place)
    obs.draft_class = made.draft_class
    obs.is_eagle3_draft = True
    obs.probed_on = "the checkpoint's own weights" if made.scale is None else \
        f"{made.scale.describe()}: the top-left block of each of the checkpoint's tensors"
    rng = np.random.default_rng(SEED)
    width = int(made.params["model.fc.weight"][1]) if "model.fc.weight" in made.params else 3 * int(config["hidden_size"])
    width = width if made.scale is None else made.scale.dim(width)  # the IR's own input width
    ids = rng.integers(0, int(made.config.get("vocab_size") or 2), TOKENS)
    hidden = rng.standard_normal((TOKENS, width)).astype("float32")
    # one embedding for every export: the exporter draws a random one where the checkpoint has none (GenAI serves
    # the target's there), so a flip is judged on what the switch changes, not on that draw
    embedding = ir_constants(made.ir).get(EMBED)
    base = _outputs(made.ir, ids, hidden, embedding)
    for key, value in candidate_switches.items():
        with config_changed(engine_dir, {key: not value}) as flipped_dir:
            try:
                # kept as any small export is (keyed by its files: the flip of one draft is the same every run)
                flipped = _outputs(export(flipped_dir, scaled=True).ir, ids, hidden, embedding)
            except EngineBuildError as e:
                obs.switches[key] = {"value": value, "honoured": True, "evidence": f"flipping it changes the build: {e}"}
                continue
        obs.switches[key] = switch_effect(value, base, flipped)
    return obs
