"""Every contract on llama.cpp's own code (the xllamacpp wheel and the tree it was built from, in its own environment
through an engine worker): the trainers' drafts as llama.cpp serves them, and for each contract a broken checkpoint
that makes it fail with the evidence llama.cpp gives (its converter's exception, its loader's error, its graph's
output), next to a pristine one that passes."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import DRAFTS, FIXTURES, HD32, HD32_TARGET, REFERENCES, TARGET, judge_contract, tree_digest

from contracts.cli import main
from contracts.manifest import manifest

LLAMACPP = "llamacpp==2026.10.11549"
LEGACY = "llamacpp==2026.7.10068"  # a release before llama_process / llama_batch_ext and before norm_before_fc


def judge(contract_id: str, checkpoint, target=TARGET, engine=LLAMACPP, **fields):
    return judge_contract(contract_id, checkpoint, target, engine=engine, **fields)


def judge_all(checkpoint, target=TARGET, engine=LLAMACPP, **fields) -> dict:
    return judge_contract(None, checkpoint, target, engine=engine, **fields)


# --- served as trained -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["specforge", "speculators-default"])
def test_trainer_drafts_are_served_as_trained(name):
    results = judge_all(HD32[name], HD32_TARGET, reference_path=REFERENCES / f"{name}-hd32.safetensors",
                        intended_ids=manifest()[f"{name}-hd32"]["selected_target_ids"])
    assert {c: r.status for c, r in results.items()} == {c: "pass" for c in results}, results
    parity = results["forward-parity"].evidence
    assert "float16" in parity["tolerance_why"]  # llama.cpp's default KV cache, as its server runs it
    assert parity["chain_path"].startswith("llama.cpp's decoder stepped as its draft() steps it")
    assert [s["step"] for s in parity["steps"]] == [0, 1, 2]


def test_a_pair_probed_twice_in_one_worker_gets_the_same_config_verdict():
    """The config probe converts the pair again with each switch flipped, into the pair's folder; a second probe of
    the same pair in the same worker (two checks of one draft in a session) converted into what the first left
    there and the worker answered FileExistsError."""
    from contracts.engine_spec import EngineSpec
    from contracts.engines import engine_for

    engine = engine_for(EngineSpec.parse(LLAMACPP))
    config = json.loads((HD32["speculators-default"] / "config.json").read_text())
    target_config = json.loads((HD32_TARGET / "config.json").read_text())
    engine.load(HD32["speculators-default"], HD32_TARGET)
    answers = [engine.config(HD32["speculators-default"], config, {"norm_before_residual": False}, target_config)
               for _ in range(2)]
    assert answers[0].to_dict() == answers[1].to_dict()
    assert "norm_before_residual" in answers[0].switches


def test_specforge_takes_the_targets_embedding_through_ctx_other():
    result = judge("key-naming", DRAFTS["specforge"])
    assert result.status == "pass"
    assert result.evidence["engine_class"] == "llama_model_eagle3"
    assert list(result.evidence["written_by_target_sharing"]) == ["token_embd.weight"]
    assert result.evidence["renamed_by_engine"]["midlayer.self_attn.q_proj.weight"] == ["blk.0.attn_q.weight"]


# --- key-naming --------------------------------------------------------------------------------------------

def test_a_tensor_the_converter_cannot_map_fails_key_naming_with_its_error(broken):
    """EAGLE-3.1's fc_norm: llama.cpp's converter raises and writes no GGUF."""
    result = judge("key-naming", broken("specforge", add={"fc_norm.0.weight": torch.ones(64)}))
    assert result.status == "fail"
    assert "raised on fc_norm.0.weight" in result.evidence["load_error"]
    assert "Can not map tensor 'fc_norm.0.weight'" in result.evidence["load_error"]
    assert "raised on" in result.fix


def test_a_missing_tensor_fails_key_naming_with_the_loaders_error(broken):
    result = judge("key-naming", broken("specforge", remove=["midlayer.post_attention_layernorm.weight"]))
    assert result.status == "fail"
    assert "tensor 'blk.0.ffn_norm.weight' not found" in result.summary


# --- tensor-shapes ----------------------------------------------------------------------------------------

def test_a_misshapen_tensor_fails_tensor_shapes_with_the_shape_the_loader_expected(broken):
    path = broken("specforge", replace={"midlayer.self_attn.q_proj.weight": torch.randn(64, 64, dtype=torch.bfloat16)})
    result = judge("tensor-shapes", path)
    assert result.status == "fail"
    assert "`midlayer.self_attn.q_proj.weight` [64, 64] → blk.0.attn_q.weight [64, 128]" in result.summary
    assert "has wrong shape" in result.evidence["shape_errors"][0]["engine_error"]


def test_trainer_shapes_fit():
    assert judge("tensor-shapes", DRAFTS["speculators-train"]).status == "pass"


# --- d2t-semantics ----------------------------------------------------------------------------------------

def test_a_zeroed_d2t_is_converted_into_the_first_ids_and_fails(broken):
    """llama.cpp's converter turns offsets into absolute ids and checks only range and duplicates: zeros become
    0..63, a valid map onto the wrong tokens."""
    ids = manifest()["specforge"]["selected_target_ids"]
    path = broken("specforge", replace={"d2t": torch.zeros(64, dtype=torch.int64)})
    result = judge("d2t-semantics", path, intended_ids=ids)
    assert result.status == "fail" and "d2t and t2d disagree" in result.summary
    assert judge("d2t-semantics", DRAFTS["specforge"], intended_ids=ids).status == "pass"


def test_absolute_d2t_is_refused_by_the_converter(broken):
    d2t = broken("specforge").joinpath("model.safetensors")
    from safetensors.torch import load_file

    offsets = load_file(str(d2t))["d2t"]
    results = judge_all(broken("specforge", replace={"d2t": offsets + torch.arange(64)}))
    assert results["config"].status == "fail"
    assert "EAGLE-3 d2t target ids out of range" in results["config"].summary
    assert results["d2t-semantics"].status == "skip"


# --- hidden-width -----------------------------------------------------------------------------------------

def test_ids_under_eagle_config_are_not_read_and_the_top_level_key_is_the_observed_fix():
    """llama.cpp#27040: Model Optimizer's nested ids are dropped without a word."""
    result = judge("hidden-width", FIXTURES / "drafts" / "modelopt-explicit-hd32", HD32_TARGET)
    assert result.status == "fail"
    assert "the engine captures hidden_states [2, 4, 5]" in result.summary
    assert "eagle_aux_hidden_state_layer_ids (top level of config.json only): [2, 5, 7]" in result.fix


def test_top_level_ids_are_the_layers_llamacpp_feeds(broken):
    result = judge("hidden-width", broken("specforge", config={"eagle_aux_hidden_state_layer_ids": [1, 4, 6]}))
    assert result.status == "fail"
    assert "the engine captures hidden_states [1, 4, 6]" in result.summary
    assert judge("hidden-width", DRAFTS["specforge"]).status == "pass"


# --- embed-head -------------------------------------------------------------------------------------------

def test_a_reduced_vocab_draft_without_head_or_map_is_served_the_targets_full_head(broken):
    result = judge("embed-head", broken("specforge", remove=["lm_head.weight", "d2t", "t2d"]))
    assert result.status == "fail"
    assert "declares draft_vocab_size 64 but is served with a head of 512 rows (target (ctx_other))" in result.summary
    assert "no draft->target map" in result.summary


def test_a_loader_abort_is_a_refusal_and_the_worker_lives_on(broken):
    """No lm_head but a d2t: llama.cpp's graph builder stops on GGML_ASSERT (abort()); in the child that loads the pair
    first it is the engine's refusal, and the worker goes on judging."""
    results = judge_all(broken("specforge", remove=["lm_head.weight"]))
    assert results["config"].status == "fail"
    assert "GGML_ASSERT(model.d2t->ne[0] == n_draft_vocab) failed" in results["config"].summary
    assert results["embed-head"].status == "skip"
    assert judge("embed-head", DRAFTS["specforge"]).status == "pass"


def test_tie_word_embeddings_does_not_replace_a_trained_head(broken):
    """llama.cpp keeps a draft's own output tensor whatever tie_word_embeddings says (SGLang and vLLM tie it)."""
    result = judge("embed-head", broken("speculators-default", config={"tie_word_embeddings": True}))
    assert result.status == "pass" and "head: checkpoint" in result.summary


# --- config -----------------------------------------------------------------------------------------------

def test_norm_output_is_ignored_and_norm_before_residual_honoured(broken):
    result = judge("config", broken("specforge", config={"norm_output": True}))
    assert result.status == "fail"
    assert "norm_output: true is ignored by llama.cpp 2026.10.11549" in result.summary
    honoured = judge("config", broken("specforge", config={"norm_before_residual": True}))
    assert honoured.status == "pass"
    switch = honoured.evidence["switches"]["norm_before_residual"]
    assert switch["honoured"] and switch["max_abs_change_when_flipped"] > 0


def test_an_unknown_draft_class_cannot_be_dispatched():
    result = judge("config", FIXTURES / "drafts" / "automodel-raw-hd32", HD32_TARGET)
    assert result.status == "fail"
    assert "Model LlamaEagle3DraftModel is not supported" in result.summary


# --- forward-parity ---------------------------------------------------------------------------------------

def test_a_flipped_switch_makes_the_forwards_diverge(broken):
    path = broken("speculators-train-hd32", config={"norm_before_residual": False})
    result = judge("forward-parity", path, HD32_TARGET, reference_path=REFERENCES / "speculators-train-hd32.safetensors")
    assert result.status == "fail"
    assert result.evidence["max_abs_diff"] > 5 * result.evidence["tolerance"]


# --- releases, the CLI, the user's folders ----------------------------------------------------------------

def test_a_release_before_norm_before_fc_and_before_llama_process(broken):
    """2026.7.10068: its converter cannot map speculators' input_norm; its graph is driven through the older batch
    API and agrees with SpecForge's forward."""
    refused = judge("key-naming", HD32["speculators-train"], HD32_TARGET, engine=LEGACY)
    assert refused.status == "fail" and "Can not map tensor 'input_norm.weight'" in refused.evidence["load_error"]
    parity = judge("forward-parity", HD32["specforge"], HD32_TARGET, engine=LEGACY,
                   reference_path=REFERENCES / "specforge-hd32.safetensors")
    assert parity.status == "pass", parity


def test_check_on_llamacpp_exits_1_with_its_own_error_and_writes_nothing_beside_the_draft(broken, capsys):
    path = broken("specforge", add={"fc.bias": torch.randn(64)})
    before, target_before = tree_digest(path), tree_digest(TARGET)
    code = main(["check", str(path), "--target", str(TARGET), "--engine", "llamacpp", "--format", "json",
                 "--only", "config"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert doc["engine_spec"] == LLAMACPP and doc["path"]["judged"] == "draft-eagle3"
    assert "wrong number of tensors" in doc["results"][0]["summary"]
    assert tree_digest(path) == before and tree_digest(TARGET) == target_before


def test_a_config_claiming_a_larger_vocabulary_fails_config_not_the_replay(broken, tmp_path, capsys):
    """The config probe feeds token ids a deployment feeds (the target's tokenizer's): ids drawn from the draft
    config's larger vocabulary stopped llama.cpp's replay in GGML's get_rows assert, and the check read that as the
    engine refusing the draft."""
    draft = broken("specforge", config={"vocab_size": 4096})
    out = tmp_path / "report.json"
    code = main(["check", str(draft), "--target", str(TARGET), "--engine", LLAMACPP, "--only", "config",
                 "--format", "json", "--output", str(out)])
    result = json.loads(out.read_text())["results"][0]
    assert code == 1 and result["status"] == "fail", result
    assert "vocab_size 4096 differs from the target's 512" in result["summary"], result
    assert "cannot build" not in result["summary"] and "GGML_ASSERT" not in result["summary"]
