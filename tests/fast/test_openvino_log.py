"""Which embedding OpenVINO GenAI's draft computes with is read from GenAI's own log of the pair it built; each
release's wording of ``share_vocabulary``'s INFO line (eagle3_model_transforms.cpp at its tag) is recognised, so a
release that shares the target's embedding is never reported as serving a random one."""

from __future__ import annotations

import pytest

from contracts.engines.openvino.pipeline import Pair

LINES = {
    "2026.0.0.0": "[ INFO ] Sharing embedding weights between main and draft models for eagle3 speculative decoding.",
    "2026.1.0.0": "[ INFO ] Copying embedding weights from main to draft model for eagle3 speculative decoding.",
}


@pytest.mark.parametrize("release", sorted(LINES))
def test_each_releases_share_vocabulary_line_is_recognised(release):
    log = f"some other line\n{LINES[release]}\nanother\n"
    assert Pair(pipeline=None, refusal=None, log=log, layers=None).embedding_copied


def test_a_pair_built_without_sharing_keeps_the_drafts_own_embedding():
    assert not Pair(pipeline=None, refusal=None, log="[ INFO ] Eagle3 hidden layers: 1 3 4\n", layers=None).embedding_copied
