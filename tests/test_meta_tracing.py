"""Load tracing on the meta device (how real-size drafts are judged without loading them) reaches the same
verdicts as the exact CPU tracing with the NaN sentinel, broken checkpoints included."""

from __future__ import annotations

import pytest
import torch

from contracts.engines.sglang import observe_load

CASES = {
    "pristine": {},
    "stray tensors": dict(add={"layers.1.mlp.up_proj.weight": torch.randn(128, 64),
                               "model.decoder.fc.weight": torch.randn(64, 192)}),
    "missing tensors": dict(remove=["midlayer.mlp.down_proj.weight", "midlayer.self_attn.k_proj.weight"]),
    "fc of width 2H": dict(replace={"fc.weight": torch.randn(64, 128)}),
    "silently padded shard": dict(replace={"midlayer.mlp.up_proj.weight": torch.randn(96, 64)}),
    "absolute d2t": dict(replace={"d2t": torch.arange(64, dtype=torch.int64) * 3}),
    # longer than the tensors meta tracing reads whole: SGLang's d2t + arange(len) on a meta stand-in raised inside
    # load_weights, which key-naming reported as the engine's loader refusing the draft
    "d2t past the read-whole size": dict(replace={"d2t": torch.zeros((1 << 20) + 1, dtype=torch.int64)}),
}


def summary(obs):
    return {
        "dropped": sorted(f.key for f in obs.tensors if f.dropped),
        "unwritten": {p.name: round(p.unwritten_fraction, 4) for p in obs.params if p.unwritten_fraction},
        "calls": sorted((f.key, c.param, c.shard, c.written, c.error is not None) for f in obs.tensors for c in f.calls),
        "hot_token_id": obs.hot_token_id,
        "probes": sorted((p.key, p.candidate, str(p.config_change), tuple(p.reached)) for p in obs.probes),
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_meta_device_tracing_agrees_with_cpu(case, broken):
    path = broken("specforge", **CASES[case])
    cpu, meta = observe_load(path, device="cpu"), observe_load(path, device="meta")
    assert (cpu.device, meta.device) == ("cpu", "meta")
    assert summary(meta) == summary(cpu)


def test_the_device_is_chosen_by_size():
    from contracts.checkpoint import Checkpoint
    from contracts.engines.tracing import META_ABOVE_ELEMENTS, checkpoint_elements, choose_device
    from tests.conftest import DRAFTS

    ckpt = Checkpoint.open(DRAFTS["speculators-default"])
    assert checkpoint_elements(ckpt) < META_ABOVE_ELEMENTS and choose_device(ckpt) == "cpu"
