"""The fast tier's recordings (``fixtures/observed``) are what the pinned engine answers now: each bundled example is
run again on SGLang through a ``Recording`` and must give the committed answers and verdicts: every field equal, a
float within 1e-5 of it relatively (the logits of another CPU or thread count differ in the last bits of float32
accumulation). When an engine change or a change of this suite's adapter alters an answer, this fails and
``python -m contracts.recordings`` records it again (the diff is then the change's effect on what the checks are
fed)."""

from __future__ import annotations

import json
import math

import pytest

from contracts.bundled import bundled_subjects
from contracts.engines.inprocess import installed_sglang
from contracts.recordings import load_recordings, record_subject

RELEASE = "sglang==0.5.23"


@pytest.mark.skipif(installed_sglang() != RELEASE.partition("==")[2], reason=f"the recordings are of {RELEASE}")
@pytest.mark.parametrize("subject", bundled_subjects("sglang"), ids=lambda s: s.name)
def test_the_recording_is_what_the_engine_answers_now(subject):
    committed = load_recordings(RELEASE)[subject.name]
    try:
        fresh = json.loads(json.dumps(record_subject(subject), sort_keys=True))
    finally:
        subject.close()
    assert sorted(fresh["answers"]) == sorted(committed["answers"])
    assert differences(fresh["answers"], committed["answers"]) == []
    assert fresh["verdicts"] == committed["verdicts"]


def differences(now, then, at: str = "") -> list[str]:
    """Where two answers differ (paths into the JSON), so a failure says which field the engine changed."""
    if isinstance(now, dict) and isinstance(then, dict):
        return [d for k in sorted(set(now) | set(then)) for d in differences(now.get(k), then.get(k), f"{at}.{k}")]
    if isinstance(now, list) and isinstance(then, list) and len(now) == len(then):
        return [d for i, (a, b) in enumerate(zip(now, then)) for d in differences(a, b, f"{at}[{i}]")]
    if isinstance(now, float) and isinstance(then, float) and (
            math.isclose(now, then, rel_tol=1e-5, abs_tol=1e-6) or (math.isnan(now) and math.isnan(then))):
        return []  # (NaN: what a draft serving never-written layers computes, every time)
    return [] if now == then else [f"{at}: now {str(now)[:120]}, recorded {str(then)[:120]}"]
