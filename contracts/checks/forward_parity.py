"""``forward-parity``: on the same weights and inputs, the trainer's forward and the engine's draft forward
give the same logits (within a tolerance justified by the dtype) and the same top-k target ids, at step 0 and,
where the trainer's reference carries its later TTT steps, at every draft step after it.

Prevents the break no name or shape reveals: a switch the engine does not implement (speculators'
``norm_before_residual: true`` on SGLang 0.5.23: 4e-2 apart at step 0 on the same weights), a norm
placed elsewhere, an embedding or head other than the trained one. The trainer side is the trainer's own
forward, recorded with the fixture (``fixtures/references``); the engine side replays the same token ids,
positions and aux hidden states through the engine's draft forward after its own wiring to the target.
Steps after the first catch what step 0 cannot: the state a draft feeds its next step (SpecForge 0.2.0's
``norm_output: true`` normalises only before ``lm_head`` and feeds the raw state on; SGLang and vLLM feed the
normalised one: identical step-0 logits, 3.6e-2 apart at step 1 on the same weights).
"""

from __future__ import annotations

import math

from contracts.registry import FAIL, PASS, SKIP, Result, SubjectView, contract

TOP_K = 5


def _topk(row: list[float], k: int) -> list[int]:
    return sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]


@contract("forward-parity", "on the same weights and inputs, the trainer's forward and the engine's draft forward "
                            "give the same logits at every draft step the trainer's reference carries (within the "
                            "dtype's tolerance) and the same top-k target ids",
          # the replay runs the loaded, wired draft under its config, mapping ids with the engine's hot_token_id
          depends_on=("key-naming", "tensor-shapes", "d2t-semantics", "embed-head", "config"))
def check_forward_parity(subject: SubjectView) -> Result:
    if subject.target_path is not None:
        subject.load  # noqa: B018  (a draft the engine refuses is config's finding: no trainer reference is made for it)
    reference = subject.reference
    if reference.path is None and reference.candidates:
        return _against_each_trainer(subject, reference)
    if reference.path is None:
        return Result("forward-parity", SKIP, f"not judged: no trainer reference forward: {reference.unavailable}",
                      {"trainer": reference.trainer, "release": reference.version},
                      f"give {reference.needs}" if reference.needs else None, needs=reference.needs)
    result = _judged(subject, reference)
    if reference.origin == "made on the spot" and result.status != SKIP:
        result.summary += (f" [reference made on the spot by {reference.trainer} {reference.version}'s own forward, "
                           + ("synthetic inputs: the target has no layer weights here]" if reference.inputs == "synthetic"
                              else "the target's real aux hidden states]"))
    return result


def _against_each_trainer(subject: SubjectView, reference) -> Result:
    """A draft whose trainer is unknown: the engine's forward against each known trainer's on the same weights. Which
    one it computes is a finding; whether that is the right one is the user's to say (``--trainer``), so the contract
    stays unjudged (exit 3) with the comparison in its summary."""
    agree, differ, untaken, ev = [], [], [], {}
    for candidate in reference.candidates:
        who = f"{candidate.trainer} {candidate.version}" if candidate.version else candidate.trainer
        if candidate.path is None:
            untaken.append(candidate.unavailable[:240])
            ev[candidate.trainer] = {"unavailable": candidate.unavailable}
            continue
        result = _judged(subject, candidate, subject.forward_for(candidate))
        ev[candidate.trainer] = {"status": result.status, "summary": result.summary, "reference": candidate.describe()}
        if result.status == PASS:
            agree.append(f"{who}'s")
        else:
            differ.append(f"{who}'s ({result.summary.split(';')[0]})")
    said = (f"on these weights the engine computes what {' and '.join(agree)} own forward computes" if agree else
            "on these weights the engine computes what no known trainer's forward computes")
    if differ:
        said += f", not what {'; nor '.join(differ)} does"
    if untaken:
        said += "; " + "; ".join(untaken)
    return Result("forward-parity", SKIP, f"not judged: {reference.unavailable}; {said}",
                  {"trainers_compared": ev}, f"give {reference.needs} (the library that trained it)",
                  needs=reference.needs)


def _judged(subject: SubjectView, reference, obs=None) -> Result:
    obs = obs if obs is not None else subject.forward
    ev = {"reference": reference.describe(), "trainer": obs.trainer, "engine_dtype": obs.engine_dtype,
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
    steps = _later_steps(obs, diverges)
    if steps is not None:
        ev["chain_path"] = obs.chain_path
        ev["steps"] = [{"step": 0, "max_abs_diff": ev["max_abs_diff"], "anchors": len(ref),
                        "diverging_anchors": sum(diverges(r, e) for r, e in zip(ref, eng))}] + steps
    problems = []
    if first is not None:
        problems.append(f"step-0 logits differ by up to {obs.max_abs_diff:.3g} (tolerance {obs.tolerance:.3g}), first at "
                        f"position {first}")  # :.3g prints inf for non-finite
    if topk_mismatch:
        problems.append(f"top-{TOP_K} target ids differ at {len(topk_mismatch)} of {len(ref)} positions")
    later_bad = [s for s in steps or [] if s["diverging_anchors"] or s["top_k_mismatches"]]
    if not problems and later_bad:
        s = later_bad[0]
        ev["first_diverging_step"] = s["step"]
        gap = s["max_abs_diff"] if isinstance(s["max_abs_diff"], float) else float("inf")
        problems.append(
            f"step 0 agrees ({len(ref)} positions, max {obs.max_abs_diff:.3g}); draft step {s['step']} diverges from "
            f"training by up to {gap:.3g} (tolerance {obs.tolerance:.3g}) at {s['diverging_anchors']} of "
            f"{s['anchors']} anchors, top-{TOP_K} target ids differ at {s['top_k_mismatches']} anchors")
        later = subject.later_step_switches()
        if later:
            ev["switches_from_step_1"] = later
        fix = (f"the engine computes {', '.join(later)} from step 1 on (the state it feeds the next step) and the "
               f"trainer did not: remove {', '.join(later)} from config.json if the trainer's switch means something "
               f"else (SpecForge's norm_output only normalises before lm_head), or retrain with the engine's meaning") \
            if later else ("compare the state the trainer feeds its next TTT step (normalised or not) and the positions "
                           "it gives it with the engine's (see config)")
        return Result("forward-parity", FAIL, "; ".join(problems) + f" [{_path(obs)}]", ev, fix)
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
    summary = (f"{len(ref)} positions agree within {obs.tolerance:.3g} (max {obs.max_abs_diff:.3g}); top-{TOP_K} "
               f"target ids equal")
    if steps:
        worst = max(s["max_abs_diff"] for s in steps)
        summary = (f"steps 0..{len(steps)} agree within {obs.tolerance:.3g}: step 0 at {len(ref)} positions (max "
                   f"{obs.max_abs_diff:.3g}), later steps max {worst:.3g}; top-{TOP_K} target ids equal [{_path(obs)}]")
    elif obs.reference_chain is None:
        summary += " (step 0 only: the trainer's reference carries no later TTT step)"
    elif not obs.engine_chain:
        summary += f" (step 0 only: the later steps {obs.chain_path or 'were not replayed'})"
    return Result("forward-parity", PASS, summary, ev)


def _later_steps(obs, diverges) -> list[dict] | None:
    """Per later draft step k: the largest gap over the anchors, how many anchors diverge, where top-k differs."""
    if not obs.reference_chain or not obs.engine_chain:
        return None
    out = []
    for k, (ref, eng) in enumerate(zip(obs.reference_chain, obs.engine_chain), start=1):
        gaps = [max(abs(a - b) if math.isfinite(a - b) else math.inf for a, b in zip(r, e))
                for r, e in zip(ref, eng)]
        worst = max(gaps) if gaps else 0.0  # inf where either side is NaN or inf
        topk = sum([obs.reference_map[i] for i in _topk(r, TOP_K)] != [obs.engine_map[i] for i in _topk(e, TOP_K)]
                   for r, e in zip(ref, eng))
        out.append({"step": k, "max_abs_diff": worst if math.isfinite(worst) else "non-finite",
                    "anchors": len(ref), "diverging_anchors": sum(diverges(r, e) for r, e in zip(ref, eng)),
                    "top_k_mismatches": topk})
    return out


def _path(obs) -> str:
    """Which engine path the later steps ran on, said in the verdict."""
    return f"{obs.chain_loop or 'the engine draft loop'}, replayed through the engine's draft forward"
