"""The fast tier: every contract's check logic judged on each engine's recorded answers (``fixtures/observed``: the
pinned SGLang, vLLM on both of its runners, llama.cpp), with no engine environment. Each recording replays to the verdicts the live run gave and that ``fixtures/expected.json``
documents; then one hand edit per contract, each the observation of a real failure this suite exists to catch, must
turn its verdict into a failure with the expected message while the pristine recording passes. The engine tier
(``tests/test_recordings.py``) keeps the recordings equal to what the engine answers now."""

from __future__ import annotations

import json
import re

import pytest

from contracts.engine_spec import EngineSpec
from contracts.bundled import bundled_subjects, expected_failures
from contracts.recordings import load_recordings, replay_subject
from contracts.registry import FAIL, PASS, WARN

# the engine paths whose answers are recorded: the pinned SGLang (judged in this process), vLLM on Model Runner V2
# (a GPU deployment's default) and V1, llama.cpp
RELEASES = ("sglang==0.5.23", "vllm==0.32.0", "vllm==0.32.0:v1", "llamacpp==2026.10.11549")
RELEASE = RELEASES[0]
RECORDED = {release: load_recordings(EngineSpec.parse(release)) for release in RELEASES}
SUBJECTS = {s.name: s for s in bundled_subjects(EngineSpec("sglang"))}


def replayed(name: str, edit=None, release: str = RELEASE):
    """The bundled example NAME answered by RELEASE's recording, after EDIT(answers) changed what the engine said."""
    recorded = json.loads(json.dumps(RECORDED[release][name]))
    if edit is not None:
        edit(recorded["answers"])
    subject = bundled_subjects(EngineSpec.parse(release))[list(SUBJECTS).index(name)]
    return replay_subject(subject, recorded)


def verdict(name: str, contract: str, edit=None, release: str = RELEASE):
    subject = replayed(name, edit, release)
    try:
        return subject.result(contract)
    finally:
        subject.close()


@pytest.mark.parametrize("release", RELEASES)
def test_every_bundled_example_is_recorded(release):
    assert sorted(RECORDED[release]) == sorted(SUBJECTS)


@pytest.mark.parametrize("release,name", [(r, n) for r in RELEASES for n in sorted(SUBJECTS)])
def test_a_replay_gives_the_live_verdicts_and_the_documented_ones(release, name):
    subject = replayed(name, release=release)
    try:
        got = {r.contract: r.status for r in subject.run()}
    finally:
        subject.close()
    assert got == RECORDED[release][name]["verdicts"]
    documented = {c for (example, c) in expected_failures(EngineSpec.parse(release)) if example == name}
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


def dispatched_to_a_plain_class():
    """The engine dispatches the draft's architecture to a non-draft class (a draft published as LlamaForCausalLM)."""
    def edit(answers):
        config = answer(answers, "config")
        config["is_eagle3_draft"], config["draft_class"] = False, "LlamaForCausalLM"
    return edit


# (contract, case, example, edit, message): ENGINE in a message is the engine release as a report names it
CASES = [
    ("key-naming", "dropped", "specforge-hd32", drop_tensor("midlayer.mlp.down_proj.weight"),
     r"1 tensor\(s\) dropped by the engine's loader: `midlayer\.mlp\.down_proj\.weight`.*never written"),
    ("tensor-shapes", "truncated", "specforge-hd32", truncate("fc.weight"),
     r"`fc\.weight` \[64, 192\] → (model\.)?fc\.weight \[64, 192\] \(silently truncated: 12288 values in the "
     r"checkpoint, 12287 written by the engine\)"),
    ("d2t-semantics", "duplicate", "specforge-hd32", duplicate_hot_token(),
     r"1 draft id\(s\) map to a target id another draft id already"),
    ("hidden-width", "no-hook", "specforge-hd32", hook_missing(),
     r"cannot capture aux hidden states on ENGINE: the class has no "),
    ("embed-head", "head", "specforge-hd32", served_head_differs(),
     r"the served head differs from the checkpoint's `lm_head\.weight`"),
    ("config", "switch", "specforge-eagle31-hd32", switch_ignored("fc_norm"),
     r"fc_norm: true is ignored by ENGINE"),
    ("config", "dispatch", "specforge-hd32", dispatched_to_a_plain_class(),
     r"ENGINE dispatches architectures \['LlamaForCausalLMEagle3'\] to LlamaForCausalLM, a non-draft class"),
    ("forward-parity", "logits", "specforge-hd32", logits_off(1.0), r"position 0"),
]
# where a hand edit has nothing to edit, and why
NOT_APPLICABLE = {
    ("llamacpp==2026.10.11549", "switch"): "its converter refuses the EAGLE-3.1 draft (no tensor for fc_norm): "
                                           "the config answer is that refusal, with no switch to flip",
}
LABELS = {"sglang==0.5.23": "SGLang 0.5.23", "vllm==0.32.0": "vLLM 0.32.0", "vllm==0.32.0:v1": "vLLM 0.32.0",
          "llamacpp==2026.10.11549": "llama.cpp 2026.10.11549"}


@pytest.mark.parametrize("release,contract,name,edit,message",
                         [(r, c[0], c[2], c[3], c[4]) for r in RELEASES for c in CASES
                          if (r, c[1]) not in NOT_APPLICABLE],
                         ids=[f"{r}-{c[0]}-{c[1]}" for r in RELEASES for c in CASES if (r, c[1]) not in NOT_APPLICABLE])
def test_each_contract_passes_on_the_recording_and_fails_on_the_edited_one(release, contract, name, edit, message):
    # config warns on some bundled drafts (a key the engine reads differently from the trainer's meaning, told)
    assert verdict(name, contract, release=release).status in ((PASS, WARN) if contract == "config" else (PASS,))
    broken = verdict(name, contract, edit, release=release)
    assert broken.status == FAIL, broken.summary
    assert re.search(message.replace("ENGINE", re.escape(LABELS[release])), broken.summary), broken.summary


def test_the_hook_fix_names_the_release_the_engine_says_gained_it():
    result = verdict("specforge-hd32", "hidden-width", hook_missing("SGLang 0.5.6"))
    assert result.fix.startswith("serve with SGLang 0.5.6")
