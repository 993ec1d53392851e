"""OpenVINO GenAI's own code (openvino-genai and its exporter, optimum-intel, in their own environment through an
engine worker): the tensors its exporter places in the IR it serves, and for each contract judged so far a broken
checkpoint that makes it fail with the exporter's own evidence (its load report, its refusal, the IR's constants),
next to a pristine one that passes. The observations not made yet are "not judged", never a verdict."""

from __future__ import annotations

import torch
from conftest import DRAFTS, TARGET, judge_contract

OPENVINO = "openvino==2026.4.1.0"


def judge(contract_id: str, checkpoint, target=TARGET, **fields):
    return judge_contract(contract_id, checkpoint, target, engine=OPENVINO, **fields)


def test_a_specforge_export_is_every_tensor_placed_and_the_embedding_the_targets():
    """SpecForge's draft holds no embedding: the exporter leaves its own random one (MISSING), which the pipeline
    replaces with the target's when it compiles the pair; every tensor the draft holds is a constant of the IR with
    the checkpoint's values."""
    result = judge("key-naming", DRAFTS["specforge"])
    assert result.status == "pass", result


def test_a_decoder_layer_the_exporter_cannot_place_is_dropped_and_served_random(broken):
    """The exporter builds one ``midlayer``: a layer saved as ``layers.0.*`` (Model Optimizer, NeMo Automodel, a
    speculators export) is UNEXPECTED in its load report, the IR's layer keeps its random initialisation, and the
    export exits 0."""
    from safetensors.torch import load_file

    tensors = load_file(str(DRAFTS["specforge"] / "model.safetensors"))
    renamed = {k.replace("midlayer.", "layers.0."): v for k, v in tensors.items() if k.startswith("midlayer.")}
    draft = broken("specforge", remove=list(k for k in tensors if k.startswith("midlayer.")), add=renamed)
    result = judge("key-naming", draft)
    assert result.status == "fail", result
    assert "layers.0.self_attn.q_proj.weight" in str(result.evidence)


def test_a_speculators_draft_as_saved_is_refused_by_the_exporter():
    result = judge("key-naming", DRAFTS["speculators-default"])
    assert result.status == "fail", result
    assert "optimum-intel's exporter" in result.summary


def test_d2t_is_served_as_offsets_and_an_absolute_map_is_out_of_range(broken):
    """The IR's ``d2t`` output is the draft sampler's offsets (``index + d2t[index]``): the trainer's offsets pass, a
    map of absolute target ids lands past the target vocabulary."""
    from safetensors.torch import load_file

    assert judge("d2t-semantics", DRAFTS["specforge"]).status == "pass"
    d2t = load_file(str(DRAFTS["specforge"] / "model.safetensors"))["d2t"]
    absolute = d2t + torch.arange(d2t.numel(), dtype=d2t.dtype)
    result = judge("d2t-semantics", broken("specforge", replace={"d2t": absolute}))
    assert result.status == "fail", result
