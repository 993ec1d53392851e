"""NVIDIA Model Optimizer's EAGLE-3 drafts (fixtures/drafts/modelopt-*, built by nvidia-modelopt 0.47.0's own
convert, one training step and HF export) judged by both engines: each of its conventions is read as it is, and
each contract that can break on one fails with the evidence on a broken copy."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import FIXTURES, make_copy

from contracts.engine_spec import EngineSpec
from contracts.bundled import manifest
from contracts.checkpoint import Checkpoint
from contracts.subject import Subject

TARGET = FIXTURES / "targets" / "llama-tiny-hd32"
DRAFTS = {n: FIXTURES / "drafts" / n for n in ("modelopt-default-hd32", "modelopt-explicit-hd32")}
VLLM = "vllm==0.32.0"
MANIFEST = manifest()


def judge(contract_id, checkpoint, engine="sglang", **fields):
    subject = Subject(checkpoint.name, checkpoint, TARGET, engine=EngineSpec.parse(engine), **fields)
    try:
        return subject.result(contract_id, [contract_id])
    finally:
        subject.close()


@pytest.fixture
def broken(tmp_path):
    counter = iter(range(1000))
    return lambda name, **changes: make_copy(DRAFTS[name], tmp_path / f"{name}-{next(counter)}", **changes)


def test_its_export_is_recognised_as_model_optimizers():
    for path in DRAFTS.values():
        assert Checkpoint.open(path).trainer_format == "modelopt"
    assert MANIFEST["modelopt-default-hd32"]["aux_layer_ids"] == [1, 3, 4]  # sorted({1, N//2-1, N-4}), N = 8
    assert "t2d" not in Checkpoint.open(DRAFTS["modelopt-explicit-hd32"]).tensors


@pytest.mark.parametrize("name,hf", [("modelopt-default-hd32", [2, 4, 5]), ("modelopt-explicit-hd32", [2, 5, 7])])
def test_its_ids_are_layer_outputs_aligned_on_sglang_and_one_layer_early_on_vllm_v1(name, hf):
    """Model Optimizer's id i is the output of layer i (hidden_states[i+1]), which SGLang's explicit ids capture;
    vLLM's id i is hidden_states[i]. The export writes even the default ids explicitly (under eagle_config), which
    Model Runner V1 reads: both drafts are one layer early there."""
    on_sglang = judge("hidden-width", DRAFTS[name])
    assert on_sglang.status == "pass", on_sglang
    assert on_sglang.evidence["engine_hf_hidden_states"] == hf
    on_vllm = judge("hidden-width", DRAFTS[name], engine=VLLM + ":v1")
    assert on_vllm.status == "fail"
    ids = MANIFEST[name]["aux_layer_ids"]
    assert f"the engine captures hidden_states {ids} but modelopt trained on hidden_states {hf}" in on_vllm.summary
    assert f"write eagle_aux_hidden_state_layer_ids: {hf}" in on_vllm.fix


def test_on_model_runner_v2_its_default_draft_is_served_as_trained_and_custom_ids_are_not():
    """Model Runner V2, a GPU server's default, never reads ids nested under eagle_config: it captures the target's
    default (2, N//2, N-3) = hidden_states [2, 4, 5], which are exactly the layers the default draft's [1, 3, 4]
    name; the explicit draft's [1, 4, 6] (hidden_states [2, 5, 7]) are silently served on those default layers."""
    default = judge("hidden-width", DRAFTS["modelopt-default-hd32"], engine=VLLM)
    assert default.status == "pass", default
    assert default.evidence["engine_hf_hidden_states"] == [2, 4, 5] and default.evidence["runner"] == "v2"
    explicit = judge("hidden-width", DRAFTS["modelopt-explicit-hd32"], engine=VLLM)
    assert explicit.status == "fail"
    assert "the engine captures hidden_states [2, 4, 5] but modelopt trained on hidden_states [2, 5, 7]" in \
        explicit.summary
    assert "on Model Runner V2 reads no aux ids from this config" in explicit.summary
    assert explicit.fix.startswith("write eagle_aux_hidden_state_layer_ids: [2, 5, 7]")


@pytest.mark.parametrize("engine", ["sglang", VLLM])
def test_a_frequency_ordered_d2t_is_served_as_trained(engine):
    result = judge("d2t-semantics", DRAFTS["modelopt-explicit-hd32"], engine=engine,
                   intended_ids=MANIFEST["modelopt-explicit-hd32"]["selected_target_ids"])
    assert result.status == "pass", result
    assert result.evidence["not_increasing_at"] and "in the trainer's order" in result.summary


@pytest.mark.parametrize("engine", ["sglang", VLLM])
def test_its_export_quirks_are_named(engine):
    shapes = judge("tensor-shapes", DRAFTS["modelopt-default-hd32"], engine=engine)
    assert shapes.status == "warn" and "weights are float32 but config.json declares bfloat16" in shapes.summary
    config = judge("config", DRAFTS["modelopt-default-hd32"], engine=engine)
    assert config.status == "warn"
    assert "the draft's config scales its rope (yarn: factor 32.0" in config.summary
    assert "eagle_export_rope_scaling={}" in config.fix


@pytest.mark.parametrize("engine", ["sglang", VLLM])
def test_its_own_switches_are_judged_on_the_engines_math(engine):
    """Neither engine reads use_last_layernorm or use_input_layernorm_in_first_layer, but both always build a
    final norm and a first-layer input norm: the true values the export writes are the math they compute."""
    result = judge("config", DRAFTS["modelopt-default-hd32"], engine=engine)
    switches = result.evidence["switches"]
    for key in ("use_last_layernorm", "use_input_layernorm_in_first_layer"):
        assert switches[key]["honoured"] is False and switches[key]["value"] is True
        assert "the engine always computes the" in switches[key]["note"]
    assert "is ignored by" not in result.summary


@pytest.mark.parametrize("engine", ["sglang", VLLM])
def test_a_draft_trained_without_its_last_layernorm_is_not_served_as_trained(broken, engine):
    cfg = json.loads((DRAFTS["modelopt-default-hd32"] / "config.json").read_text())
    eagle = {**cfg["eagle_config"], "use_last_layernorm": False}
    result = judge("config", broken("modelopt-default-hd32", config={"eagle_config": eagle}, remove=["norm.weight"]),
                   engine=engine)
    assert result.status == "fail"
    assert "use_last_layernorm: false is ignored by" in result.summary
    assert "computes the use_last_layernorm: true math" in result.summary


@pytest.mark.parametrize("engine", ["sglang", VLLM])
def test_forward_parity_fails_on_both_engines_and_points_at_the_rope(engine):
    """The reference is Model Optimizer's own step-0 forward (default rope, and hidden_norm(input_layernorm(fc(h)))
    in its first layer); both engines apply the export's yarn rope and hidden_norm(fc(h))."""
    name = "modelopt-default-hd32"
    result = judge("forward-parity", DRAFTS[name], engine=engine,
                   reference_path=FIXTURES / "references" / f"{name}.safetensors")
    assert result.status == "fail"
    assert result.evidence["max_abs_diff"] > 1e-2
    assert "rope scaling" in result.fix


def test_with_the_training_rope_the_first_layer_norm_still_differs(broken):
    """Export with the rope it trained with (what eagle_export_rope_scaling={} writes): what remains is Model
    Optimizer's first-layer norm of the hidden states, which neither engine applies (a trained input_layernorm
    departs from ones)."""
    default_rope = {"rope_type": "default", "rope_theta": 10000}
    path = broken("modelopt-default-hd32", config={"rope_scaling": default_rope})
    result = judge("forward-parity", path, reference_path=FIXTURES / "references" / "modelopt-default-hd32.safetensors")
    assert result.status == "fail"
    assert 1e-4 < result.evidence["max_abs_diff"] < 1e-2
    ln = Checkpoint.open(path).load_tensor("layers.0.input_layernorm.weight")
    assert float((ln - torch.ones_like(ln)).abs().max()) > 0
