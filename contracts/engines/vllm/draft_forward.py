"""Replay a trainer's reference forward through vLLM's own draft step, after vLLM's own wiring on the runner judged.

Contract served: ``forward-parity``. The draft is loaded by the engine's ``load_weights`` and wired to the
target by the runner's own step (V1's ``EagleProposer.load_model``, V2's ``load_eagle_model``; ``wiring.wire``, in
float32), then fed the reference's token ids,
positions and aux hidden states the way the proposer feeds them: ``combine_hidden_states`` (``fc`` and the
optional norms), the draft forward over one prefill (causal attention: position t sees tokens 0..t, as the
trainer's step 0 does), and ``compute_logits``, which scatters the draft head's logits onto the target
vocabulary through ``draft_id_to_target_id``. The logits compared are the engine's at the target ids its own
map gives each draft id, so no part of the engine's step is re-implemented.

Later draft steps (a reference with ``step_logits``): both runners' loops (V1 ``EagleProposer.propose``, V2
``TargetDependentARSpeculator``) run step k at position +1 and feed it the draft forward's second output at the
sampled row (``last_hidden_states, hidden_states = self.model(...)``; the model decides which state that is, e.g.
``norm_output``). Step k of the chain anchored at i is replayed as one prefill over positions 0..i+k: rows 0..i
the combined aux states, rows i+1..i+k the tokens the chain drafted (the trainer's ground truth) with the second
outputs of steps 0..k-1; causal attention gives row i+k the keys the loop's KV cache holds at step k.
"""

from __future__ import annotations

from contracts.engines.reference import COMPUTE_DTYPE, Replay
from contracts.engines.vllm.context import engine_version
from contracts.engines.vllm.cpu_forward import finish_loading, head_dim_of, kernels_missing, one_request, runs_on_cpu, \
    supported_head_sizes
from contracts.engines.vllm.loader import engine_map
from contracts.engines.held_tensors import meta_vocab_bytes
from contracts.engines.vllm.wiring import wire
from contracts.observations import ForwardObservation


def observe_forward(engine_dir, target_dir, reference_path, runner: str | None = None) -> ForwardObservation:
    import torch

    replay = Replay({"name": "vllm", "version": engine_version()}, engine_dir, reference_path)
    obs, ids, hidden, chain = replay.obs, replay.ids, replay.hidden, replay.chain
    w = wire(engine_dir, target_dir, dtype=COMPUTE_DTYPE, runner=runner)
    obs.runner = w.runner
    obs.engine_dtype = str(w.configs.draft.dtype).removeprefix("torch.")
    missing = kernels_missing()
    if missing:
        obs.skip_reason = missing
        return obs
    if w.target_from_file:  # the target's embedding and head were loaded on meta: no values to run on
        obs.skip_reason = (f"the target's embedding and head are over {meta_vocab_bytes() >> 20} MB: vLLM loads them on "
                           f"meta here, so its draft forward has no target values to run on")
        return obs
    if not runs_on_cpu(w.configs.draft.hf_config):
        obs.skip_reason = (f"vLLM's CPU attention kernel takes head sizes {supported_head_sizes()}; this draft's is "
                           f"{head_dim_of(w.configs.draft.hf_config)}, so its forward cannot run on a CPU (a limit of "
                           f"the engine's CPU build, not of the draft)")
        return obs
    if w.error:
        obs.error = f"the engine's wiring raised {w.error}"
        return obs
    draft = w.draft
    mapped = engine_map(draft)
    obs.engine_map = mapped if mapped is not None else list(range(replay.draft_vocab))
    try:
        finish_loading(draft, w.configs.draft)
        n = int(ids.shape[0])
        with one_request(w.configs.vc, n):
            combined = draft.combine_hidden_states(hidden.to(w.configs.draft.dtype))
            out, fed = draft(ids, torch.arange(n), combined)
            scattered = draft.compute_logits(out).float()
        later = _later_steps(draft, w.configs.vc, ids, combined, fed, len(chain) + 1) if chain else None
    except Exception as e:
        obs.error = f"{type(e).__name__}: {str(e)[:300]}"
        return obs
    if scattered.shape[-1] < max(obs.engine_map) + 1:
        obs.error = f"the engine's logits cover {scattered.shape[-1]} ids, its map reaches {max(obs.engine_map)}"
        return obs
    back = torch.tensor(obs.engine_map)  # back to draft-vocab order, through the engine's own map
    eng = scattered[:, back]
    obs.engine_logits = eng.tolist()
    if chain:
        obs.reference_chain = chain
        obs.chain_loop = f"vLLM {w.runner.upper()} proposer loop"
        obs.engine_chain = [[row[back].tolist() for row in step] for step in later or []]
        obs.chain_path = (f"vLLM's draft forward stepped as the {w.runner.upper()} proposer steps it (position +1, fed "
                          "the forward's second output at the sampled row), one causal prefill per step over the "
                          "prompt and the chain so far, ground-truth tokens in place of drafted ones")
    return replay.compare(eng, str(draft.model.embed_tokens.weight.dtype).removeprefix("torch."))


def _later_steps(draft, vc, ids, combined, step0_fed, steps: int) -> list:
    """[step k - 1][anchor] -> the engine's target-vocab logits row of step k of the chain anchored there."""
    t = int(ids.shape[0])
    later: list[list] = [[] for _ in range(steps - 1)]
    for anchor in range(t):
        for k, row in enumerate(chain_rows(draft, vc, ids, combined, step0_fed[anchor], anchor,
                                           min(steps, t - anchor)), start=1):
            later[k - 1].append(row)
    return later


def chain_rows(draft, vc, ids, combined, step0_fed, anchor: int, steps: int) -> list:
    """Steps 1..steps-1 of the chain anchored at ``anchor`` (``ids[anchor+k]`` the token step k embeds;
    ``step0_fed`` the second output of step 0 at the anchor): each one causal prefill over positions 0..anchor+k
    whose rows after the anchor carry the chain's tokens and fed states. Returns target-vocab logits rows."""
    import torch

    fed, rows = [step0_fed], []
    for k in range(1, steps):
        n = anchor + k + 1
        states = torch.cat([combined[:anchor + 1], torch.stack(fed)])
        with one_request(vc, n):
            out, second = draft(ids[:n], torch.arange(n), states)
            rows.append(draft.compute_logits(out[-1:]).float()[0])
        fed.append(second[-1])
    return rows
