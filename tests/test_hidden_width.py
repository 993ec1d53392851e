"""hidden-width on SGLang 0.5.23 against the tiny Llama target (its own weights): the width the target
really hands over, whether the draft's fc runs, and the physical layers captured versus the layers the
trainer used — all observed through the engine's own code."""

from __future__ import annotations

import json

import pytest

from contracts.subject import Subject
from tests.conftest import DRAFTS, FIXTURES, TARGET, judge_contract


def judge(path, trainer=None, trainer_aux_ids=None, target=TARGET):
    return judge_contract("hidden-width", path, target, trainer=trainer, trainer_aux_ids=trainer_aux_ids)


def test_specforge_draft_gets_three_layers_and_fc_runs():
    result = judge(DRAFTS["specforge"])
    assert result.status == "pass", result
    ev = result.evidence
    assert ev["evidence"] == "observed" and ev["target_class"] == "LlamaForCausalLM"
    assert ev["hidden_width"] == 192 and ev["fc_in_features"] == 192 and ev["fc_ran"] is True
    # no ids in specforge's export: SGLang's default [2, N//2, N-3] = specforge's [1, 3, 4] + 1
    assert ev["layers_to_capture"] == [2, 4, 5]
    assert ev["hf_indices"] == [2, 4, 5] and ev["engine_hf_mapping"] == "verified against transformers"
    assert ev["trainer"]["hf_hidden_states"] == [2, 4, 5]


@pytest.mark.parametrize("name", ["speculators-default", "speculators-train"])
def test_speculators_ids_copied_verbatim_capture_one_layer_later(name):
    result = judge(DRAFTS[name], trainer="speculators", trainer_aux_ids=[2, 4, 5])
    assert result.status == "fail"
    assert "the engine captures hidden_states [3, 5, 6] but speculators trained on hidden_states [2, 4, 5]" in \
        result.summary
    assert result.evidence["hf_indices"] == [3, 5, 6]  # measured against transformers, not inferred
    assert "eagle_aux_hidden_state_layer_ids: [1, 3, 4]" in result.fix


def test_the_suggested_ids_make_it_pass(tmp_path):
    from contracts.hand_conversion import convert_to_sglang

    fixed = convert_to_sglang(DRAFTS["speculators-default"], tmp_path / "converted")
    cfg = json.loads((fixed / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 3, 4]
    (fixed / "config.json").unlink()
    (fixed / "config.json").write_text(json.dumps(cfg))
    result = judge(fixed, trainer="speculators", trainer_aux_ids=[2, 4, 5])
    assert result.status == "pass", result
    assert result.evidence["hf_indices"] == [2, 4, 5]


def test_explicit_ids_are_shifted_by_one_as_measured_against_transformers(broken):
    path = broken("specforge", config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}})
    result = judge(path, trainer="specforge", trainer_aux_ids=[1, 3, 5])
    assert result.status == "pass", result
    assert result.evidence["layers_to_capture"] == [2, 4, 6] and result.evidence["hf_indices"] == [2, 4, 6]


def test_use_aux_hidden_state_false_bypasses_fc_silently(broken):
    path = broken("specforge", config={"eagle_config": {"use_aux_hidden_state": False}})
    result = judge(path)
    assert result.status == "fail"
    ev = result.evidence
    assert ev["use_aux_hidden_state"] is False
    assert ev["hidden_width"] == 64 and ev["fc_in_features"] == 192 and ev["fc_ran"] is False
    assert ev["draft_forward_error"] is None  # the forward succeeds: that is the silent part
    assert "fc is silently bypassed" in result.summary
    assert "remove use_aux_hidden_state: false" in result.fix


def test_an_id_past_the_last_layer_is_judged_by_what_the_engine_captures(broken):
    """No range rule of the suite's own: SGLang's Llama hook takes id 8 and lists layer 9, its decoder loop never
    reaches it, and the observed forward is the verdict (two states handed over; fc cannot take them)."""
    path = broken("specforge", config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 8]}})
    result = judge(path)
    assert result.status == "fail"
    assert "lie outside" not in result.summary
    assert "the target hands over 128 = 2 × 64 but fc takes 192 = 3 × 64" in result.summary
    assert result.evidence["hidden_width"] == 128
    assert "mat1 and mat2 shapes cannot be multiplied" in result.evidence["draft_forward_error"]


def test_speculators_last_layer_id_has_no_sglang_ids_on_a_llama_target(broken):
    """speculators' --include-last-layer id 8 (the output of an 8-layer target's last layer): SGLang's Llama hook
    lists layer 8 for id 7, but the forward with it hands over two states. The fix says no config serves it as
    trained, and prints no ids."""
    path = broken("speculators-default", config={"eagle_aux_hidden_state_layer_ids": [2, 4, 8]})
    result = judge(path, trainer="speculators")
    assert result.status == "fail"
    assert "speculators trained on hidden_states [2, 4, 8]" in result.summary
    assert "write " not in result.fix and "[1, 3, 7]" in result.fix
    assert "no config makes SGLang 0.5.23 serve this draft as trained" in result.fix
    assert "the forward with them captures hidden_states [2, 4]" in result.fix
    assert result.evidence["ids_for_trainer_layers"] is None


def test_gpt_oss_keeps_an_id_at_the_layer_count_and_captures_it(broken):
    """SGLang's gpt-oss hook keeps ids as written when the largest equals the layer count (captured at the final
    norm): a speculators draft trained with the last layer is served as trained; a range rule failed it."""
    path = broken("speculators-default", config={"eagle_aux_hidden_state_layer_ids": [2, 12, 24]})
    result = judge(path, trainer="speculators", target=FIXTURES / "targets" / "gpt-oss-tiny-config")
    assert result.status == "pass", result
    assert result.evidence["layers_to_capture"] == [2, 12, 24]
    assert result.evidence["engine_hf_hidden_states"] == [2, 12, 24]


def test_number_of_ids_differs_from_what_fc_was_trained_on(broken):
    path = broken("specforge", config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3]}})
    result = judge(path)
    assert result.status == "fail"
    assert "the engine captures 2 layer(s) [2, 4] but the checkpoint's fc was trained on 3 (192 = 3 × 64)" in \
        result.summary
    assert "list exactly 3 ids" in result.fix


def test_without_a_target_it_is_skipped_with_the_reason():
    subject = Subject("no-target", DRAFTS["specforge"], None)
    (result,) = subject.run(["hidden-width"])
    assert result.status == "skip" and "--target" in result.summary


def test_a_hand_converted_draft_needs_the_trainer_named_to_judge_alignment(tmp_path, capsys):
    """A speculators draft a user converted by hand has a flat config: nothing says whose ids these are."""
    from contracts.cli import main
    from contracts.hand_conversion import convert_to_sglang

    converted = convert_to_sglang(DRAFTS["speculators-default"], tmp_path / "converted")
    assert main(["check", str(converted), "--target", str(TARGET), "--only", "hidden-width", "--format", "json"]) == 0
    ev = json.loads(capsys.readouterr().out)["results"][0]["evidence"]
    assert "pass --trainer" in ev["trainer"]
    assert main(["check", str(converted), "--target", str(TARGET), "--only", "hidden-width",
                 "--trainer", "speculators"]) == 1
    assert "speculators trained on hidden_states [2, 4, 5]" in capsys.readouterr().out


def test_a_scaled_copy_too_large_to_materialise_is_judged_statically(tmp_path):
    """Memory stays bounded on the fallback path: a Gemma-3 multimodal class over a Kimi-K2.5 config keeps rope
    caches for 262144 positions at head_dim 256 (537 MB of buffers); it is sized on the meta device, never built."""
    cfg = json.loads((DRAFTS["specforge"].parents[1] / "targets" / "kimi-k25-tiny-config" / "config.json").read_text())
    cfg.update(architectures=["Gemma3ForConditionalGeneration"], model_type="gemma3")
    target = tmp_path / "gemma3-over-kimi"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(cfg))
    result = judge_contract("hidden-width", DRAFTS["specforge"], target)
    assert result.evidence["evidence"] == "static"
    assert "parameter and buffer elements" in result.evidence["evidence_reason"]
    assert "not built on CPU" in result.evidence["evidence_reason"]


def test_a_guessed_trainer_is_named_with_what_the_other_conventions_give(broken):
    """A flat config with ids under eagle_config names no trainer; midlayer.* tensors make SpecForge the guess. The
    report says so, and what speculators' convention (id k = hidden_states[k]) would make of the same capture."""
    path = broken("specforge", config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}})
    result = judge(path)
    assert result.status == "pass", result
    assert "convention assumed: specforge (guessed from the tensor names midlayer.*" in result.summary
    assert "speculators' would fail it (hidden_states [1, 3, 4]), modelopt's would pass it" in result.summary
    assert result.evidence["convention"]["each"]["speculators"] == {"hf_hidden_states": [1, 3, 4], "aligned": False}
    named = judge(path, trainer="specforge")
    assert named.status == "pass" and "convention" not in named.summary and "convention" not in named.evidence


def test_an_unknown_trainer_gets_each_conventions_verdict(broken):
    """layers.0.* tensors in a flat config with no trainer's marks: alignment is not judged, and the summary says
    which conventions the captured layers would fail."""
    path = broken("specforge", config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}})
    from safetensors.torch import load_file, save_file

    tensors = load_file(path / "model.safetensors")
    save_file({k.replace("midlayer.", "layers.0."): v for k, v in tensors.items()}, path / "model.safetensors")
    result = judge(path)
    assert result.status == "pass", result
    assert "trainer unknown (no trainer named, recorded or evident from the checkpoint)" in result.summary
    assert "speculators' would fail it" in result.summary and "specforge's would pass it" in result.summary
