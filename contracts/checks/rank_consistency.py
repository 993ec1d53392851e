"""``rank-consistency``: under tensor parallelism every rank builds the same drafter, and the ranks together serve the
drafter one rank (TP=1) builds: the same decision to keep the draft's own embedding and head or share the target's,
and the same embedding rows and head rows, gathered in rank order.

Prevents: vLLM's per-rank share decision (vllm#50158, both model runners): each rank compares only its vocabulary
shard of the draft's ``embed_tokens`` / ``lm_head`` with the target's, so a draft equal to the target except in its
first rows keeps its own module on rank 0 and takes the target's on rank 1, and the ranks serve different drafters
(the acceptance collapsed at TP=2 on Gemma-4); and SGLang's ``set_embed`` handing a draft the target's embedding
shard while the draft's ``VocabParallelEmbedding`` ranges come from its own, smaller ``vocab_size``: at TP=2 the ranks
look up shifted rows (and zeros above the draft's vocabulary), at TP=1 the right ones, with nothing raised.
Judged on what the engine's own wiring built in each of N gloo ranks (``contracts.engines.ranks``); every other
contract is judged on one rank, which this one says the N ranks together equal.
"""

from __future__ import annotations

from contracts.checkpoint import WeightsNotFetched, text_config
from contracts.checks.evidence import engine_label
from contracts.registry import FAIL, PASS, SKIP, Result, SubjectView, contract

CID = "rank-consistency"
ROLES = {"embed": "embed_tokens", "lm_head": "lm_head"}
SAYS = {"kept": "keeps the draft's own", "shared": "shares the target's"}
TP_FLAG = "--tp N (the deployment's tensor-parallel size)"


SAY = {"kept": "keep the draft's own", "shared": "share the target's"}  # (several ranks)


def _who(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(str(r) for r in ranks)}"


def _rows_of(records: list[dict], ranks: list[int], role: str) -> str:
    """The global rows RANKS hold for ROLE, as one range where they are contiguous."""
    spans = [records[r][role]["rows"] for r in ranks]
    if all(a[1] == b[0] for a, b in zip(spans, spans[1:])):
        return f"rows {spans[0][0]}-{spans[-1][1] - 1}"
    return "rows " + ", ".join(f"{a}-{b - 1}" for a, b in spans)


def _tp1_decision(subject: SubjectView, role: str) -> str | None:
    """What one rank decides for ROLE, from the engine's own TP=1 wiring (``embed-head``'s observation)."""
    try:
        wiring = subject.embed_head
    except Exception:  # noqa: BLE001  (embed-head reports why the one-rank wiring could not be observed)
        return None
    held = wiring.embed if role == "embed" else wiring.head
    return "shared" if (held.same_object_as or "").startswith("target:") else "kept"


def _fix(role: str) -> str:
    name = ROLES[role]
    return (f"make the draft's {name} agree with the target's on every rank: if it was trained frozen from the "
            f"target's, save it bit-equal to the target's (or leave it out: every rank then shares the target's); if "
            f"it was trained, it must differ from the target's in every rank's rows, or the engine must decide once "
            f"for all ranks (vllm#50280)")


@contract(CID, "every tensor-parallel rank builds the same drafter, and the ranks together serve the embedding and "
               "head one rank (TP=1) serves",
          depends_on=("key-naming", "tensor-shapes"), applies=lambda subject: subject.tp > 1)
def check_rank_consistency(subject: SubjectView) -> Result:
    if subject.tp <= 1:
        return Result(CID, SKIP, "not judged: one rank (TP=1) builds the drafter; give the deployment's "
                                 "tensor-parallel size", {"tp_size": subject.tp}, f"give {TP_FLAG}", needs=TP_FLAG)
    if subject.target_path is None:
        return Result(CID, SKIP, "not judged without the target: each rank decides against its shard of the "
                                 "target's embedding and head", fix="give --target DIR", needs="--target DIR")
    if not subject.target.has_weights:
        return Result(CID, SKIP, "not judged: each rank compares its shard of the draft's embedding and head with the "
                                 "target's values, and the target was given as its config alone",
                      fix="give the target's weights (its embed_tokens and lm_head)", needs="the target's weights")
    for role, ckpt in (("draft", subject.checkpoint), ("target", subject.target)):
        if ckpt.not_fetched:  # each rank's engine reads its files whole: a hole would be read as zeros
            raise WeightsNotFetched(f"the {role}'s {ckpt.not_fetched[0]} (and {len(ckpt.not_fetched) - 1} more) was "
                                    f"not fetched from the Hub, and each rank's engine loads every tensor: rerun with "
                                    f"--download")
    obs = subject.ranks
    runner = {"v1": ", Model Runner V1", "v2": ", Model Runner V2"}.get(obs.runner or "", "")
    where = f"{engine_label(obs.engine)}{runner} at TP={obs.tp_size}"
    if obs.how == "shard-ranges":
        where += (" (judged in one process from the engine's shard-range functions and its per-rank decision: "
                  "more ranks than this machine runs as processes)")
    evidence: dict = {"tp_size": obs.tp_size, "how": obs.how, "wiring": obs.wiring, "seconds": obs.seconds,
                      "ranks": [{"rank": r["rank"], "peak_rss_mb": r.get("peak_rss_mb"),
                                 "aux_layer_ids": r.get("aux_layer_ids"),
                                 **{role: {k: r[role][k] for k in ("decision", "rows", "target_rows", "shard")
                                           if k in r[role]}
                                    for role in ROLES}} for r in obs.ranks]}
    problems, fixes = [], []
    for role, name in ROLES.items():
        decisions = {r["rank"]: r[role]["decision"] for r in obs.ranks}
        one_rank = _tp1_decision(subject, role)
        evidence.setdefault("tp1", {})[role] = one_rank
        groups: dict[str, list[int]] = {}
        for rank, decision in decisions.items():
            groups.setdefault(decision, []).append(rank)
        if len(groups) > 1:
            said = "; ".join(f"{_who(ranks)} {SAYS[d] if len(ranks) == 1 else SAY[d]} {name} "
                             f"({_rows_of(obs.ranks, ranks, role)})" for d, ranks in sorted(groups.items()))
            problems.append(f"the ranks build different drafters: {said}")
            evidence[f"{role}_diverging_ranks"] = groups
            fixes.append(_fix(role))
            continue
        decision = next(iter(groups))
        if one_rank is not None and decision != one_rank:
            problems.append(f"every rank {SAYS[decision]} {name}; one rank (TP=1) {SAYS[one_rank]}")
            fixes.append(_fix(role))
            continue
        misread = [r for r in obs.ranks if decision == "shared" and r[role].get("target_rows")
                   and r[role]["rows"] != r[role]["target_rows"]]
        if misread and "served" not in obs.ranks[0][role]:  # (with the rows served, the comparison below says more)
            problems.append(f"every rank holds the target's {name} shard but looks it up by other rows: "
                            + "; ".join(f"rank {r['rank']} rows {r[role]['rows'][0]}-{r[role]['rows'][1] - 1} "
                                        f"(the target's shard: {r[role]['target_rows'][0]}-"
                                        f"{r[role]['target_rows'][1] - 1})" for r in misread))
            continue
        if "served" not in obs.ranks[0][role]:  # judged from shard ranges: the decisions are the verdict
            continue
        served = {r["rank"]: r[role]["served"] for r in obs.ranks}
        digests = {s["digest"] for s in served.values()}
        if len(digests) > 1:
            problems.append(f"the ranks serve different {name} rows to each other")
            continue
        candidate = "own" if (one_rank or decision) == "kept" else "target"
        expected = obs.candidates.get(role, {}).get(candidate)
        got = served[obs.ranks[0]["rank"]]
        evidence[f"{role}_served"] = got["digest"]
        if expected is None:
            evidence[f"{role}_tp1_rows"] = "not compared: the tensor it would serve is not in the files"
            continue
        evidence[f"{role}_tp1"] = expected["digest"]
        if expected["digest"] != got["digest"]:
            differs = (obs.ranks[0][role].get("differs") or {}).get(candidate)
            shards = "; ".join(f"rank {r['rank']} holds rows {r[role]['rows'][0]}-{r[role]['rows'][1] - 1}"
                               + (f" (the target's shard: {r[role]['target_rows'][0]}-{r[role]['target_rows'][1] - 1})"
                                  if r[role].get("target_rows") and r[role]["target_rows"] != r[role]["rows"] else "")
                               for r in obs.ranks)
            problems.append(f"the ranks together serve other {name} rows than one rank does"
                            + (f" ({differs['rows']} of {differs['of']} rows differ, the first {differs['first']})"
                               if differs else "") + f": {shards}")
            evidence[f"{role}_rows_differing"] = differs
            fixes.append(f"set the draft config's vocab_size to the target's ({text_config(subject.target.config).get('vocab_size')})"
                         if role == "embed" and decision == "shared" else _fix(role))
    if problems:
        return Result(CID, FAIL, f"{where}: " + "; ".join(problems), evidence, "; ".join(dict.fromkeys(fixes)))
    decided = ", ".join(f"{name}: every rank {SAYS[obs.ranks[0][role]['decision']]}" for role, name in ROLES.items())
    gathered = "; the rows gathered in rank order equal one rank's" if obs.how == "processes" else ""
    return Result(CID, PASS, f"{where}: every rank builds the drafter one rank builds ({decided}{gathered})", evidence)
