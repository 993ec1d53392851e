"""forward-parity on SGLang 0.5.23: the trainers' own step-0 logits (fixtures/references) replayed through
the engine's draft forward after its own wiring to the target."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import DELETE, DRAFTS, FIXTURES, TARGET, judge_contract, make_copy

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


def test_without_a_reference_one_is_made_on_the_spot_and_without_a_target_it_is_not_judged():
    """A draft no reference travels with gets its trainer's own forward, made in the trainer's environment on its
    weights: the bundled SpecForge draft, judged as a stranger, gets the verdict its bundled reference gives."""
    made = judge(DRAFTS["specforge"], None)
    assert made.status == "pass" and "made on the spot" in made.evidence["reference"], made
    bundled = judge(DRAFTS["specforge"], REFS / "specforge.safetensors")
    assert bundled.status == "pass" and bundled.evidence["max_abs_diff"] == pytest.approx(made.evidence["max_abs_diff"],
                                                                                             abs=1e-6)
    result = judge(DRAFTS["specforge"], REFS / "specforge.safetensors", target=None)
    assert result.status == "skip" and "--target" in result.summary and result.needs == "--target DIR"


# --- draft steps after the first (multi-step references: the trainer's own TTT steps) ----------------------

HD32_TARGET = FIXTURES / "targets" / "llama-tiny-hd32"
EAGLE31 = FIXTURES / "drafts" / "specforge-eagle31-hd32"


def test_later_steps_of_the_trainers_chain_agree_with_the_engines_steps():
    for name in ("specforge", "speculators-default"):
        result = judge(DRAFTS[name], REFS / f"{name}.safetensors")
        steps = result.evidence["steps"]
        assert [s["step"] for s in steps] == [0, 1, 2] and [s["anchors"] for s in steps] == [8, 7, 6]
        assert all(s["max_abs_diff"] < 1e-5 and not s["diverging_anchors"] for s in steps)
        assert "SGLang EAGLE draft worker loop" in result.summary


def test_specforges_eagle31_draft_diverges_at_step_1_and_the_fix_names_norm_output():
    """SpecForge 0.2.0's norm_output normalises before lm_head only and feeds the raw state to the next step;
    SGLang reads norm_output as 'feed the normalised state': identical step 0, apart from step 1 on."""
    result = judge(EAGLE31, REFS / "specforge-eagle31-hd32.safetensors", target=HD32_TARGET)
    assert result.status == "fail"
    ev = result.evidence
    assert ev["first_diverging_position"] is None and ev["first_diverging_step"] == 1
    assert ev["steps"][1]["max_abs_diff"] > 100 * ev["tolerance"] and ev["steps"][1]["diverging_anchors"] == 7
    assert "draft step 1 diverges from training by up to" in result.summary
    assert ev["switches_from_step_1"] == ["norm_output"] and "remove norm_output" in result.fix


def test_the_eagle31_draft_without_norm_output_is_served_as_trained_at_every_step(tmp_path):
    """The fix works: without the key SGLang feeds the raw state on (and still normalises before lm_head)."""
    path = make_copy(EAGLE31, tmp_path / "eagle31", config={"norm_output": DELETE})
    result = judge(path, REFS / "specforge-eagle31-hd32.safetensors", target=HD32_TARGET)
    assert result.status == "pass", result
    assert [s["step"] for s in result.evidence["steps"]] == [0, 1]


def test_norm_output_set_on_a_draft_trained_without_it_is_caught_at_step_1(broken):
    path = broken("specforge", config={"norm_output": True})
    result = judge(path, REFS / "specforge.safetensors")
    assert result.status == "fail" and result.evidence["first_diverging_step"] == 1
    assert result.evidence["steps"][0]["diverging_anchors"] == 0


def test_a_step_0_only_reference_says_so(tmp_path):
    from safetensors.torch import load_file, save_file

    ref = load_file(REFS / "specforge.safetensors")
    del ref["step_logits"]
    save_file(ref, tmp_path / "step0.safetensors")
    result = judge(DRAFTS["specforge"], tmp_path / "step0.safetensors")
    assert result.status == "pass" and "steps" not in result.evidence
    assert "step 0 only" in result.summary
