"""Each trainer's own mapping function, on arbitrary token-frequency tables and vocab sizes, builds a
d2t/t2d that SGLang's own load_weights turns into exactly the target ids the trainer selected.

Needs the trainers' packages: runs in `tox -e trainer-properties` (engine + speculators 0.9.0 + specforge
0.2.0, all installed --no-deps); elsewhere these tests skip with that reason.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from contracts.subject import Subject
from tests.strategies import token_frequencies, vocab_sizes, write_draft


def speculators_mapping():
    mod = pytest.importorskip("speculators.train.vocab_mapping",
                              reason="speculators is installed in `tox -e trainer-properties` only")
    return lambda table, draft, vocab: mod.build_vocab_mappings_from_distribution(dict(table), draft, vocab)


def specforge_mapping():
    mod = pytest.importorskip("specforge.data.preprocessing",
                              reason="specforge is installed in `tox -e trainer-properties` only")
    # it mutates its Counter (pads missing ids): give it a copy, in the table's insertion order
    return lambda table, draft, vocab: mod.process_token_dict_to_mappings(Counter(dict(table)), draft, vocab)


@st.composite
def tables(draw):
    vocab, draft = draw(vocab_sizes(min_vocab=8, max_vocab=600))
    return vocab, draft, draw(token_frequencies(vocab))


def check_trainer(build, case):
    vocab, draft, table = case
    d2t, t2d = build(table, draft, vocab)
    selected = t2d.nonzero().flatten().tolist()
    note(f"vocab={vocab} draft={draft} selected[:10]={selected[:10]}")
    # the trainer's own selection is a top-`draft` set of the table (whatever its tie-breaking)
    counts = [table.get(i, 0) for i in range(vocab)]
    chosen = set(selected)
    assert len(selected) == draft
    assert min(counts[i] for i in chosen) >= max((counts[i] for i in range(vocab) if i not in chosen), default=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_draft(Path(tmp) / "draft", vocab=vocab, draft=draft, d2t=d2t, t2d=t2d)
        subject = Subject("trainer", path, None, intended_ids=selected)
        (result,) = subject.run(["d2t-semantics"])
        hot = subject.load.hot_token_id
        subject.close()
    assert hot == selected  # the engine's own map reaches exactly the trainer's selection
    assert result.status == "pass", result.summary


@given(tables())
def test_speculators_mapping_survives_the_engine(case):
    check_trainer(speculators_mapping(), case)


@given(tables())
def test_specforge_mapping_survives_the_engine(case):
    check_trainer(specforge_mapping(), case)
