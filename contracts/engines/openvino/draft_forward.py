"""Replay a trainer's reference forward through OpenVINO GenAI's draft IR, as its pipeline runs it.

Contract served: ``forward-parity``. The draft IR is the exporter's, edited as GenAI edits it when it builds the pair
(``ir_run.DraftIR``): the target's embedding where ``share_vocabulary`` puts it (the pair built here says whether it
does), the ``fc`` moved into the target. It is run by OpenVINO's CPU runtime in float32 on the reference's tokens and
the fc-projected three-layer states at positions 0..T-1: the draft's step 0 at every position. Its logits are over
the draft vocabulary, compared with the trainer's; its map is GenAI's sampler's (``index + d2t[index]``) over the IR's
``d2t``.

Later draft steps (a reference with ``step_logits``) are GenAI's Eagle3 loop's: step k of the chain anchored at i
runs one token at position i + k (the chain's token, the trainer's ground truth in place of a sampled one) with the
pre-norm state the draft gave at step k - 1, over the KV cache step 0 wrote for positions 0..i and the chain so far,
kept at the runtime's default KV-cache precision (float16 on a CPU).
"""

from __future__ import annotations

from contracts.engines.errors import EngineBuildError
from contracts.engines.openvino.export import export_target, full_size, ir_constants
from contracts.engines.openvino.ir_run import D2T, EMBED, DraftIR
from contracts.engines.openvino.version import engine
from contracts.engines.reference import COMPUTE_DTYPE, Replay, chain_steps
from contracts.observations import ForwardObservation

CHAIN_LOOP = "OpenVINO GenAI's Eagle3 draft loop (continuous batching, Eagle3DecodingImpl)"


def observe_forward(engine_dir, target_dir, reference_path, runner=None) -> ForwardObservation:
    import torch

    from contracts.engines.openvino.wiring import observe_embed_head

    if reference_path is None:
        return ForwardObservation(engine=engine(), skip_reason="no trainer reference forward given")
    made = full_size(engine_dir)
    replay = Replay(engine(), engine_dir, reference_path)
    obs, chain = replay.obs, replay.chain
    obs.engine_dtype, obs.compute_dtype = "float32", COMPUTE_DTYPE
    shared = observe_embed_head(engine_dir, target_dir).calls == ["share_vocabulary"]
    embedding = ir_constants(export_target(target_dir)).get(EMBED) if shared else None
    d2t = ir_constants(made.ir).get(D2T)
    obs.engine_map = [i + int(o) for i, o in enumerate(d2t.reshape(-1).tolist())] if d2t is not None else \
        list(range(replay.draft_vocab))
    try:
        draft = DraftIR(made.ir, embedding, fc_moved=True)
    except ValueError as e:
        raise EngineBuildError(f"OpenVINO GenAI cannot build this draft's pair: {e}") from None
    ids = replay.ids.numpy()
    g = draft.project(replay.hidden.numpy())
    logits, prenorm = draft.step(ids, g)
    obs.engine_logits = logits.tolist()
    if chain:
        obs.reference_chain = chain
        obs.chain_loop = CHAIN_LOOP
        later = chain_steps(draft.reset, lambda position, i, h: draft.step(i, h, start=position), ids, g, prenorm,
                            len(chain) + 1)
        obs.engine_chain = [[row.tolist() for row in step] for step in later]
        obs.chain_path = (f"the draft IR stepped as GenAI's Eagle3 loop steps it: one token per step at the next "
                          f"position with the previous step's pre-norm state, over the KV cache of positions "
                          f"0..anchor and the chain so far ({draft.kv_cache_precision}, the runtime's default); "
                          f"ground-truth tokens in place of sampled ones")
    return replay.compare(torch.from_numpy(logits).float(), "float32", half_attention=bool(chain) and draft.half_kv_cache)

