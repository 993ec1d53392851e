"""A real-size draft is given to llama.cpp's converter (with its target) and to OpenVINO GenAI's exporter as a copy
with every width divided by one factor (``contracts.engines.scaled``): its verdicts must be the ones the full-size
draft gets. Judged both ways on one pair small enough to run at full size (widths that a factor of 8 divides,
vocabularies that equal no width), pristine and with a tensor of the wrong shape, through the CLI as a user runs it.
On OpenVINO GenAI the pair with the target is built at full size only: its contracts are not judged on a copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import FIXTURES
from safetensors.torch import load_file, save_file

LLAMACPP = "llamacpp==2026.10.11549"
OPENVINO = "openvino==2026.4.1.0"
# the contracts each engine judges on a copy
CONTRACTS = {LLAMACPP: "key-naming,tensor-shapes,d2t-semantics,hidden-width,embed-head",
             OPENVINO: "key-naming,tensor-shapes,d2t-semantics,config"}
ENGINES = [LLAMACPP, OPENVINO]


def _randomised(folder):
    """Every floating tensor of FOLDER's weights drawn at random (norms stay ones): values a fingerprint tells apart."""
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    gen = torch.Generator().manual_seed(0)
    save_file({k: (torch.randn(v.shape, generator=gen).to(v.dtype) if v.is_floating_point() and "norm" not in k
                   else v) for k, v in tensors.items()}, str(path), metadata={"format": "pt"})


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    sys.path.insert(0, str(FIXTURES.parent / "benchmarks"))
    from bench_check import drafter, weighted_target

    root = tmp_path_factory.mktemp("scalable")
    drafter(root / "draft", hidden=256, vocab=1000, draft_vocab=200, heads=8, kv_heads=2, inter=512,
            layer_prefix="midlayer", with_embed=False, ids=[1, 3, 4])
    config = json.loads((root / "draft" / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    (root / "draft" / "config.json").write_text(json.dumps(config))
    weighted_target(root / "target", hidden=256, vocab=1000, heads=8, kv_heads=2, inter=512)
    config = json.loads((root / "target" / "config.json").read_text())
    config["num_hidden_layers"] = 8
    (root / "target" / "config.json").write_text(json.dumps(config))
    for folder in (root / "draft", root / "target"):
        _randomised(folder)
    return root / "draft", root / "target"


def judged(draft, target, scale_above_mb: int, engine: str = LLAMACPP, only: str | None = None) -> dict:
    env = {**os.environ, "EAGLE3_CONTRACTS_SCALE_ABOVE_MB": str(scale_above_mb)}
    done = subprocess.run([sys.executable, "-m", "contracts.cli", "check", str(draft), "--target", str(target),
                           "--engine", engine, "--only", only or CONTRACTS[engine], "--format", "json"],
                          capture_output=True, text=True, env=env)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return {r["contract"]: r for r in json.loads(done.stdout)["results"]}


@pytest.mark.parametrize("engine", ENGINES)
def test_the_scaled_copy_gets_the_full_size_verdicts(pair, engine):
    full, copy = judged(*pair, 1 << 20, engine), judged(*pair, 0, engine)
    assert {c: r["status"] for c, r in copy.items()} == {c: r["status"] for c, r in full.items()}
    assert {c: r["summary"] for c, r in copy.items()} == {c: r["summary"] for c, r in full.items()}
    assert "observed_on" not in full["key-naming"]["evidence"]
    assert "divided by 8" in copy["key-naming"]["evidence"]["observed_on"]
    if "embed-head" in full:
        embedding = [r["embed-head"]["evidence"]["embedding"]["checksum"] for r in (copy, full)]
        assert embedding[0] == embedding[1]
    assert full["tensor-shapes"]["status"] == "pass" and full["d2t-semantics"]["status"] == "pass"


def test_the_pair_is_not_judged_on_an_openvino_copy(pair):
    """GenAI builds the pair at the target's widths: on a copy those contracts say why they are not judged."""
    copy = judged(*pair, 0, OPENVINO, only="hidden-width,embed-head,forward-parity")
    assert {r["status"] for r in copy.values()} == {"skip"}
    assert "judged on a copy with every width divided by 8" in copy["embed-head"]["summary"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_misshapen_tensor_reads_in_the_checkpoints_numbers_on_the_copy(pair, tmp_path, engine):
    import shutil

    draft, target = pair
    broken = tmp_path / "broken"
    shutil.copytree(draft, broken)
    tensors = load_file(str(broken / "model.safetensors"))
    tensors["midlayer.self_attn.q_proj.weight"] = torch.randn(256, 256).bfloat16()  # the input is 2 x hidden: 512
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    full, copy = judged(broken, target, 1 << 20, engine), judged(broken, target, 0, engine)
    assert {c: (r["status"], r["summary"]) for c, r in copy.items()} == \
        {c: (r["status"], r["summary"]) for c, r in full.items()}
    if engine == LLAMACPP:  # the loader's refusal, its shapes multiplied back
        assert copy["tensor-shapes"]["status"] == "fail"
        assert "[256, 256] → blk.0.attn_q.weight [256, 512]" in copy["tensor-shapes"]["summary"]
    else:  # the exporter's load report, its shapes multiplied back (the one contract that says the build failed)
        failed = [r for r in copy.values() if r["status"] == "fail"]
        assert len(failed) == 1, copy
        assert "q_proj.weight: checkpoint [256, 256], parameter [256, 512]" in failed[0]["summary"]
