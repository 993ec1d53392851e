"""``d2t-semantics``: the engine's own draft->target map (SGLang's ``hot_token_id = d2t + arange(len(d2t))``,
vLLM's ``arange(draft_vocab) + draft_id_to_target_id`` in ``compute_logits``) is a one-to-one, in-range map of length
``draft_vocab_size`` into the target vocab, in its trainer's order (ascending for speculators and SpecForge; by
frequency for Model Optimizer and NeMo Automodel), onto the set ``t2d`` selects, exists whenever the draft vocab is
reduced, and equals the mapping the trainer built.

Prevents: ``d2t`` saved as absolute ids (draft id i reaches target id ``ids[i] + i``), a missing ``d2t``
with a reduced vocab (draft id i silently means target id i), and the opposite mistakes — "fixing" a correct
``d2t`` whose first offsets are all zero (they are zero whenever target ids 0..k are selected), or failing a
correct frequency-ordered one: a ``t2d`` mask names a set, never an order (NeMo Automodel saves both, its ``d2t``
in frequency order), so the order is judged only against a known trainer's. Judged on
the ``hot_token_id`` the engine's ``load_weights`` computed, never on a re-implementation of it.
"""

from __future__ import annotations

from contracts.checkpoint import text_config
from contracts.checks.evidence import nothing_built
from contracts.conventions import ASCENDING, d2t_order
from contracts.registry import FAIL, PASS, Result, SubjectView, contract

INTEGER_DTYPES = {"int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64"}
SIDE_BY_SIDE = 8
# where each engine's loader puts d2t: SGLang computes hot_token_id from it; vLLM loads it into a parameter
D2T_CHANNELS = ("hot_token_id", "draft_id_to_target_id")


def target_vocab_size(subject, engine_config: dict) -> tuple[int | None, str]:
    """The target vocab size and where it came from (the target's config, else the draft's vocab_size)."""
    if subject.target is not None:
        for c in (subject.target.config, text_config(subject.target.config)):
            if isinstance(c.get("vocab_size"), int):
                return c["vocab_size"], "target config.json"
    size = engine_config.get("vocab_size")
    return (size, "draft config vocab_size") if isinstance(size, int) else (None, "unknown")


def diagnose(d2t: list | None, hot: list | None, intended: list[int] | None, reduced: bool) -> list[str]:
    """Which known mistakes fit the data (more than one may)."""
    found = []
    if hot is None:
        if reduced:
            found.append("missing: no d2t, so the engine maps draft id i to target id i")
        return found
    if intended is not None and d2t is not None and len(d2t) == len(intended) and d2t == intended and d2t != hot:
        found.append("absolute ids: d2t holds the target ids themselves, but the engine adds arange(len(d2t)) "
                     "(it expects offsets target_id - draft_id)")
    if len(set(hot)) < len(hot):
        found.append("duplicates: several draft ids reach the same target id")
    if intended is not None and len(hot) == len(intended) and hot != intended:
        shifts = {h - t for h, t in zip(hot, intended)}
        if len(shifts) == 1:
            found.append(f"shifted: every engine target is the intended one {shifts.pop():+d}")
    return found


def _as_ints(values) -> list[int] | None:
    import math

    out = []
    for v in values:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        out.append(int(v))
    return out


@contract("d2t-semantics", "the engine's draft->target map (d2t + arange) is a one-to-one, in-range map of length "
                           "draft_vocab_size into the target vocab, in its trainer's order, onto the set t2d selects, "
                           "exists whenever the draft vocab is reduced, and equals the mapping the trainer built")
def check_d2t_semantics(subject: SubjectView) -> Result:
    obs = subject.load
    stopped = nothing_built("d2t-semantics", obs)
    if stopped:
        return stopped
    ckpt = subject.checkpoint
    draft_vocab = obs.config.get("draft_vocab_size") or obs.config.get("vocab_size")
    vocab, vocab_source = target_vocab_size(subject, obs.config)
    reduced = vocab is not None and draft_vocab is not None and draft_vocab < vocab
    d2t_keys = [t.key for t in obs.tensors if t.side_channel in D2T_CHANNELS]
    d2t_info = ckpt.tensors.get(d2t_keys[-1]) if d2t_keys else None
    d2t = ckpt.load_array(d2t_keys[-1]).flatten().tolist() if d2t_info else None
    t2d_info = ckpt.tensors.get("t2d")
    t2d = ckpt.load_array("t2d").flatten() if t2d_info is not None else None  # numpy: no torch in this process
    hot_raw = obs.hot_token_id  # the engine's own map, as it computed it
    hot = _as_ints(hot_raw) if hot_raw is not None else None

    # the trainer's order, where the trainer is known (not guessed from the checkpoint's form)
    trainer = subject.trainer_name
    order = None if subject.trainer_basis[1] else d2t_order(trainer)
    t2d_ids = t2d.nonzero()[0].tolist() if t2d is not None and t2d.dtype.kind != "f" else None
    intended, intended_source = None, None
    if subject.intended_ids is not None:
        intended, intended_source = list(subject.intended_ids), "the trainer's recorded selection"
    elif t2d_ids is not None and order == ASCENDING:
        intended, intended_source = t2d_ids, f"t2d, in {trainer}'s ascending order"

    evidence = {
        "engine_draft_vocab": draft_vocab, "target_vocab": vocab, "target_vocab_from": vocab_source,
        "d2t_key": d2t_keys[-1] if d2t_keys else None, "d2t_dtype": d2t_info.dtype if d2t_info else None,
        "d2t_head": d2t[:SIDE_BY_SIDE] if d2t else None,
        "engine_hot_token_id_head": hot_raw[:SIDE_BY_SIDE] if hot_raw is not None else None,
        "engine_hot_token_id_dtype": obs.hot_token_id_dtype, "intended_from": intended_source,
    }
    problems, fixes = [], []

    if d2t_info is not None and d2t_info.dtype not in INTEGER_DTYPES:
        problems.append(f"d2t is {d2t_info.dtype}, not an integer tensor: the engine's hot_token_id becomes "
                        f"{d2t_info.dtype} and its token ids are not ids")
        fixes.append("save d2t as int64 offsets (target_id - draft_id)")
    # no d2t: SGLang then has no hot_token_id, vLLM keeps draft_id_to_target_id at zeros; either way the engine
    # maps draft id i to target id i
    identity = hot is None or hot == list(range(len(hot)))
    if d2t_info is None and reduced and identity:
        problems.append(f"no d2t although the draft vocab ({draft_vocab}) is smaller than the target's ({vocab}): "
                        f"the engine maps draft id i to target id i")
        fixes.append("save d2t (int64 offsets target_id - draft_id for each draft id) with the checkpoint")
    if hot_raw is not None and hot is None:
        problems.append("the engine's hot_token_id holds NaN or infinite values (d2t is not a valid id map)")
    mapped = hot if hot is not None else (list(range(draft_vocab)) if draft_vocab and hot_raw is None else None)
    if hot is not None:
        if draft_vocab is not None and len(hot) != draft_vocab:
            problems.append(f"hot_token_id has {len(hot)} entries but the engine's draft head has {draft_vocab} "
                            f"logits: draft ids ≥ {min(len(hot), draft_vocab)} map nowhere or never occur")
            fixes.append("d2t must have exactly draft_vocab_size entries (one per draft-head row)")
        if vocab is not None:
            bad = [(i, h) for i, h in enumerate(hot) if not 0 <= h < vocab]
            if bad:
                evidence["out_of_range"] = [{"draft_id": i, "engine_target": h} for i, h in bad[:SIDE_BY_SIDE]]
                problems.append(f"{len(bad)} draft id(s) map outside the target vocab [0, {vocab}): first "
                                f"draft id {bad[0][0]} → {bad[0][1]}")
        steps = [(i, a, b) for i, (a, b) in enumerate(zip(hot, hot[1:])) if b <= a]
        dup = sorted({h for h in hot if hot.count(h) > 1}) if len(set(hot)) < len(hot) else []
        if dup:
            evidence["duplicate_targets"] = dup[:SIDE_BY_SIDE]
            problems.append(f"{len(hot) - len(set(hot))} draft id(s) map to a target id another draft id already "
                            f"maps to (first: {dup[0]}): the draft head spends rows on the same token")
        elif steps:
            # The order is the trainer's: speculators and SpecForge lay the selected ids out ascending; Model Optimizer
            # (calibrate_frequent_vocab) and NeMo Automodel (build_eagle3_token_mapping, which also saves a t2d) by
            # frequency, which SGLang and vLLM serve as trained: they only index through the map. A t2d mask names the
            # selected set, not an order, so a non-ascending map fails only against a trainer known to sort.
            i, a, b = steps[0]
            evidence["not_increasing_at"] = [{"draft_id": j + 1, "engine_target": y, "previous": x}
                                             for j, x, y in steps[:SIDE_BY_SIDE]]
            if order == ASCENDING and t2d is not None:
                problems.append(f"hot_token_id is not strictly increasing ({len(steps)} place(s); first: draft ids "
                                f"{i}, {i + 1} → {a}, {b}) while {trainer} lays out its draft vocabulary ascending "
                                f"(its t2d names the selected set, its d2t must follow it in order)")
            elif order is not None:
                evidence["order"] = f"not ascending: {trainer}'s order, {order}"
            else:
                evidence["order"] = ("not ascending, and the trainer is " + ("a guess" if trainer else "unknown") +
                                     ": the order is the trainer's (speculators and SpecForge sort the selected ids; "
                                     "Model Optimizer and NeMo Automodel order them by frequency) and is not judged; "
                                     "t2d names the selected set only (pass --trainer to judge the order)")
    if t2d is not None and mapped is not None:
        selected = int(t2d.sum())
        t2d_problems = []
        if vocab is not None and t2d.size != vocab:
            t2d_problems.append(f"t2d has {t2d.size} entries, the target vocab {vocab}")
        if draft_vocab is not None and selected != draft_vocab:
            t2d_problems.append(f"t2d selects {selected} target ids, the draft vocab is {draft_vocab}")
        outside = [(i, h) for i, h in enumerate(mapped) if 0 <= h < t2d.size and not bool(t2d[h])]
        if outside:
            t2d_problems.append(f"{len(outside)} engine target(s) are not selected in t2d (first: draft id "
                                f"{outside[0][0]} → {outside[0][1]})")
        if t2d_problems:
            evidence["t2d_disagrees"] = t2d_problems
            problems.append("d2t and t2d disagree: " + "; ".join(t2d_problems))
    if intended is not None and mapped is not None and mapped != intended:
        diffs = [{"draft_id": i, "engine_target": m, "intended": t}
                 for i, (m, t) in enumerate(zip(mapped, intended)) if m != t][:SIDE_BY_SIDE]
        evidence["first_differences"] = diffs
        if diffs:
            problems.append(f"the engine maps draft ids to other target ids than intended (from {intended_source}): "
                            + ", ".join(f"{d['draft_id']} → {d['engine_target']} (intended {d['intended']})"
                                        for d in diffs[:3]))
        elif len(mapped) != len(intended):
            problems.append(f"the engine maps {len(mapped)} draft ids, the trainer selected {len(intended)}")

    hypotheses = diagnose(d2t, None if d2t_info is None and identity else hot,
                          intended if intended is not None else t2d_ids, reduced)
    evidence["diagnosis"] = hypotheses
    if any(h.startswith("absolute ids") for h in hypotheses):
        fixes.insert(0, "save d2t[i] = target_id[i] - i (offsets), not the target ids")
    if any(h.startswith("shifted") for h in hypotheses):
        fixes.insert(0, "rebuild d2t from the trainer's selection: d2t[i] = selected[i] - i")
    if problems:
        if not fixes:
            fixes.append("rebuild d2t/t2d with the trainer's own mapping function from the selected target ids "
                         "(d2t[i] = selected[i] - i, t2d[selected] = true)")
        return Result("d2t-semantics", FAIL, "; ".join(problems), evidence, "; ".join(dict.fromkeys(fixes)))
    if hot is None:
        return Result("d2t-semantics", PASS, f"no d2t and no reduced vocab: the draft predicts all {draft_vocab} "
                      f"target ids directly", evidence)
    zeros = next((i for i, v in enumerate(d2t or []) if v != 0), len(d2t or []))
    note = f"; its first {zeros} offsets are 0 because target ids 0..{zeros - 1} are selected" if zeros > 1 else ""
    checked = f", equal to {intended_source}" if intended is not None else ""
    if "order" not in evidence:
        laid_out = "strictly increasing"
    elif intended is not None or order is not None:
        laid_out = "one-to-one, in the trainer's order"
    else:
        laid_out = "one-to-one onto the set t2d selects, not ascending (the order is the trainer's: not judged)" \
            if t2d is not None else "one-to-one, not ascending (the order is the trainer's: not judged)"
    return Result("d2t-semantics", PASS, f"engine maps {len(hot)} draft ids into [0, {vocab}) {laid_out}"
                  f"{checked}{note}", evidence)
