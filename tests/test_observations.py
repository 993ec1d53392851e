"""The seam between engines and checks: observations survive JSON, so an engine can run in another
process (another SGLang version's environment) and the checks judge the same record."""

from __future__ import annotations

import json

import torch

from contracts.engines.sglang import observe_load
from contracts.observations import LoadObservation


def test_load_observation_round_trips_through_json(broken):
    path = broken("specforge", add={"model.decoder.fc.weight": torch.randn(64, 192)},
                  replace={"fc.weight": torch.randn(64, 128)})
    obs = observe_load(path)
    again = LoadObservation.from_dict(json.loads(json.dumps(obs.to_dict())))
    assert again == obs
    assert again.fate("model.decoder.fc.weight").dropped
    assert again.fate("fc.weight").calls[0].error.startswith("AssertionError: Attempted to load weight")
    assert again.hot_token_id[:21] == list(range(20)) + [22]


def test_every_call_records_the_region_it_wrote():
    from tests.conftest import DRAFTS

    obs = observe_load(DRAFTS["specforge"])
    for fate in obs.tensors:
        for call in fate.calls:
            assert call.written == fate.numel, (fate.key, call)
    assert all(p.unwritten_fraction == 0.0 for p in obs.params if p.shared_from_target is None)
