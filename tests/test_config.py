"""config on SGLang 0.5.23: switches are judged honoured or ignored by flipping them on the same weights;
dispatch, sizes and rope come from the engine's own registry, config handling and get_rope."""

from __future__ import annotations

import json

import pytest

import contracts.hand_conversion as convert
from tests.conftest import DRAFTS, TARGET, judge_contract


def judge(path, target=TARGET):
    return judge_contract("config", path, target)


def test_train_defaults_fail_naming_norm_before_residual():
    result = judge(DRAFTS["speculators-train"])
    assert result.status == "fail"
    assert "norm_before_residual: true is ignored by SGLang 0.5.23" in result.summary
    switches = result.evidence["switches"]
    assert switches["norm_before_residual"] == {"value": True, "honoured": False, "max_abs_change_when_flipped": 0.0,
                                                "first_acts_at_step": None, "step_0_change": 0.0,
                                                "fed_back_state_change": 0.0}
    # the switches SGLang does implement change its output when flipped: norm_before_fc the step-0 logits,
    # norm_output only the state its draft forward hands the next draft step
    assert switches["norm_before_fc"]["honoured"] and switches["norm_before_fc"]["first_acts_at_step"] == 0
    assert switches["norm_output"]["honoured"] and switches["norm_output"]["first_acts_at_step"] == 1
    assert switches["norm_output"]["step_0_change"] == 0.0 and switches["norm_output"]["fed_back_state_change"] > 0
    assert "retrain with norm_before_residual: false" in result.fix


def test_library_defaults_hold_in_their_converted_form():
    result = judge(DRAFTS["speculators-default"])
    # the one warning: SGLang serves a speculators checkpoint only after conversion (what was judged)
    assert result.status == "warn", result
    assert result.summary.startswith("SGLang 0.5.23 cannot serve this checkpoint as saved") and ";" not in \
        result.summary.split("); ", 1)[1], result.summary
    assert result.evidence["switches"]["norm_before_residual"]["value"] is False
    assert result.evidence["rope"]["same"] is True


def test_serving_dtype_difference_is_a_warning():
    result = judge(DRAFTS["specforge"])  # bf16 draft; the fp32 tiny target runs in fp16 under --dtype auto
    assert result.status == "warn"
    assert "SGLang 0.5.23 runs the draft in bfloat16 and the target in float16" in result.summary


@pytest.mark.parametrize("arch,expected", [
    (["Eagle3Speculator"], "cannot dispatch architectures ['Eagle3Speculator']"),
    (["LlamaForCausalLM"], "dispatches architectures ['LlamaForCausalLM'] to LlamaForCausalLM, a non-draft class"),
])
def test_unrecognised_architecture(arch, expected, broken):
    result = judge(broken("specforge", config={"architectures": arch}))
    assert result.status == "fail"
    assert expected in result.summary
    assert "eagle3-contracts convert --to sglang" in result.fix


def test_vocab_size_differing_from_the_target(broken):
    result = judge(broken("specforge", config={"vocab_size": 1024}))
    assert result.status == "fail"
    assert "vocab_size 1024 differs from the target's 512" in result.summary


def test_draft_vocab_above_vocab(broken):
    result = judge(broken("specforge", config={"draft_vocab_size": 600}))
    assert result.status == "fail"
    assert "draft_vocab_size 600 is above vocab_size 512" in result.summary


def test_hidden_size_differing_from_the_target(broken):
    result = judge(broken("specforge", config={"target_hidden_size": 128}))
    assert result.status == "fail"
    assert "expects target hidden states of width 128 but the target's hidden_size is 64" in result.summary


def layer_config(**changes) -> dict:
    """The library-default speculators draft's transformer_layer_config, with ``changes``."""
    layer = json.loads((DRAFTS["speculators-default"] / "config.json").read_text())["transformer_layer_config"]
    return {**layer, **changes}


def test_shorter_context_is_a_warning_not_a_failure(broken):
    result = judge(broken("speculators-default", config={"transformer_layer_config": layer_config(
        max_position_embeddings=1024)}))
    assert result.status == "warn"
    assert "max_position_embeddings 1024 is shorter than the target's 2048" in result.summary


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 1024, "rope_theta": 10000.0}


def _with_llama3_rope(broken):
    return broken("speculators-default", config={"transformer_layer_config": layer_config(rope_parameters=LLAMA3_ROPE)})


def test_rope_scaling_survives_our_conversion(broken):
    result = judge(_with_llama3_rope(broken))
    assert result.evidence["rope"]["same"] is True
    assert result.evidence["rope"]["applied"]["class"] == "Llama3RotaryEmbedding"


def test_rope_scaling_lost_by_a_converter_fails(broken, monkeypatch):
    """A converter that drops rope scaling (as users' hand-written ones do): trained llama3, applied default."""
    faithful = convert.speculators_to_sglang_config

    def lossy(cfg):
        flat = faithful(cfg)
        flat["rope_parameters"] = {"rope_type": "default", "rope_theta": flat["rope_parameters"]["rope_theta"]}
        return flat

    monkeypatch.setattr(convert, "speculators_to_sglang_config", lossy)
    result = judge(_with_llama3_rope(broken))
    assert result.status == "fail"
    assert "the engine applies another rope than the trainer trained with" in result.summary
    assert result.evidence["rope"]["trained_class"] == "Llama3RotaryEmbedding"
    assert result.evidence["rope"]["applied"]["class"] == "RotaryEmbedding"


def test_a_switch_that_acts_from_step_1_is_named_in_the_verdict(broken):
    """norm_output changes only the state SGLang feeds the next draft step: honoured, and said to act from step 1,
    where the step-0 forward comparison cannot see it."""
    result = judge(broken("specforge", config={"norm_output": True}))
    assert result.status in ("pass", "warn"), result
    assert result.evidence["switches"]["norm_output"]["first_acts_at_step"] == 1
    assert "norm_output acts from draft step 1 on" in result.summary


def test_a_switch_the_trainer_reads_otherwise_is_a_warning_naming_both_meanings(tmp_path):
    """SpecForge 0.2.0's norm_output is its final norm before lm_head (the state fed on stays raw); SGLang's feeds the
    normalised state on. A published SpecForge EAGLE-3.1 draft (a copy: no reference, trainer guessed from midlayer.*)
    is warned with both meanings, observed on each side's own forward."""
    from tests.conftest import FIXTURES, make_copy

    path = make_copy(FIXTURES / "drafts" / "specforge-eagle31-hd32", tmp_path / "published")
    result = judge_contract("config", path, FIXTURES / "targets" / "llama-tiny-hd32")
    assert result.status == "warn", result
    assert "norm_output means something else to specforge 0.2.0 than to SGLang 0.5.23" in result.summary
    trainer = result.evidence["trainer_switch_semantics"]
    assert trainer["norm_output"]["step_0_change"] > 0 and trainer["norm_output"]["fed_back_state_change"] == 0
    assert "observed when the bundled drafts were built" in trainer["source"]
    assert "fc_norm" not in trainer  # fc_norm means the same on both sides


def test_switches_the_trainer_reads_as_the_engine_does_are_not_warned():
    """speculators' norm_output and norm_before_fc change what SGLang's change (observed in speculators' forward)."""
    result = judge(DRAFTS["speculators-default"])
    assert result.evidence["switches"]["norm_output"]["honoured"]
    assert "means something else" not in result.summary
