"""Replay a trainer's reference forward through SGLang's own draft forward, after SGLang's own wiring.

Contract served: ``forward-parity``. The draft is loaded by the engine's ``load_weights`` and wired to the
target by ``EagleDraftWorker.init_lm_head`` (``wiring.wire``), then fed the reference's token ids,
positions and aux hidden states in SGLang's extend mode on CPU. Both sides compute in float32 from the
same saved weights, so what remains is math, not rounding. Logits at position t come from the engine's
own forward over the first t+1 tokens (its logits processor returns the last position), so no part of the
engine's forward is re-implemented.

Later draft steps (a reference with ``step_logits``): each anchor's chain runs on one KV cache as the EAGLE draft
worker runs it (``cpu_forward.draft_chain``: decode-mode steps fed the previous step's
``LogitsProcessorOutput.hidden_states``), with the trainer's ground-truth tokens in place of the drafted ones.
SGLang's worker itself needs a GPU (``EAGLEWorkerV2``'s draft attention), so its loop is not what runs here.
"""

from __future__ import annotations

from contracts.engines.reference import COMPUTE_DTYPE, Replay
from contracts.engines.sglang.context import engine_version
from contracts.engines.sglang.cpu_forward import draft_chain
from contracts.engines.held_tensors import meta_vocab_bytes
from contracts.engines.sglang.wiring import wire
from contracts.observations import ForwardObservation


def observe_forward(engine_dir, target_dir, reference_path) -> ForwardObservation:
    import torch

    replay = Replay({"name": "sglang", "version": engine_version()}, engine_dir, reference_path)
    obs, ids, hidden, chain = replay.obs, replay.ids, replay.hidden, replay.chain
    w = wire(engine_dir, target_dir, dtype=COMPUTE_DTYPE)
    obs.engine_dtype = str(w.mc.dtype).removeprefix("torch.")
    if w.error:
        obs.error = f"the engine's wiring raised {w.error}"
        return obs
    if w.target_from_file:  # the target's embedding and head were loaded on meta: no values to run on
        return ForwardObservation(engine=obs.engine, skip_reason=(
            f"the target's embedding and head are over {meta_vocab_bytes() >> 20} MB: SGLang loads them on meta "
            f"here, so its draft forward has no target values to run on"))
    hot = getattr(w.worker, "hot_token_id", None)
    if hot is None:
        hot = getattr(w.draft, "hot_token_id", None)
    obs.engine_map = hot.tolist() if hot is not None else list(range(replay.draft_vocab))
    steps = 1 + (len(chain) if chain else 0)
    t_len = int(ids.shape[0])
    rows: list = []
    later: list[list] = [[] for _ in range(steps - 1)]
    try:
        for anchor in range(t_len):
            chain_rows = draft_chain(w.draft, w.mc.hf_config, torch.float32, ids, hidden, anchor,
                                     min(steps, t_len - anchor))
            rows.append(chain_rows[0])
            for k, row in enumerate(chain_rows[1:], start=1):
                later[k - 1].append(row.tolist())
    except Exception as e:
        obs.error = f"{type(e).__name__}: {str(e)[:300]}"
        return obs
    if chain:
        obs.reference_chain, obs.engine_chain = chain, later
        obs.chain_loop = "SGLang EAGLE draft worker loop"
        obs.chain_path = ("SGLang's draft model stepped as EagleDraftWorker steps it (decode-mode forwards on one KV "
                          "cache, each fed the previous step's LogitsProcessorOutput.hidden_states, position +1), "
                          "ground-truth tokens in place of drafted ones; the worker's own loop needs a GPU")
    eng = torch.stack(rows)
    obs.engine_logits = eng.tolist()
    return replay.compare(eng, str(w.draft.model.embed_tokens.weight.dtype).removeprefix("torch."))
