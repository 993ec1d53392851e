"""The fast tier: every contract's check logic judged on the engine's recorded answers (``fixtures/observed``), with
no engine environment. Each recording replays to the verdicts the live run gave and that ``fixtures/expected.json``
documents; then one hand edit per contract, each the observation of a real failure this suite exists to catch, must
turn its verdict into a failure with the expected message while the pristine recording passes. The engine tier
(``tests/test_recordings.py``) keeps the recordings equal to what the engine answers now."""

from __future__ import annotations

import json
import re

import pytest

from contracts.bundled import bundled_subjects, expected_failures
from contracts.recordings import load_recordings, replay_subject
from contracts.registry import FAIL, PASS, WARN

RELEASE = "sglang==0.5.23"  # the pinned engine, whose answers are recorded
RECORDED = load_recordings(RELEASE)
SUBJECTS = {s.name: s for s in bundled_subjects("sglang")}


def replayed(name: str, edit=None):
    """The bundled example NAME answered by its recording, after EDIT(answers) changed what the engine said."""
    recorded = json.loads(json.dumps(RECORDED[name]))
    if edit is not None:
        edit(recorded["answers"])
    subject = bundled_subjects("sglang")[list(SUBJECTS).index(name)]
    return replay_subject(subject, recorded)


def verdict(name: str, contract: str, edit=None):
    subject = replayed(name, edit)
    try:
        return subject.result(contract)
    finally:
        subject.close()


def test_every_bundled_example_is_recorded():
    assert sorted(RECORDED) == sorted(SUBJECTS)


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_a_replay_gives_the_live_verdicts_and_the_documented_ones(name):
    subject = replayed(name)
    try:
        got = {r.contract: r.status for r in subject.run()}
    finally:
        subject.close()
    assert got == RECORDED[name]["verdicts"]
    documented = {c for (example, c) in expected_failures(RELEASE) if example == name}
    assert {c for c, status in got.items() if status == FAIL} == documented


def answer(answers, op):
    """The one recorded answer to OP (the fast tier edits drafts whose engine reads them as saved)."""
    (key,) = [k for k in answers if k.startswith(op + "@")]
    return answers[key]["result"]


def _load(answers):
    return answer(answers, "load")


def drop_tensor(key):
    """The engine's loader skipped KEY without a word (SGLang 0.5.3 and a speculators draft's ``layers.0.*``)."""
    def edit(answers):
        load = _load(answers)
        fate = next(t for t in load["tensors"] if t["key"] == key)
        params = {c["param"] for c in fate["calls"]}
        fate["calls"] = []
        for p in load["params"]:
            if p["name"] in params:
                p["unwritten_fraction"] = 1.0
    return edit


def truncate(key):
    """The engine's loader wrote fewer values than the tensor holds, without raising."""
    def edit(answers):
        fate = next(t for t in _load(answers)["tensors"] if t["key"] == key)
        fate["calls"][0]["written"] -= 1
    return edit


def duplicate_hot_token():
    """Two draft ids map to one target id (a ``d2t`` saved as absolute ids, read as offsets)."""
    def edit(answers):
        hot = _load(answers)["hot_token_id"]
        hot[1] = hot[0]
    return edit


def hook_missing(since=None):
    """The target class has no aux-capture hook on this release (Kimi-K2.5 on SGLang 0.5.9)."""
    def edit(answers):
        aux = answer(answers, "aux")
        aux["hook"], aux["hook_since"] = "missing", since
    return edit


def served_head_differs():
    """The head the engine serves is not the checkpoint's trained one."""
    def edit(answers):
        head = answer(answers, "embed_head")["head"]
        head["fingerprint"]["chunks"] = ["0" * 16 for _ in head["fingerprint"]["chunks"]]
        head["fingerprint"]["digest"] = "0" * 32
    return edit


def switch_ignored(key):
    """The engine builds the draft but computes the same thing with KEY flipped: it ignores the switch."""
    def edit(answers):
        switch = answer(answers, "config")["switches"][key]
        switch.update(honoured=False, max_abs_change_when_flipped=0.0, step_0_change=0.0, fed_back_state_change=0.0,
                      first_acts_at_step=None)
    return edit


def logits_off(delta):
    """The engine's draft forward disagrees with the trainer's at one logit."""
    def edit(answers):
        answer(answers, "forward")["engine_logits"][0][0] += delta
    return edit


CASES = [
    ("key-naming", "specforge-hd32", drop_tensor("midlayer.mlp.down_proj.weight"),
     r"1 tensor\(s\) dropped by the engine's loader: `midlayer\.mlp\.down_proj\.weight`.*never written"),
    ("tensor-shapes", "specforge-hd32", truncate("fc.weight"),
     r"`fc\.weight` \[64, 192\] → model\.fc\.weight \[64, 192\] \(silently truncated: 12288 values in the "
     r"checkpoint, 12287 written by the engine\)"),
    ("d2t-semantics", "specforge-hd32", duplicate_hot_token(),
     r"1 draft id\(s\) map to a target id another draft id already"),
    ("hidden-width", "specforge-hd32", hook_missing(),
     r"target class LlamaForCausalLM cannot capture aux hidden states on SGLang 0\.5\.23: the class has no "
     r"set_eagle3_layers_to_capture"),
    ("embed-head", "specforge-hd32", served_head_differs(),
     r"the served head differs from the checkpoint's `lm_head\.weight`"),
    ("config", "specforge-eagle31-hd32", switch_ignored("fc_norm"),
     r"fc_norm: true is ignored by SGLang 0\.5\.23"),
    ("forward-parity", "specforge-hd32", logits_off(1.0), r"position 0"),
]


@pytest.mark.parametrize("contract,name,edit,message", CASES, ids=[c[0] for c in CASES])
def test_each_contract_passes_on_the_recording_and_fails_on_the_edited_one(contract, name, edit, message):
    # config warns on every bundled draft (a key the engine reads differently from the trainer's meaning, told)
    assert verdict(name, contract).status == (WARN if contract == "config" else PASS)
    broken = verdict(name, contract, edit)
    assert broken.status == FAIL, broken.summary
    assert re.search(message, broken.summary), broken.summary


def test_the_hook_fix_names_the_release_the_engine_says_gained_it():
    result = verdict("specforge-hd32", "hidden-width", hook_missing("SGLang 0.5.6"))
    assert result.fix.startswith("serve with SGLang 0.5.6")
