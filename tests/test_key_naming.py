"""key-naming on SGLang 0.5.23: the trainers' drafts pass; every way a tensor can be silently dropped or a
parameter left unwritten fails, naming exactly the evidence."""

from __future__ import annotations

import pytest
import torch

H = 64


@pytest.mark.parametrize("name", ["specforge", "speculators-default", "speculators-train"])
def test_trainer_drafts_pass(name, run_contract):
    from tests.conftest import DRAFTS

    result = run_contract(DRAFTS[name], "key-naming")
    assert result.status == "pass", result
    assert result.evidence["dropped"] == []
    assert result.evidence["unwritten_params"] == {}
    assert result.evidence["side_channels"] == {"d2t": "hot_token_id"}


def test_specforge_midlayer_names_are_renamed_by_the_engine(run_contract):
    from tests.conftest import DRAFTS

    result = run_contract(DRAFTS["specforge"], "key-naming")
    renamed = result.evidence["renamed_by_engine"]
    assert renamed["midlayer.self_attn.q_proj.weight"] == ["model.layers.0.self_attn.qkv_proj.weight"]
    assert renamed["midlayer.mlp.up_proj.weight"] == ["model.layers.0.mlp.gate_up_proj.weight"]
    # specforge's export drops embed_tokens: the engine's sharing with the target writes it
    assert result.evidence["written_by_target_sharing"] == {"model.embed_tokens.weight": "set_embed"}


STRAYS = {
    "layers.1.mlp.up_proj.weight": (torch.randn(128, H), "num_hidden_layers: 2"),
    "model.decoder.fc.weight": (torch.randn(H, 3 * H), "the checkpoint already has `fc.weight`"),
    "input_norm.weight": (torch.ones(3 * H), "norm_before_fc: True"),
    "fc.bias": (torch.zeros(H), "bias: True"),
}


@pytest.mark.parametrize("base", ["specforge", "speculators-default"])
@pytest.mark.parametrize("stray", sorted(STRAYS))
def test_stray_tensor_is_named_as_dropped(base, stray, broken, run_contract):
    tensor, fix_hint = STRAYS[stray]
    result = run_contract(broken(base, add={stray: tensor}), "key-naming")
    assert result.status == "fail"
    assert result.evidence["dropped"] == [stray]
    assert stray in result.summary
    assert fix_hint in result.fix


def test_all_strays_at_once_are_each_named(broken, run_contract):
    result = run_contract(broken("specforge", add={k: t for k, (t, _) in STRAYS.items()}), "key-naming")
    assert result.status == "fail"
    assert sorted(result.evidence["dropped"]) == sorted(STRAYS)


@pytest.mark.parametrize("base,key", [("speculators-default", "layers.0.mlp.down_proj.weight"),
                                      ("specforge", "midlayer.mlp.down_proj.weight")])
def test_missing_tensor_names_the_unwritten_parameter(base, key, broken, run_contract):
    result = run_contract(broken(base, remove=[key]), "key-naming")
    assert result.status == "fail"
    assert result.evidence["unwritten_params"] == {"model.layers.0.mlp.down_proj.weight": 1.0}
    assert "model.layers.0.mlp.down_proj.weight" in result.summary
    assert "`layers.0.mlp.down_proj.weight`" in result.fix


def test_missing_shard_of_a_fused_parameter_is_partly_unwritten(broken, run_contract):
    result = run_contract(broken("specforge", remove=["midlayer.self_attn.k_proj.weight"]), "key-naming")
    assert result.status == "fail"
    assert result.evidence["unwritten_params"] == {"model.layers.0.self_attn.qkv_proj.weight": 0.25}
    assert "shards loaded: q, v" in result.fix


def test_wrong_prefix_gets_the_rename_the_engine_accepts(broken, run_contract):
    """A whole layer saved under a prefix the engine does not know: every tensor is named, with the rename."""
    from safetensors.torch import load_file

    from tests.conftest import DRAFTS

    layer = {k: v for k, v in load_file(DRAFTS["specforge"] / "model.safetensors").items() if k.startswith("midlayer.")}
    renamed = {k.replace("midlayer.", "decoder.layers.0."): v for k, v in layer.items()}
    result = run_contract(broken("specforge", remove=list(layer), add=renamed), "key-naming")
    assert result.status == "fail"
    assert sorted(result.evidence["dropped"]) == sorted(renamed)
    assert "rename `decoder.layers.0.mlp.down_proj.weight` → `layers.0.mlp.down_proj.weight`" in result.fix
    assert "model.layers.0.mlp.down_proj.weight" in result.evidence["unwritten_params"]


def test_t2d_is_ignored_by_design_not_dropped(run_contract):
    from tests.conftest import DRAFTS

    result = run_contract(DRAFTS["specforge"], "key-naming")
    assert "t2d" in result.evidence["ignored_by_design"]


def test_tied_draft_with_a_separate_lm_head_drops_it(broken, run_contract):
    """Tied embeddings: the engine's lm_head *is* embed_tokens, so a saved lm_head has nowhere to go."""
    result = run_contract(broken("speculators-default",
                                 config={"tie_word_embeddings": True}), "key-naming")
    # speculators keeps tie_word_embeddings inside transformer_layer_config too; the top-level one is carried
    assert result.status == "fail"
    assert result.evidence["dropped"] == ["lm_head.weight"]


def test_unbuildable_config_fails_with_the_engine_error(broken, run_contract):
    result = run_contract(broken("specforge", config={"architectures": ["NoSuchDraftForCausalLM"]}), "key-naming")
    assert result.status == "fail"
    assert "engine cannot build this draft" in result.summary


def test_engine_refusal_is_one_root_cause_and_the_rest_skip(broken):
    from contracts.subject import Subject

    path = broken("specforge", config={"architectures": ["Eagle3DraftModel"]})
    subject = Subject("refused", path)
    naming, shapes = subject.run(["key-naming", "tensor-shapes"])
    assert naming.status == "fail" and "not a registered model" in naming.evidence["engine_error"]
    assert shapes.status == "skip" and "see key-naming" in shapes.summary


def test_a_layer_count_copied_from_the_target_is_one_line(broken, run_contract):
    """A one-layer draft whose config says 8 layers (the target's): the 49 never-written parameters of layers 1..7
    are one setting, observed by loading the checkpoint again under it, not 49 tensors to save."""
    result = run_contract(broken("specforge", config={"num_hidden_layers": 8}), "key-naming")
    assert result.status == "fail"
    assert "engine parameter(s) never written" in result.summary and "layers.{1..7}" in result.summary
    assert result.fix.startswith("set `num_hidden_layers: 1` in config.json: the checkpoint holds 1 decoder layer(s) "
                                 "and the config says 8 (as the target's config does)")
    assert "save a tensor" not in result.fix


def test_a_missing_layer_tensor_is_not_explained_by_a_size(broken, run_contract):
    """One tensor of the draft's only layer missing: no layer count explains it, the fix names the tensor."""
    result = run_contract(broken("specforge", remove=["midlayer.mlp.down_proj.weight"]), "key-naming")
    assert result.status == "fail" and "num_hidden_layers" not in result.fix
    assert "save a tensor for model.layers.0.mlp.down_proj.weight" in result.fix


def test_a_second_layer_is_read_through_hidden_norm_by_sglang(broken, run_contract):
    """A two-layer draft whose layer 1 is a standard decoder layer: SGLang's layers above 0 read hidden_norm and never
    input_layernorm, both observed from its forward; the unwritten hidden_norm is a failure that names the swap."""
    from tests.conftest import DRAFTS, second_layer

    path = broken("specforge", add=second_layer(DRAFTS["specforge"]), config={"num_hidden_layers": 2})
    result = run_contract(path, "key-naming")
    assert result.status == "fail"
    assert "never written (they would serve random values): `model.layers.1.hidden_norm.weight`" in result.summary
    assert "`model.layers.1.input_layernorm.weight`" in result.evidence["loaded_but_never_read"]
    assert "layer 1 of the engine's draft reads `model.layers.1.hidden_norm.weight`" in result.fix


def test_missing_tensors_a_switch_adds_collapse_to_the_switch(broken, run_contract):
    """fc_norm: true with no fc_norm.* tensors saved: the parameters it adds are one setting, observed by building
    the draft with it off and loading the checkpoint whole, with both readings of the trainer's intent."""
    result = run_contract(broken("specforge", config={"fc_norm": True}), "key-naming")
    assert result.status == "fail" and "fc_norm" in result.summary
    assert result.fix.startswith("`fc_norm: true` makes SGLang 0.5.23 build")
    assert "if the trainer did not use fc_norm, set `fc_norm: false`" in result.fix and "save a tensor" not in result.fix
