"""``forward-parity``: on the same weights and inputs, the trainer's forward and the engine's draft forward
give the same step-0 logits (within a tolerance justified by the dtype) and the same top-k target ids.

Prevents the break no name or shape reveals: a switch the engine does not implement (speculators'
``norm_before_residual: true`` on SGLang 0.5.23: 4e-2 apart at step 0 on the same weights), a norm
placed elsewhere, an embedding or head other than the trained one. The trainer side is the trainer's own
forward, recorded with the fixture (``fixtures/references``); the engine side replays the same token ids,
positions and aux hidden states through the engine's draft forward after its own wiring to the target.
"""

from __future__ import annotations

import math

from contracts.registry import FAIL, PASS, SKIP, Result, contract

TOP_K = 5


def _topk(row: list[float], k: int) -> list[int]:
    return sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]


@contract("forward-parity", "on the same weights and inputs, the trainer's forward and the engine's draft forward "
                            "give the same step-0 logits (within the dtype's tolerance) and the same top-k target ids",
          # the replay runs the loaded, wired draft under its config, mapping ids with the engine's hot_token_id
          depends_on=("key-naming", "tensor-shapes", "d2t-semantics", "embed-head", "config"))
def check_forward_parity(subject) -> Result:
    if subject.reference_path is None:
        return Result("forward-parity", SKIP, "no trainer reference forward for this checkpoint: one is the "
                      "trainer's own step-0 forward on the target's real aux hidden states, made in the trainer's "
                      "environment (the bundled drafts of the weighted Llama target carry theirs, "
                      "fixtures/references/)", {})
    if subject.target_path is None:
        return Result("forward-parity", SKIP, "no --target: the engine shares the target's embedding into the draft, "
                      "so its forward cannot be replayed without it", {}, "pass --target DIR")
    obs = subject.forward
    ev = {"reference": str(subject.reference_path), "trainer": obs.trainer, "engine_dtype": obs.engine_dtype,
          "compute_dtype": obs.compute_dtype, "tolerance": obs.tolerance, "tolerance_why": obs.tolerance_why,
          "max_abs_diff": obs.max_abs_diff if obs.max_abs_diff is None or math.isfinite(obs.max_abs_diff)
          else "non-finite: NaN or inf in the engine's logits", "positions": len(obs.engine_logits or [])}
    if obs.skip_reason:
        return Result("forward-parity", SKIP, f"not judged on this engine here: {obs.skip_reason}", ev)
    if obs.error:
        ev["engine_error"] = obs.error
        return Result("forward-parity", FAIL, f"the engine's draft forward failed on the reference inputs: {obs.error}",
                      ev, "fix the failures of the other contracts first (names, shapes, widths)")
    ref, eng = obs.reference_logits, obs.engine_logits
    def diverges(r, e):  # NaN or inf (e.g. a head the engine never wrote) diverges too
        return any(not math.isfinite(a - b) or abs(a - b) > obs.tolerance for a, b in zip(r, e))

    first = next((t for t, (r, e) in enumerate(zip(ref, eng)) if diverges(r, e)), None)
    topk_mismatch = []
    for t, (r, e) in enumerate(zip(ref, eng)):
        ref_ids = [obs.reference_map[i] for i in _topk(r, TOP_K)]
        eng_ids = [obs.engine_map[i] for i in _topk(e, TOP_K)]
        if ref_ids != eng_ids:
            topk_mismatch.append({"position": t, "trainer_top_k_target_ids": ref_ids, "engine_top_k_target_ids": eng_ids})
    ev["first_diverging_position"] = first
    if first is not None:
        ev["at_first_divergence"] = {
            "trainer_top_k_target_ids": [obs.reference_map[i] for i in _topk(ref[first], TOP_K)],
            "engine_top_k_target_ids": [obs.engine_map[i] for i in _topk(eng[first], TOP_K)]}
    ev["top_k_mismatches"] = topk_mismatch[:4]
    problems = []
    if first is not None:
        problems.append(f"step-0 logits differ by up to {obs.max_abs_diff:.3g} (tolerance {obs.tolerance:.3g}), first at "
                        f"position {first}")  # :.3g prints inf for non-finite
    if topk_mismatch:
        problems.append(f"top-{TOP_K} target ids differ at {len(topk_mismatch)} of {len(ref)} positions")
    if problems:
        suspects = subject.ignored_switches()
        rope = subject.rope_scaling_warning()
        fix = (f"the engine ignores {', '.join(suspects)} (see config): retrain without it or serve with an engine "
               f"that implements it") if suspects else \
            (f"the engine applies the rope scaling the draft's config.json declares, which the trainer's forward did "
             f"not (see config: {rope})") if rope else \
            "compare the draft's norms, embedding and head with what the engine serves (see config, embed-head)"
        if suspects:
            ev["ignored_switches"] = suspects
        if rope:
            ev["rope_scaling_warning"] = rope
        return Result("forward-parity", FAIL, "; ".join(problems), ev, fix)
    return Result("forward-parity", PASS, f"{len(ref)} positions agree within {obs.tolerance:.3g} (max "
                  f"{obs.max_abs_diff:.3g}); top-{TOP_K} target ids equal", ev)
