"""forward-parity on SGLang 0.5.23: the trainers' own step-0 logits (fixtures/references) replayed through
the engine's draft forward after its own wiring to the target."""

from __future__ import annotations

import torch

from tests.conftest import DRAFTS, FIXTURES, TARGET, judge_contract

REFS = FIXTURES / "references"


def judge(path, reference, target=TARGET):
    return judge_contract("forward-parity", path, target, reference_path=reference)


def test_specforge_and_library_default_speculators_agree_with_the_engine():
    for name in ("specforge", "speculators-default"):
        result = judge(DRAFTS[name], REFS / f"{name}.safetensors")
        assert result.status == "pass", result
        assert result.evidence["max_abs_diff"] < 1e-5  # float32 on both sides: accumulation order only
        assert result.evidence["compute_dtype"] == "float32"


def test_train_defaults_diverge_and_the_fix_names_norm_before_residual():
    result = judge(DRAFTS["speculators-train"], REFS / "speculators-train.safetensors")
    assert result.status == "fail"
    ev = result.evidence
    assert ev["max_abs_diff"] > 10 * ev["tolerance"]
    assert ev["first_diverging_position"] == 0
    first = ev["at_first_divergence"]
    assert len(first["trainer_top_k_target_ids"]) == len(first["engine_top_k_target_ids"]) == 5
    assert ev["top_k_mismatches"] and ev["ignored_switches"] == ["norm_before_residual"]
    assert "norm_before_residual" in result.fix


def test_a_changed_norm_weight_is_caught(broken):
    """Weights the trainer did not train (here: the final norm scaled) change the engine's logits."""
    path = broken("specforge", replace={"norm.weight": torch.full((64,), 1.5, dtype=torch.bfloat16)})
    result = judge(path, REFS / "specforge.safetensors")
    assert result.status == "fail"
    assert result.evidence["first_diverging_position"] == 0
    assert "see config, embed-head" in result.fix


def test_a_missing_head_gives_an_engine_forward_of_noise(broken):
    result = judge(broken("specforge", remove=["lm_head.weight"]), REFS / "specforge.safetensors")
    assert result.status == "fail"
    assert result.evidence["first_diverging_position"] == 0 and result.evidence["max_abs_diff"].startswith("non-finite")


def test_without_a_reference_or_target_it_is_skipped_with_the_reason():
    assert judge(DRAFTS["specforge"], None).status == "skip"
    result = judge(DRAFTS["specforge"], REFS / "specforge.safetensors", target=None)
    assert result.status == "skip" and "--target" in result.summary
