"""tensor-shapes on SGLang 0.5.23: shape verdicts are the engine's own weight-loader assertions, caught."""

from __future__ import annotations

import pytest
import torch

H = 64


@pytest.mark.parametrize("name", ["specforge", "speculators-default", "speculators-train"])
def test_trainer_drafts_fit(name, run_contract):
    from tests.conftest import DRAFTS

    result = run_contract(DRAFTS[name], "tensor-shapes")
    assert result.status == "pass", result
    assert result.evidence["shape_errors"] == []


@pytest.mark.parametrize("base", ["specforge", "speculators-default"])
def test_fc_trained_on_two_aux_layers_fails_with_the_engine_assertion(base, broken, run_contract):
    result = run_contract(broken(base, replace={"fc.weight": torch.randn(H, 2 * H)}), "tensor-shapes")
    assert result.status == "fail"
    (err,) = result.evidence["shape_errors"]
    assert err["tensor"] == "fc.weight" and err["checkpoint_shape"] == [H, 2 * H]
    assert err["param"] == "model.fc.weight" and err["param_shape"] == [H, 3 * H]
    assert "Attempted to load weight" in err["engine_error"]  # SGLang's own assertion text
    assert "trained on 2 aux layer(s)" in result.fix


def test_shape_error_is_not_reported_as_a_naming_problem(broken, run_contract):
    path = broken("specforge", replace={"fc.weight": torch.randn(H, 2 * H)})
    result = run_contract(path, "key-naming")
    assert result.status == "pass"
    assert result.evidence["not_written_because_of_shape_errors"] == ["model.fc.weight"]


def test_integer_weights_cast_into_float_parameters_fail(broken, run_contract):
    result = run_contract(broken("specforge", replace={"norm.weight": torch.ones(H, dtype=torch.int32)}),
                          "tensor-shapes")
    assert result.status == "fail"
    assert result.evidence["integer_into_float"] == [
        {"tensor": "norm.weight", "dtype": "int32", "param": "model.norm.weight", "param_dtype": "bfloat16"}]


def test_weights_in_another_dtype_than_declared_warn(broken, run_contract):
    result = run_contract(broken("specforge", config={"dtype": "float16"}), "tensor-shapes")
    assert result.status == "warn"
    assert "weights are bfloat16 but config.json declares float16" in result.summary


@pytest.mark.parametrize("rows,verb", [(96, "padded"), (160, "truncated")])
def test_engine_silently_pads_or_truncates_a_fused_shard(rows, verb, broken, run_contract):
    """SGLang's fused-linear loader pads a short shard with zeros and narrows a long one, without a word."""
    result = run_contract(broken("specforge", replace={"midlayer.mlp.up_proj.weight": torch.randn(rows, H)}),
                          "tensor-shapes")
    assert result.status == "fail"
    (err,) = result.evidence["shape_errors"]
    assert err["engine_error"] is None
    assert err["silently"] == f"{verb}: {rows * H} values in the checkpoint, {128 * H} written by the engine"
