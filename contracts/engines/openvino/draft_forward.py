"""Replay a trainer's reference forward through OpenVINO GenAI's draft IR, as its pipeline runs it.

Contract served: ``forward-parity``. The draft IR is the exporter's, with the target's embedding where GenAI's
``share_vocabulary`` puts it (the pair built here says whether it does), run by OpenVINO's CPU runtime in float32 on
the reference's tokens and three-layer states at positions 0..T-1: the draft's step 0 at every position. Its logits
are over the draft vocabulary, compared with the trainer's; its map is GenAI's sampler's (``index + d2t[index]``) over
the IR's ``d2t``. Later draft steps (GenAI feeds the draft its own pre-norm state through the ``fc`` it moved into the
target) are not replayed by this release of the suite: the verdict covers step 0 and says so.
"""

from __future__ import annotations

from contracts.engines.openvino.export import export, export_target, ir_constants
from contracts.engines.openvino.ir_run import EMBED, DraftIR
from contracts.engines.openvino.version import engine
from contracts.engines.reference import COMPUTE_DTYPE, Replay
from contracts.observations import ForwardObservation


def observe_forward(engine_dir, target_dir, reference_path, runner=None) -> ForwardObservation:
    import torch

    from contracts.engines.openvino.wiring import observe_embed_head

    if reference_path is None:
        return ForwardObservation(engine=engine(), skip_reason="no trainer reference forward given")
    made = export(engine_dir)
    replay = Replay(engine(), engine_dir, reference_path)
    obs = replay.obs
    obs.engine_dtype, obs.compute_dtype = "float32", COMPUTE_DTYPE
    shared = observe_embed_head(engine_dir, target_dir).calls == ["share_vocabulary"]
    embedding = ir_constants(export_target(target_dir)).get(EMBED) if shared else None
    d2t = ir_constants(made.ir).get("self.model.d2t")
    obs.engine_map = [i + int(o) for i, o in enumerate(d2t.reshape(-1).tolist())] if d2t is not None else \
        list(range(replay.draft_vocab))
    logits, _ = DraftIR(made.ir, embedding).step(replay.ids.numpy(), replay.hidden.numpy())
    obs.engine_logits = logits.tolist()
    if replay.chain:
        obs.reference_chain = replay.chain
        obs.chain_path = ("are not replayed on OpenVINO GenAI (its own pre-norm state fed back past the fc it moves "
                          "into the target): not run by this suite yet")
    return replay.compare(torch.from_numpy(logits).float(), "float32")
