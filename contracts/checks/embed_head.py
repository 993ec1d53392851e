"""``embed-head``: after the engine's own worker wiring, the draft keeps its trained ``lm_head`` (or has a head
at all when ``draft_vocab_size`` is set), and its embedding is the one it was trained with.

Prevents: a draft that declares ``draft_vocab_size`` but ships no ``lm_head`` serving a random head (sglang
#27908: accept length 1.00 behind HTTP 200) or, on vLLM, the target's full-vocabulary head, which no
``draft_id_to_target_id`` maps; the engine replacing a trained head with the target's (vllm #28549: accept
length 1.32, 2.49 once fixed; in SGLang whenever ``draft_vocab_size`` is null); a tied config turning the head
into the embedding; an engine that does not share the target's embedding into a draft whose hidden size differs
(SGLang's ``set_embed`` returns silently, vLLM keeps the draft's), leaving a draft without ``embed_tokens`` on a
random embedding; and a draft trained with another embedding than the target's, which SGLang serves in its
place. Judged on what the draft holds after the engine's own wiring (SGLang's
``EagleDraftWorker.init_lm_head``, vLLM's ``EagleProposer.load_model``): parameter identity, the load's NaN
sentinel, chunked checksums, compared with the checkpoint's and the target's tensors read from their files in
row chunks.
"""

from __future__ import annotations

from contracts.checkpoint import key_ending
from contracts.checks.evidence import engine_label
from contracts.config_facts import trained_embedding_frozen
from contracts.fingerprint import (coarser, compare_file_tensors, file_fingerprint, files_equal,
                                  first_differing_rows)
from contracts.registry import FAIL, PASS, SKIP, Result, SubjectView, contract

CID = "embed-head"
RANDOM = "never written (random)"
VOCAB_PADDING = 64  # SGLang and vLLM pad vocab-parallel weights to a multiple of 64 rows


# The engine steps that share one of the target's vocabulary tensors into the draft, per role: vLLM's Model Runner V1
# (the proposer's) and V2 (``load_eagle_model`` shares the head itself, the embedding through its helper).
SHARING_STEP = {"embed": ("_maybe_share_embeddings", "maybe_share_target_embed"),
                "head": ("_maybe_share_lm_head", "load_eagle_model")}


def _via(obs, role: str) -> str:
    """The engine step that put the target's tensor into the draft (SGLang: set_embed / set_embed_and_head;
    vLLM: the step of the runner judged, ``SHARING_STEP``)."""
    if "set_embed_and_head" in obs.calls:
        return "set_embed_and_head"
    own = [step for step in SHARING_STEP[role] if step in obs.calls]
    if own:
        return own[0]
    return obs.calls[0] if obs.calls else "set_embed"


def _origin(held, obs, role: str) -> str:
    """Where the tensor the draft holds came from, in the contract's words."""
    via = _via(obs, role)
    if held.same_object_as and held.same_object_as.startswith("target:"):
        shared = f"target ({via})"
        if role == "head" and held.same_object_as.endswith("embed_tokens.weight"):
            return f"the target's embedding, tied ({via})"
        return shared
    if held.unwritten_fraction is not None and held.unwritten_fraction >= 1.0:
        return RANDOM
    if held.unwritten_fraction:
        return f"partly written ({held.unwritten_fraction:.0%} random)"
    if role == "head" and obs.tied:
        return "the checkpoint's embedding, tied"
    return "checkpoint"


def _same_as_target_head(obs, ckpt, target, ckpt_head: str, h_ev: dict) -> bool:
    """The target's head the draft is served with holds exactly the checkpoint's head (nothing trained is lost:
    vLLM shares an identical head to save memory)."""
    keys = [k for k in obs.head.written_by if k in target.tensors]
    if not keys:
        return False
    cmp = _against_target(ckpt, ckpt_head, target, keys[0])
    h_ev["checkpoint_vs_target"] = cmp
    return files_equal(cmp)


def _file_fingerprint(ckpt, key: str, like: dict) -> dict:
    return file_fingerprint(ckpt.path / ckpt.tensors[key].file, key, like)


def _verify(held, ckpt, key, label: str, ev: dict) -> None:
    """Evidence that the held values are bit-for-bit the file tensor's (after the engine's dtype cast)."""
    if held.fingerprint is None or ckpt is None or key not in ckpt.tensors:
        return
    want = _file_fingerprint(ckpt, key, held.fingerprint)
    ev[f"{label}_checksum"] = want["digest"]
    ev[f"served_equals_{label}"] = want["digest"] == held.fingerprint["digest"]
    if want["digest"] != held.fingerprint["digest"]:
        ev[f"first_rows_differing_from_{label}"] = first_differing_rows(held.fingerprint, want)


def _tensor_ev(held, origin: str) -> dict:
    return {"from": origin, "shape": held.shape, "dtype": held.dtype, "same_object_as": held.same_object_as,
            "checksum": held.fingerprint["digest"] if held.fingerprint else None}


@contract(CID, "after the engine's own worker wiring, the draft keeps its trained lm_head (or has a head at all "
               "when draft_vocab_size is set), and its embedding is the one it was trained with",
          # a dropped or misshapen lm_head / embed_tokens is key-naming's or tensor-shapes' finding first
          depends_on=("key-naming", "tensor-shapes"))
def check_embed_head(subject: SubjectView) -> Result:
    from contracts.refusals import TargetRefused

    if subject.target_path is None:
        return _without_target(subject)
    try:
        obs = subject.embed_head
    except TargetRefused as e:
        return Result(CID, SKIP, f"not judged: the engine cannot build the target ({e})", {"target_error": str(e)},
                      needs=e.needs)
    ckpt, target = subject.checkpoint, subject.target
    values = bool(obs.target["has_weights"]) and obs.embed.fingerprint is not None
    d, t = obs.draft, obs.target
    embed_origin, head_origin = _origin(obs.embed, obs, "embed"), _origin(obs.head, obs, "head")
    ckpt_embed, ckpt_head = key_ending(ckpt.tensors, "embed_tokens.weight"), key_ending(ckpt.tensors, "lm_head.weight")
    evidence: dict = {
        "wiring": {"engine_function": obs.wiring, "calls": obs.calls,
                   "load_lm_head_from_target": obs.load_lm_head_from_target, "tied": obs.tied,
                   "draft_hidden_size": d["hidden_size"], "target_hidden_size": d["target_hidden_size"],
                   "engine_draft_vocab_size": d["draft_vocab_size"], "target_vocab_size": t["vocab_size"],
                   "target_serving_dtype": t["dtype"]},
        "embedding": {**_tensor_ev(obs.embed, embed_origin), "checkpoint_tensor": ckpt_embed},
        "head": {**_tensor_ev(obs.head, head_origin), "checkpoint_tensor": ckpt_head,
                 "checkpoint_shape": list(ckpt.tensors[ckpt_head].shape) if ckpt_head else None},
        "value_checks": "chunked checksums of the served tensors against the checkpoint's and the target's files"
        if values else "skipped: the target directory has no *.safetensors (config.json only), so the values the "
                       "engine shares from it cannot be compared; structure judged only",
    }
    if obs.error:
        evidence["wiring_error"] = obs.error
    problems, fixes = [], []
    frozen = trained_embedding_frozen(ckpt.config)
    if frozen:
        evidence["embedding"]["trained_with"] = f"the target's embedding: {frozen}"

    # --- the embedding --------------------------------------------------------------------------------------
    e_ev = evidence["embedding"]
    if values:
        source = target if embed_origin.startswith("target") else ckpt
        keys = obs.embed.written_by if embed_origin.startswith("target") else [ckpt_embed]
        if keys and keys[0]:
            _verify(obs.embed, source, keys[0], "target" if source is target else "checkpoint", e_ev)
    if embed_origin.startswith("target") and ckpt_embed:
        if values and obs.embed.written_by:
            tkey = obs.embed.written_by[0]
            cmp = _against_target(ckpt, ckpt_embed, target, tkey)
            e_ev["checkpoint_vs_target"] = cmp
            if not files_equal(cmp) and frozen:  # the saved one was never trained
                e_ev["checkpoint_embedding_unused"] = (f"{_differs(cmp)}; {frozen}, and {engine_label(obs.engine)} "
                                                       f"serves the target's: as trained")
            elif not files_equal(cmp):
                detail = _differs(cmp)
                via = _via(obs, "embed")
                problems.append(f"the checkpoint's `{ckpt_embed}` is not the target's embedding ({detail}), but the "
                                f"engine serves the draft with the target's ({via}): the draft was trained with "
                                f"another embedding than it runs with")
                fixes.append(f"train the draft with the target's embedding frozen (as speculators does) — "
                             f"{engine_label(obs.engine)} replaces the draft's embedding with the target's here — or "
                             f"retrain from a checkpoint whose `{ckpt_embed}` equals the target's")
        else:
            e_ev["checkpoint_vs_target"] = "skipped: no target weights"
    if embed_origin == "checkpoint" and frozen and ckpt_embed:
        _own_embedding_not_trained(obs, ckpt, target, ckpt_embed, frozen, e_ev, problems, fixes)
    if embed_origin.startswith("target") and obs.embed.shape and isinstance(d["hidden_size"], int) and \
            obs.embed.shape[-1] != d["hidden_size"]:
        problems.append(f"the engine shares the target's embedding {obs.embed.shape} into a draft of hidden size "
                        f"{d['hidden_size']} ({_via(obs, 'embed')}, which checks no width): the draft's first step "
                        f"cannot run on it")
        fixes.append(f"save the embedding the draft was trained with as `embed_tokens.weight` "
                     f"[{obs.embed.shape[0]}, {d['hidden_size']}] (the engine then keeps the draft's own)")
    elif embed_origin == RANDOM or embed_origin.startswith("partly"):
        why = ""
        if "set_embed" in obs.calls and d["has_target_hidden_size"] and d["target_hidden_size"] != d["hidden_size"]:
            why = (f": set_embed returned without sharing because target_hidden_size ({d['target_hidden_size']}) != "
                   f"hidden_size ({d['hidden_size']})")
        have = f"`{ckpt_embed}` did not fill it" if ckpt_embed else "the checkpoint has no embed_tokens"
        problems.append(f"the draft's embedding is {embed_origin}{why}, and {have}")
        fixes.append(f"save the embedding the draft was trained with as `embed_tokens.weight` "
                     f"[{obs.embed.shape[0]}, {d['hidden_size']}] ({engine_label(obs.engine)} does not share the "
                     f"target's embedding into a draft whose hidden size differs from the target's)")

    # --- the head -------------------------------------------------------------------------------------------
    h_ev = evidence["head"]
    if values and ckpt_head and head_origin == "checkpoint":
        _verify(obs.head, ckpt, ckpt_head, "checkpoint", h_ev)
        if h_ev.get("served_equals_checkpoint") is False:
            problems.append(f"the served head differs from the checkpoint's `{ckpt_head}` (first rows "
                            f"{h_ev.get('first_rows_differing_from_checkpoint')})")
            fixes.append(f"save `{ckpt_head}` once, in the shape and name the engine loads")
    same_as_target = bool(values and ckpt_head and head_origin.startswith("target")
                          and _same_as_target_head(obs, ckpt, target, ckpt_head, h_ev))
    if ckpt_head and head_origin.startswith("target") and not same_as_target:
        rows = h_ev["checkpoint_shape"][0]
        why = "set_embed_and_head, because draft_vocab_size is null" if "set_embed_and_head" in obs.calls else \
            _via(obs, "head")
        problems.append(f"the trained `{ckpt_head}` {h_ev['checkpoint_shape']} is replaced by the target's head "
                        f"{obs.head.shape} ({why}): the trained head is lost")
        fixes.append(f"set `draft_vocab_size: {rows}` in config.json (the rows of the trained head"
                     + (", with d2t mapping them" if t["vocab_size"] and rows < t["vocab_size"] else "")
                     + ") so the engine loads it instead of the target's")
    elif ckpt_head and obs.tied:
        problems.append(f"tie_word_embeddings makes the draft's head its embedding ({head_origin}): the trained "
                        f"`{ckpt_head}` {h_ev['checkpoint_shape']} is dropped")
        fixes.append("set `tie_word_embeddings: false` in config.json: the checkpoint has its own trained lm_head")
    elif head_origin == RANDOM or head_origin.startswith("partly"):
        have = f"`{ckpt_head}` did not fill it" if ckpt_head else "the checkpoint has no lm_head"
        problems.append(f"the draft's head is {head_origin}: {have} although draft_vocab_size is "
                        f"{d['draft_vocab_size']}, so every draft token comes from a random head")
        fixes.append(f"save the trained head as `lm_head.weight` [{obs.head.shape[0]}, {d['hidden_size']}]; or, if "
                     f"the draft is meant to use the target's head, set `draft_vocab_size: null` and remove d2t/t2d")
    draft_vocab, held_rows = d["draft_vocab_size"], (obs.head.shape or [None])[0]
    if draft_vocab and held_rows and not head_origin.startswith(("never", "partly")) and \
            (held_rows < draft_vocab or held_rows - draft_vocab >= VOCAB_PADDING):
        why = (f"the engine's draft->target map has {draft_vocab} entries, so these logits map to no target ids as "
               f"trained") if obs.hot_token_id_len is not None else \
            (f"with no draft->target map the engine serves it as a {held_rows}-id draft, which it was not trained as")
        problems.append(f"the draft declares draft_vocab_size {draft_vocab} but is served with a head of {held_rows} "
                        f"rows ({head_origin}): {why}")
        fixes.append(f"save the trained head as `lm_head.weight` [{draft_vocab}, {d['hidden_size']}]; or, if the draft "
                     f"is meant to use the target's full head, set `draft_vocab_size: null` and remove d2t/t2d")
    stopped = ""
    if obs.error and obs.calls:
        problems.append(f"the engine's worker wiring raised: {obs.error}")
    elif obs.error:
        # A loud refusal before the draft is touched (e.g. 0.5.9's KimiK25ForConditionalGeneration has no
        # get_embed_and_head): the server will not start; the draft holds what it loaded, judged as such.
        stopped = (f"; the engine's wiring stopped at the target before touching the draft ({obs.error}): a "
                   f"server would refuse to start, so the draft is judged as loaded")

    if problems:
        return Result(CID, FAIL, "; ".join(problems), evidence, "; ".join(dict.fromkeys(fixes)) or None)
    note = ""
    if e_ev.get("checkpoint_embedding_unused"):
        note = (f" (the checkpoint's `{ckpt_embed}` differs and goes unused: the draft trained with the target's, "
                f"frozen)")
    elif embed_origin == "checkpoint" and frozen and isinstance(e_ev.get("checkpoint_vs_target"), dict):
        note = f", equal to the target's embedding it trained with (frozen) in {e_ev['checkpoint_vs_target']['compared_as']}"
    elif isinstance(e_ev.get("checkpoint_vs_target"), dict):
        note = f", equal to the checkpoint's `{ckpt_embed}` in {e_ev['checkpoint_vs_target']['compared_as']}"
    elif ckpt_embed is None and embed_origin.startswith("target"):
        note = " (the checkpoint has no embed_tokens)"
    head_note = f" (trained {h_ev['checkpoint_shape']} kept)" if ckpt_head and head_origin == "checkpoint" else \
        f" (identical to the checkpoint's `{ckpt_head}`)" if same_as_target else ""
    skipped = "" if values else "; value checks skipped: no target weights"
    return Result(CID, PASS, f"embedding: {embed_origin}{note}; head: {head_origin}{head_note}{skipped}{stopped}",
                  evidence)


def _against_target(ckpt, key: str, target, target_key: str) -> dict:
    """The checkpoint's tensor KEY against the target's TARGET_KEY, read from their files in row chunks, compared in
    the coarser of their dtypes (``fingerprint.compare_file_tensors``)."""
    a = (ckpt.path / ckpt.tensors[key].file, key)
    b = (target.path / target.tensors[target_key].file, target_key)
    return compare_file_tensors(a, b, coarser(ckpt.tensors[key].dtype, target.tensors[target_key].dtype))


def _differs(cmp: dict) -> str:
    if not cmp["comparable"]:
        return f"shape {cmp['shapes'][0]} vs the target's {cmp['shapes'][1]}"
    return (f"{cmp['rows_differing']} of {cmp['shape'][0]} rows differ, first row {cmp['first_differing_row']}, "
            f"max |Δ| {cmp['max_abs_diff']:.4g} in {cmp['compared_as']}")


def _own_embedding_not_trained(obs, ckpt, target, ckpt_embed: str, frozen: str, e_ev: dict, problems: list,
                               fixes: list) -> None:
    """The engine keeps the checkpoint's embedding (vLLM when it differs from the target's, llama.cpp always), but
    the trainer trained with the target's frozen one: a saved embedding that differs was never trained with
    (TorchSpec#38: a random embedding written by an exporter) and is served in its place."""
    tkey = key_ending(target.tensors, "embed_tokens.weight") if target is not None else None
    if tkey is None:
        e_ev["checkpoint_vs_target"] = "skipped: no target weights"
        return
    cmp = _against_target(ckpt, ckpt_embed, target, tkey)
    e_ev["checkpoint_vs_target"] = cmp
    if files_equal(cmp):
        return
    label = engine_label(obs.engine)
    problems.append(f"{label} serves the checkpoint's `{ckpt_embed}`, which is not the target's embedding "
                    f"({_differs(cmp)}), but {frozen}: the draft runs with an embedding it was never trained with")
    fixes.append(f"overwrite `{ckpt_embed}` with the target's `{tkey}` (the embedding the draft trained with)")


def _without_target(subject: SubjectView) -> Result:
    """Without a target the wiring cannot run; a head nothing will ever write is still decidable."""
    obs = subject.load
    head = next((p for p in obs.params if p.name == "lm_head.weight"), None)
    if head is not None and head.unwritten_fraction >= 1.0 and not head.shared_from_target:
        return Result(CID, FAIL, f"the draft's head is {RANDOM}: the checkpoint has no lm_head although "
                      f"draft_vocab_size is {obs.config.get('draft_vocab_size')}",
                      {"head": {"from": RANDOM, "shape": head.shape}},
                      "save the trained head as `lm_head.weight`; or set `draft_vocab_size: null` and remove d2t/t2d")
    return Result(CID, SKIP, "not judged: the engine's embedding/head wiring needs the target (give --target)",
                  {"reason": "no target"}, needs="--target DIR")
