"""Differential property: for arbitrary d2t/t2d tensors (valid and invalid, any dtype), the d2t-semantics
verdict — made on the hot_token_id that SGLang's own load_weights computed — agrees with an independent
oracle of what the engine maps each draft id to versus what was intended.

The oracle below is written from the contract's definition, in plain Python, sharing no code with the
check. Profiles: `ci` (derandomized, 4 × 50 examples) under CI, `nightly` (4 × 2000, HYPOTHESIS_PROFILE=nightly).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

from contracts.subject import Subject
from tests.strategies import selections, vocab_sizes, write_draft

INTEGER = {torch.int64, torch.int32, torch.int16, torch.uint8}
CORRUPTIONS = ["none", "absolute", "shift", "duplicate", "swap", "out_of_range", "negative", "truncate",
               "extend", "missing"]
T2D_KINDS = ["consistent", "absent", "other_ids", "extra_id", "dropped_id", "wrong_length"]
DTYPES = [torch.int64, torch.int32, torch.int16, torch.uint8, torch.float32, torch.bool]
TRAINER_NAMES = [None, "specforge", "speculators", "automodel", "modelopt"]  # None: no --trainer
SORTING_TRAINERS = {"specforge", "speculators"}  # they lay out the selected ids ascending (from their sources)


def oracle(vocab: int, draft: int, d2t: torch.Tensor | None, t2d: torch.Tensor | None,
           intended: list[int] | None, sorts: bool = False) -> bool:
    """True iff the engine will map every draft id to the intended target id, by the contract's rules. SORTS: the
    draft's trainer is known to lay its draft vocabulary out ascending (speculators, SpecForge)."""
    if d2t is None:
        mapping = list(range(draft))
        if draft < vocab:
            return False
    else:
        if d2t.dtype not in INTEGER:
            return False
        values = [int(v) for v in d2t.tolist()]
        mapping = [v + i for i, v in enumerate(values)]  # what SGLang documents: hot = d2t + arange
    if len(mapping) != draft:
        return False
    if any(not 0 <= m < vocab for m in mapping):
        return False
    if len(set(mapping)) != len(mapping):  # one-to-one
        return False
    # the order is the trainer's: ascending only for a trainer known to sort (a t2d mask names the selected set, not
    # an order; Model Optimizer and NeMo Automodel order by frequency), else only the intended map, when known, decides
    if sorts and t2d is not None and any(b <= a for a, b in zip(mapping, mapping[1:])):
        return False
    if t2d is not None:
        flags = [bool(x) for x in t2d.tolist()]
        if len(flags) != vocab or sum(flags) != draft or not all(flags[m] for m in mapping):
            return False
        if intended is None and sorts:
            intended = [i for i, f in enumerate(flags) if f]
    return intended is None or mapping == intended


@st.composite
def mappings(draw):
    vocab, draft = draw(vocab_sizes(min_vocab=8, max_vocab=600))
    intended = draw(selections(vocab, draft))
    corruption = draw(st.sampled_from(CORRUPTIONS))
    ids = list(intended)
    if corruption == "shift":
        ids = [i + draw(st.sampled_from([-2, -1, 1, 3])) for i in ids]
    elif corruption == "duplicate" and draft > 1:
        j = draw(st.integers(1, draft - 1))
        ids[j] = ids[j - 1]
    elif corruption == "swap" and draft > 1:
        j = draw(st.integers(1, draft - 1))
        ids[j - 1], ids[j] = ids[j], ids[j - 1]
    elif corruption == "out_of_range":
        ids[-1] = vocab + draw(st.integers(0, 5))
    elif corruption == "negative":
        ids[0] = -1
    elif corruption == "truncate" and draft > 1:
        ids = ids[: draw(st.integers(1, draft - 1))]
    elif corruption == "extend":
        ids = ids + [vocab - 1]
    d2t = None
    if corruption != "missing":
        values = ids if corruption == "absolute" else [t - i for i, t in enumerate(ids)]
        dtype = draw(st.sampled_from(DTYPES))
        d2t = torch.tensor(values, dtype=torch.int64).to(dtype) if dtype != torch.float32 else \
            torch.tensor(values, dtype=torch.float32)
        if dtype == torch.float32 and draw(st.booleans()) and len(values):
            d2t[draw(st.integers(0, len(values) - 1))] = float("nan")
    kind = draw(st.sampled_from(T2D_KINDS))
    t2d = None
    if kind != "absent":
        chosen = set(intended)
        if kind == "other_ids":
            chosen = set(draw(selections(vocab, draft)))
        elif kind == "extra_id" and draft < vocab:
            chosen.add(draw(st.sampled_from(sorted(set(range(vocab)) - chosen))))
        elif kind == "dropped_id":
            chosen.discard(intended[draw(st.integers(0, draft - 1))])
        length = vocab + 1 if kind == "wrong_length" else vocab
        t2d = torch.zeros(length, dtype=torch.bool)
        t2d[sorted(c for c in chosen if c < length)] = True
    known = draw(st.booleans())
    trainer = draw(st.sampled_from(TRAINER_NAMES))
    return vocab, draft, d2t, t2d, intended if known else None, corruption, kind, trainer


def isolated(ids: list[int], vocab: int = 32, dtype=torch.int64):
    """A case where only the d2t rules can decide: no t2d and no recorded selection."""
    d2t = torch.tensor([t - i for i, t in enumerate(ids)], dtype=torch.int64).to(dtype)
    return vocab, len(ids), d2t, None, None, "explicit", "absent", None


# Four times the profile's budget: the combinations that separate one rule from the others (a swap with
# no t2d and no recorded selection, say) are a few percent of the space.
@settings(max_examples=4 * settings.default.max_examples)
@given(mappings())
@example(isolated([0, 1, 2, 3]))  # correct, leading zero offsets
@example(isolated([0, 2, 1, 3]))  # not increasing (swap)
@example(isolated([0, 1, 1, 3]))  # duplicate target
@example(isolated([0, 1, 2, 40]))  # out of range
@example(isolated([0, 1, 2, 3], dtype=torch.float32))  # not integer
@example(isolated([0, 1, 2, 3], dtype=torch.bool))  # bool is no id type
@example((32, 5, torch.zeros(4, dtype=torch.int64), None, None, "explicit", "absent", None))  # wrong length
@example((32, 4, None, None, None, "explicit", "absent", None))  # missing with a reduced vocab
def test_verdict_agrees_with_the_oracle(case):
    vocab, draft, d2t, t2d, intended, corruption, kind, trainer = case
    note(f"vocab={vocab} draft={draft} corruption={corruption} t2d={kind} d2t_dtype="
         f"{None if d2t is None else d2t.dtype} intended_known={intended is not None} trainer={trainer}")
    # uint8 wrap-around, negative values and NaN reach the engine exactly as saved: part of the property
    with tempfile.TemporaryDirectory() as tmp:
        path = write_draft(Path(tmp) / "draft", vocab=vocab, draft=draft, d2t=d2t, t2d=t2d)
        subject = Subject("property", path, None, intended_ids=intended, trainer=trainer)
        (result,) = subject.run(["d2t-semantics"])
        subject.close()
    expected = oracle(vocab, draft, d2t, t2d, intended, sorts=trainer in SORTING_TRAINERS)
    note(f"verdict={result.status} summary={result.summary}")
    assert result.status == ("pass" if expected else "fail")
    if not expected:
        assert result.fix  # every failure says what to do


def test_oracle_rejects_what_the_contract_documents():
    """The oracle itself, on the cases the issue names."""
    ids = [0, 1, 2, 5, 9]
    good = torch.tensor([t - i for i, t in enumerate(ids)])
    t2d = torch.zeros(16, dtype=torch.bool)
    t2d[ids] = True
    assert oracle(16, 5, good, t2d, ids)
    assert not oracle(16, 5, torch.tensor(ids), t2d, ids)  # absolute ids
    assert not oracle(16, 5, None, t2d, ids)  # missing with a reduced vocab
    assert oracle(5, 5, None, None, None)  # draft = target: identity
    assert not oracle(16, 5, good.float(), t2d, ids)
