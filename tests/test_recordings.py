"""The fast tier's recordings (``fixtures/observed``) are what each recorded engine path answers now (the pinned SGLang,
vLLM on both runners, llama.cpp): each bundled example is run again through a ``Recording`` and must give the
committed answers and verdicts: every field equal, a
float within 1e-5 of it relatively (the logits of another CPU or thread count differ in the last bits of float32
accumulation), a switch's bfloat16 effect within 2^-5 and zero exactly where it was zero. When an engine change or a change of this suite's adapter alters an answer, this fails and
``python -m contracts.recordings`` records it again (the diff is then the change's effect on what the checks are
fed)."""

from __future__ import annotations

import json
import math

import pytest

from contracts.engine_spec import EngineSpec
from contracts.bundled import bundled_subjects
from contracts.engines.inprocess import installed_release
from contracts.recordings import load_recordings, record_subject

RELEASE = EngineSpec.parse("sglang==0.5.23")  # judged in this process: its recordings are checked where it is installed
RELEASES = (RELEASE, *map(EngineSpec.parse, ("vllm==0.32.0", "vllm==0.32.0:v1", "llamacpp==2026.10.11549")))  # the
# others in their environments


@pytest.mark.parametrize("release,subject", [(r, s) for r in RELEASES for s in bundled_subjects(r)],
                         ids=lambda v: str(v) if isinstance(v, EngineSpec) else v.name)
def test_the_recording_is_what_the_engine_answers_now(release, subject):
    if release == RELEASE and installed_release(RELEASE.profile) != RELEASE.version:
        pytest.skip(f"the recordings are of {RELEASE}")
    committed = load_recordings(release)[subject.name]
    try:
        fresh = json.loads(json.dumps(record_subject(subject), sort_keys=True))
    finally:
        subject.close()
    assert sorted(fresh["answers"]) == sorted(committed["answers"])
    assert differences(fresh["answers"], committed["answers"]) == []
    assert fresh["verdicts"] == committed["verdicts"]


# A switch's effect (``config``'s probe: the largest change of the logits or of the fed-back state when the switch is
# flipped) is a difference of two forwards in the engine's dtype, bfloat16 by default: another CPU's bfloat16 kernels
# round it otherwise (1.3% apart between the AVX-512 machine that recorded them and an AVX2 one). The checks read it
# only as zero or not, so it must keep that and agree within 2^-5.
SWITCH_EFFECT = ("_change", "_change_when_flipped")
SWITCH_EFFECT_TOLERANCE = 2.0 ** -5


def differences(now, then, at: str = "") -> list[str]:
    """Where two answers differ (paths into the JSON), so a failure says which field the engine changed."""
    if isinstance(now, dict) and isinstance(then, dict):
        return [d for k in sorted(set(now) | set(then)) for d in differences(now.get(k), then.get(k), f"{at}.{k}")]
    if isinstance(now, list) and isinstance(then, list) and len(now) == len(then):
        return [d for i, (a, b) in enumerate(zip(now, then)) for d in differences(a, b, f"{at}[{i}]")]
    effect = ".switches." in at and at.endswith(SWITCH_EFFECT)
    if isinstance(now, float) and isinstance(then, float) and (
            math.isclose(now, then, rel_tol=SWITCH_EFFECT_TOLERANCE if effect else 1e-5, abs_tol=0 if effect else 1e-6)
            or (math.isnan(now) and math.isnan(then))):
        return []  # (NaN: what a draft serving never-written layers computes, every time)
    return [] if now == then else [f"{at}: now {str(now)[:120]}, recorded {str(then)[:120]}"]


def test_a_switch_effect_keeps_its_zero_and_its_magnitude_within_bfloat16s_rounding():
    at = ".config@x.result.switches.fc_norm.step_0_change"
    assert differences(0.009765625, 0.0096435546875, at) == []  # the two CPUs' roundings
    assert differences(0.0, 0.0096435546875, at) != []  # honoured on one, ignored on the other: a change
    assert differences(0.02, 0.0096435546875, at) != []
    assert differences(0.009765625, 0.0096435546875, ".load@x.result.params[0].unwritten_fraction") != []
