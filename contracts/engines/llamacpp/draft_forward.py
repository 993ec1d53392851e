"""Replay a trainer's reference forward through llama.cpp's own EAGLE-3 draft graph, as its speculative loop runs it.

Contract served: ``forward-parity``. The draft and the target are the GGUFs the release's converter wrote and its
loader loaded (``pair``); the replay (``graph.DraftGraph``) calls what ``common_speculative_impl_draft_eagle3`` calls:
``process()``'s encoder on the reference's three-layer states (one row per position), then its decoder on the pairs
(token, g) at positions 0..T-1 over the KV cache, which gives the draft's step 0 at every position. Its logits are
llama.cpp's over the target vocabulary (d2t scatters the draft head's onto it, -inf elsewhere); they are compared at
the target ids llama.cpp's own map gives each draft id.

Later draft steps (a reference with ``step_logits``) are ``draft()``'s: step k of the chain anchored at i decodes one
pair at position i + k (the chain's token, the trainer's ground truth in place of a sampled one; the pre-norm state of
step k - 1, ``llama_get_embeddings_nextn_ith``) over the KV cache that step 0 wrote for positions 0..i and the chain
so far. The context is llama.cpp's default, as its server makes it (a float16 KV cache).
"""

from __future__ import annotations

from contracts.engines.errors import EngineBuildError
from contracts.engines.llamacpp.graph import GraphError
from contracts.engines.llamacpp.pair import pair
from contracts.engines.llamacpp.version import engine
from contracts.engines.reference import COMPUTE_DTYPE, Replay, chain_steps
from contracts.observations import ForwardObservation

CHAIN_LOOP = "llama.cpp speculative draft loop (common_speculative_impl_draft_eagle3::draft)"


def observe_forward(engine_dir, target_dir, reference_path, runner=None) -> ForwardObservation:
    import numpy as np
    import torch

    if reference_path is None:
        return ForwardObservation(engine=engine(), skip_reason="no trainer reference forward given")
    made = pair(engine_dir, target_dir)
    graph = made.require_graph()
    if made.scale is not None:
        return ForwardObservation(engine=engine(), skip_reason=(
            f"a real-size pair is given to llama.cpp as {made.scale.describe()}: its forward is not the draft's"))
    replay = Replay(engine(), engine_dir, reference_path)
    obs, chain = replay.obs, replay.chain
    obs.engine_dtype, obs.compute_dtype = "float32", COMPUTE_DTYPE
    d2t = made.draft.get("d2t")
    obs.engine_map = [int(x) for x in d2t] if d2t is not None else list(range(replay.draft_vocab))
    ids = replay.ids.numpy().astype(np.int32)
    try:
        g = graph.encode(replay.hidden.numpy())
        graph.clear()
        logits, prenorm = graph.decode(0, ids, g)
        later = chain_steps(graph.clear, graph.decode, ids, g, prenorm, len(chain) + 1) if chain else None
    except GraphError as e:
        raise EngineBuildError(f"llama.cpp's EAGLE-3 graph refused the reference: {e}") from None
    if logits.shape[1] < max(obs.engine_map) + 1:
        obs.error = f"the engine's logits cover {logits.shape[1]} ids, its map reaches {max(obs.engine_map)}"
        return obs
    back = np.asarray(obs.engine_map)
    eng = torch.from_numpy(logits[:, back])
    obs.engine_logits = eng.tolist()
    if chain:
        obs.reference_chain = chain
        obs.chain_loop = CHAIN_LOOP
        obs.engine_chain = [[row[back].tolist() for row in step] for step in later or []]
        obs.chain_path = ("llama.cpp's decoder stepped as its draft() steps it: one pair per step at the next "
                          "position (the chain's token, the previous step's pre-norm state) over the KV cache of "
                          "positions 0..anchor and the chain so far; ground-truth tokens in place of sampled ones")
    embed = "float32"  # the converter writes f32 here (--outtype f32); the draft's or the target's token_embd
    return replay.compare(eng, embed, half_attention=graph.kv_half)

