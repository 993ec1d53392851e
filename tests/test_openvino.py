"""OpenVINO GenAI's own code (openvino-genai and its exporter, optimum-intel, in their own environment through an
engine worker): each contract judged from what its exporter writes (its load report, the IR's constants), what its
pipeline does when it builds the pair (its refusal, its log) and what its runtime computes (the draft IR run), with a
broken checkpoint that makes it fail next to a pristine one that passes."""

from __future__ import annotations

import pytest
import torch
from conftest import DRAFTS, REFERENCES, TARGET, judge_contract

OPENVINO = "openvino==2026.4.1.0"
REFERENCE = REFERENCES / "specforge.safetensors"


def judge(contract_id: str, checkpoint, target=TARGET, **fields):
    return judge_contract(contract_id, checkpoint, target, engine=OPENVINO, **fields)


def specforge_tensors():
    from safetensors.torch import load_file

    return load_file(str(DRAFTS["specforge"] / "model.safetensors"))


@pytest.fixture(scope="module")
def deep_target(tmp_path_factory):
    """The tiny Llama target with 12 layers (random weights): deep enough for GenAI's own layer choice, which it
    refuses under 10 layers."""
    from transformers import AutoConfig, LlamaForCausalLM

    config = AutoConfig.from_pretrained(str(TARGET))
    config.num_hidden_layers = 12
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("targets") / "llama-tiny-12"
    LlamaForCausalLM(config).save_pretrained(str(out))
    return out


def test_a_specforge_export_is_every_tensor_placed_and_the_embedding_the_targets():
    """SpecForge's draft holds no embedding: the exporter leaves its own random one (MISSING), which the pipeline
    replaces with the target's when it builds the pair; every tensor the draft holds is a constant of the IR with
    the checkpoint's values."""
    assert judge("key-naming", DRAFTS["specforge"]).status == "pass"


def test_a_decoder_layer_the_exporter_cannot_place_is_dropped_and_served_random(broken):
    """The exporter builds one ``midlayer``: a layer saved as ``layers.0.*`` (Model Optimizer, NeMo Automodel, a
    speculators export) is UNEXPECTED in its load report, the IR's layer keeps its random initialisation, and the
    export exits 0."""
    tensors = specforge_tensors()
    renamed = {k.replace("midlayer.", "layers.0."): v for k, v in tensors.items() if k.startswith("midlayer.")}
    draft = broken("specforge", remove=[k for k in tensors if k.startswith("midlayer.")], add=renamed)
    result = judge("key-naming", draft)
    assert result.status == "fail", result
    assert "layers.0.self_attn.q_proj.weight" in str(result.evidence)


def test_a_speculators_draft_is_judged_in_the_flat_form_and_its_layer_is_dropped():
    """The exporter cannot read speculators' nested config; the flat form a hand conversion writes exports with the
    layer saved as `layers.0.*` dropped (served random): config says so, key-naming fails and names the rename."""
    config = judge("config", DRAFTS["speculators-default"])
    assert config.status == "warn", config
    assert "optimum-intel's exporter cannot read this draft" in config.summary
    assert "convert --to openvino" in config.fix
    names = judge("key-naming", DRAFTS["speculators-default"])
    assert names.status == "fail", names
    assert "`layers.0.self_attn.q_proj.weight` → `midlayer.self_attn.q_proj.weight`" in names.fix


def test_a_tensor_of_another_shape_is_the_exporters_refusal(broken):
    assert judge("tensor-shapes", DRAFTS["specforge"]).status == "pass"
    fc = specforge_tensors()["fc.weight"]
    result = judge("tensor-shapes", broken("specforge", replace={"fc.weight": fc[:, :128].contiguous()}))
    assert result.status == "fail", result
    assert "fc.weight" in result.summary + str(result.evidence)


def test_d2t_is_served_as_offsets_and_an_absolute_map_is_out_of_range(broken):
    """The IR's ``d2t`` output is the draft sampler's offsets (``index + d2t[index]``): the trainer's offsets pass, a
    map of absolute target ids lands past the target vocabulary."""
    assert judge("d2t-semantics", DRAFTS["specforge"]).status == "pass"
    d2t = specforge_tensors()["d2t"]
    absolute = d2t + torch.arange(d2t.numel(), dtype=d2t.dtype)
    assert judge("d2t-semantics", broken("specforge", replace={"d2t": absolute})).status == "fail"


def test_a_target_under_ten_layers_is_refused_without_the_ids_in_the_ir():
    """The exporter writes no layer ids; GenAI refuses an 8-layer target without them, in its own words, and takes
    the trainer's ids once they are in the draft IR's rt_info (observed: the pair built again)."""
    result = judge("hidden-width", DRAFTS["specforge"])
    assert result.status == "fail", result
    assert "num_decoder_layers must be at least 10" in result.summary
    assert result.evidence["ids_for_trainer_layers"] == [1, 3, 4]
    assert "hidden_layers_list" in result.fix and "[1, 3, 4]" in result.fix


def test_genai_taps_its_own_default_layers_and_the_trainers_ids_are_not_read(broken, deep_target):
    """On a 12-layer target GenAI taps the outputs of layers {2, 6, 9} (hidden_states [3, 7, 10]) whatever the draft's
    config says: a draft trained there passes, SpecForge's default ([1, 5, 8]: hidden_states [2, 6, 9]) fails."""
    trained_there = broken("specforge", config={"eagle_aux_hidden_state_layer_ids": [2, 6, 9]})
    assert judge("hidden-width", trained_there, target=deep_target).status == "pass"
    result = judge("hidden-width", broken("specforge", config={"eagle_aux_hidden_state_layer_ids": [1, 5, 8]}),
                   target=deep_target)
    assert result.status == "fail", result
    assert "hidden_states [3, 7, 10]" in result.summary
    assert result.evidence["ids_for_trainer_layers"] == [1, 5, 8]


def test_a_trained_embedding_is_replaced_by_the_targets(broken):
    """GenAI's share_vocabulary copies the target's embedding into the draft whatever the draft holds (its log says
    so): a draft without one is served as trained, a draft that trained its own is not."""
    assert judge("embed-head", DRAFTS["specforge"]).status == "pass"
    torch.manual_seed(1)
    own = {"embed_tokens.weight": torch.randn(512, 64).to(torch.bfloat16)}
    result = judge("embed-head", broken("specforge", add=own))
    assert result.status == "fail", result


def test_norm_before_residual_is_not_honoured(broken):
    """The exporter's draft module has no norm_before_residual branch: flipping it changes nothing GenAI runs."""
    assert judge("config", DRAFTS["specforge"]).status == "pass"
    result = judge("config", broken("specforge", config={"norm_before_residual": True}))
    assert result.status in ("fail", "warn"), result
    assert "norm_before_residual" in result.summary


def test_the_draft_ir_computes_the_trainers_steps(broken):
    """The draft IR as GenAI edits it (the target's embedding, the fc moved into the target), run by OpenVINO's
    runtime on the trainer's reference at step 0 and at every later step its Eagle3 loop runs (its own pre-norm state
    fed back): the pristine draft agrees at each; a draft whose weights are not the ones the reference ran does not."""
    result = judge("forward-parity", DRAFTS["specforge"], reference_path=REFERENCE)
    assert result.status == "pass", result
    assert result.summary.startswith("steps 0..2 agree"), result.summary
    assert "Eagle3 draft loop" in result.summary
    norm = specforge_tensors()["midlayer.hidden_norm.weight"]
    changed = broken("specforge", replace={"midlayer.hidden_norm.weight": norm * 2})
    assert judge("forward-parity", changed, reference_path=REFERENCE).status == "fail"


def test_a_target_beyond_the_export_bound_is_not_judged_and_says_why(tmp_path):
    """A target too large to export whole within the suite's bound (its headers say so; the file is sparse, nothing
    is allocated): the contracts judged on GenAI's pair are not judged, with the size, instead of the exporter taking
    tens of GB; the draft's own contracts are still judged."""
    import json
    import shutil

    target = tmp_path / "big-target"
    target.mkdir()
    shutil.copy(TARGET / "config.json", target / "config.json")
    rows, width = 300_000, 1_000  # 300 M float32 elements: past the 256 M bound
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [rows, width],
                                                       "data_offsets": [0, 4 * rows * width]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(target / "model.safetensors", "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + 4 * rows * width)
    result = judge("hidden-width", DRAFTS["specforge"], target=target)
    assert result.status == "skip", result
    assert "beyond its bound" in result.summary and "0.30 B parameters" in result.summary
    assert judge("d2t-semantics", DRAFTS["specforge"], target=target).status == "pass"


def test_a_later_step_the_ir_does_not_compute_is_named(tmp_path):
    """Step 0 agrees and the trainer's step 1 is not what GenAI's loop computes (its recorded logits moved by 0.05):
    the verdict names draft step 1 and GenAI's loop, so a break that only the fed-back state shows is caught."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(REFERENCE), framework="pt") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    tensors["step_logits"][1] += 0.05
    moved = tmp_path / "reference.safetensors"
    save_file(tensors, str(moved), metadata=meta)
    result = judge("forward-parity", DRAFTS["specforge"], reference_path=moved)
    assert result.status == "fail", result
    assert "step 0 agrees" in result.summary and "draft step 1 diverges" in result.summary
    assert "OpenVINO GenAI's Eagle3 draft loop" in result.summary


def test_convert_writes_the_copy_and_the_ir_genai_serves_as_trained(tmp_path, capsys):
    """NeMo Automodel's vLLM export on OpenVINO GenAI: its layer under `layers.0.*` is dropped by the exporter, its
    config counts the target's 8 layers (GenAI refuses the pair of that IR: `beam_idx` undeclared), and GenAI needs
    the layer ids in the draft IR's rt_info. `convert --to openvino` renames the layer as the exporter's own load asks,
    sets the layer count its pair build asks for, and writes the exporter's IR beside the copy with the trainer's
    ids in its rt_info; the contracts on the copy pass."""
    import json
    import re

    from safetensors import safe_open

    from contracts.cli import main
    from tests.conftest import FIXTURES, tree_digest

    src, dst = FIXTURES / "drafts" / "automodel-vllm-hd32", tmp_path / "out"
    before = tree_digest(src)
    code = main(["convert", str(src), str(dst), "--to", "openvino", "--trainer", "automodel", "--format", "json",
                 "--target", str(FIXTURES / "targets" / "llama-tiny-hd32")])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert tree_digest(src) == before
    assert json.loads((dst / "config.json").read_text())["num_hidden_layers"] == 1
    with safe_open(str(next(dst.glob("*.safetensors"))), framework="pt") as f:
        names = set(f.keys())
    assert "midlayer.self_attn.q_proj.weight" in names and not any(n.startswith("layers.0.") for n in names)
    ir = (dst / "openvino_model.xml").read_text()
    assert re.search(r'<hidden_layers_list value="1 3 4"', ir), "the trainer's ids in the IR's rt_info"
    assert {r["contract"]: r["status"] for r in doc["results"]}["hidden-width"] == "pass"
    assert all(r["status"] != "fail" for r in doc["results"]), doc["results"]


def test_a_config_only_target_is_not_judged_where_the_exporter_needs_its_weights_not_an_input_error(capsys):
    """A target given as its config alone is valid input (SGLang and vLLM judge every contract on it); the exporter
    cannot export it, so the pair's contracts are not judged in its words, and the draft's own are judged (it was
    exit 2, "no weights", from this suite's size bound)."""
    import json

    from conftest import FIXTURES

    from contracts.cli import main

    code = main(["check", str(DRAFTS["specforge"]), "--target", str(FIXTURES / "targets" / "qwen3-tiny-config"),
                 "--engine", OPENVINO, "--format", "json", "--allow-not-judged"])
    by = {r["contract"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert code in (0, 1)
    assert by["key-naming"]["status"] == "pass"
    assert by["forward-parity"]["status"] == "skip"
    assert "optimum-intel's exporter refused the target" in by["forward-parity"]["summary"]
