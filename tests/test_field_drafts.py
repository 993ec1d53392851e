"""Drafts as the field publishes them in late 2026, judged from what each engine's own code does with them.

- **Heads that use no aux hidden states** (NVIDIA's gpt-oss ``Eagle3-v2``; vllm#27688, vllm#40656): a Model Optimizer
  draft with ``eagle_config.use_aux_hidden_state: false`` and no ``fc``. SGLang captures no aux layers and its
  ``LlamaModel.forward`` applies ``fc`` only when the widths differ; vLLM's Model Runner V1 captures nothing and builds
  no ``fc``: both serve it as trained. Model Runner V2 captures aux states whatever the config says and the draft's
  forward fails: a real failure there.

- **Any number of aux layers** (vllm#54598): a speculators draft listing four top-level aux ids with a 4-state ``fc``.
  vLLM 0.32.0 sizes ``fc`` from ``num_aux_hidden_states`` or the nested ``eagle_config`` only, so its weight loader
  refuses the checkpoint's ``fc``: that refusal is the verdict. The same draft drove vLLM's worker into a native crash
  (a double free, SIGSEGV) or a hang on the aux capture; a worker the engine's code ends is the engine's refusal, named
  in its own last words, never a hang and never an internal error.
- **Which embedding the draft trained with** (TorchSpec#38): speculators trains with the verifier's embedding copied in
  and frozen (``embed_requires_grad: false``), so a saved embedding that differs (an exporter's random one) was never
  trained with. SGLang serves the target's in its place (as trained: ``test_embed_head``); vLLM keeps a distinct one
  on both runners and llama.cpp always uses the draft's own: both serve the untrained one.
- **Attention windows** (speculators#684): speculators' ``train`` writes ``layer_types: ["sliding_attention"]`` and
  ``sliding_window: 2048`` (the bundled speculators-train drafts have them). vLLM's ``llama.py`` applies the window on
  both runners; SGLang's draft takes one only from ``--speculative-draft-window-size`` and llama.cpp's converter writes
  none: both serve full attention. Observed by shrinking the window below the probe's tokens.
- **Parameters nobody reads**: a two-layer speculators draft saves no ``hidden_norm`` above layer 0; vLLM builds one in
  every layer and its ``LlamaDecoderLayer.forward`` reads it only in layer 0. Where the draft's own weights cannot run
  here (a head size vLLM's CPU attention does not take, a real-size draft), which parameters the forward reads is
  observed on a scaled-down copy: an unwritten parameter is a finding only when the engine's forward reads it."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import DRAFTS, FIXTURES, HD32, HD32_TARGET, TARGET, make_copy, second_layer
from safetensors import safe_open

from contracts.cli import main

V2, V1 = "vllm==0.32.0", "vllm==0.32.0:v1"


@pytest.fixture(scope="module")
def four_aux(tmp_path_factory):
    """speculators' default draft with four aux ids and an fc over four states (its first 192 inputs as trained)."""
    src = HD32["speculators-default"]
    with safe_open(src / "model.safetensors", "pt") as f:
        fc = f.get_tensor("fc.weight")
    wide = torch.cat([fc, torch.randn(fc.shape[0], fc.shape[1] // 3, generator=torch.Generator().manual_seed(4))], 1)
    return make_copy(src, tmp_path_factory.mktemp("field") / "four-aux", replace={"fc.weight": wide},
                     config={"eagle_aux_hidden_state_layer_ids": [1, 2, 4, 5]})


@pytest.mark.parametrize("engine", [V2, V1])
def test_four_aux_layers_on_vllm_are_the_loaders_refusal_not_a_dead_worker(four_aux, engine, tmp_path, capsys):
    out = tmp_path / "report.json"
    code = main(["check", str(four_aux), "--target", str(HD32_TARGET), "--engine", engine, "--format", "json",
                 "--output", str(out), "--only", "key-naming,tensor-shapes,hidden-width"])
    assert "internal error" not in capsys.readouterr().err
    by = {r["contract"]: r for r in json.loads(out.read_text())["results"]}
    assert code == 1
    shapes = by["tensor-shapes"]
    assert shapes["status"] == "fail" and "`fc.weight` [64, 256] → model.fc.weight [64, 192]" in shapes["summary"]
    assert "Tried to load weights of size torch.Size([64, 256])" in json.dumps(shapes["evidence"])
    assert "4 aux layer(s)" in shapes["fix"] and "eagle_config.eagle_aux_hidden_state_layer_ids" in shapes["fix"]
    # hidden-width: the four states the target hands over meet fc's three in the product a deployment computes (vLLM's
    # default GEMM refuses it); vLLM's CPU GEMM would read past them and corrupt the worker (it died, or hung for good)
    width = by["hidden-width"]
    assert width["status"] == "fail", width
    assert "the target hands over 256 = 4 × 64" in width["summary"] and "fc takes 192 = 3 × 64" in width["summary"]
    assert "mat1 and mat2 shapes cannot be multiplied" in width["summary"], width


@pytest.mark.parametrize("engine", [V2, V1])
def test_a_second_layers_unread_hidden_norm_is_harmless_on_vllm_at_a_head_size_its_cpu_kernel_lacks(engine, tmp_path):
    src = DRAFTS["speculators-default"]  # head_dim 16: vLLM's CPU attention cannot run the draft's own weights
    layer = json.loads((src / "config.json").read_text())["transformer_layer_config"]
    two = make_copy(src, tmp_path / "two-layers", add=second_layer(src),
                    config={"transformer_layer_config": {**layer, "num_hidden_layers": 2}})
    out = tmp_path / "report.json"
    code = main(["check", str(two), "--target", str(TARGET), "--engine", engine, "--format", "json",
                 "--output", str(out), "--only", "key-naming"])
    naming = json.loads(out.read_text())["results"][0]
    assert (code, naming["status"]) == (0, "pass"), naming
    assert "layers.1.hidden_norm.weight" in naming["evidence"]["never_written_never_read"]
    assert "scaled-down copy" in naming["evidence"]["layer_reads_observed_on"]


@pytest.fixture(scope="module")
def without_aux(tmp_path_factory):
    src = FIXTURES / "drafts" / "modelopt-default-hd32"
    nested = json.loads((src / "config.json").read_text())["eagle_config"]
    nested = {k: v for k, v in nested.items() if k != "eagle_aux_hidden_state_layer_ids"}
    return make_copy(src, tmp_path_factory.mktemp("field") / "no-aux", remove=["fc.weight"],
                     config={"eagle_config": {**nested, "use_aux_hidden_state": False}})


@pytest.mark.parametrize("engine, served", [("sglang", True), (V1, True), (V2, False)])
def test_a_head_trained_without_aux_states_is_served_as_trained_where_the_engine_captures_none(
        without_aux, engine, served, tmp_path):
    out = tmp_path / "report.json"
    code = main(["check", str(without_aux), "--target", str(HD32_TARGET), "--engine", engine, "--format", "json",
                 "--output", str(out), "--only", "key-naming,hidden-width"])
    by = {r["contract"]: r for r in json.loads(out.read_text())["results"]}
    assert by["key-naming"]["status"] == "pass", by["key-naming"]  # SGLang's built, never-applied fc is harmless
    width = by["hidden-width"]
    if served:
        assert code == 0 and width["status"] == "pass", width
        assert "hands over 64 = 1 × 64" in width["summary"] and "served as trained" in width["summary"]
    else:  # Model Runner V2 hard-codes aux capture: the forward fails, and the fix does not drop the flag
        assert code == 1 and width["status"] == "fail", width
        assert "hands over 192 = 3 × 64 on Model Runner V2" in width["summary"]
        assert "remove use_aux_hidden_state" not in (width["fix"] or "")


@pytest.mark.parametrize("engine", [V2, V1, "llamacpp"])
def test_a_random_embedding_beside_a_frozen_trained_one_fails_where_the_engine_keeps_the_drafts(engine, tmp_path):
    src = HD32["speculators-default"]
    noise = torch.randn(512, 64, generator=torch.Generator().manual_seed(3)) * 0.02
    draft = make_copy(src, tmp_path / "random-embedding", replace={"embed_tokens.weight": noise})
    out = tmp_path / "report.json"
    code = main(["check", str(draft), "--target", str(HD32_TARGET), "--engine", engine, "--format", "json",
                 "--output", str(out), "--only", "embed-head"])
    result = json.loads(out.read_text())["results"][0]
    assert (code, result["status"]) == (1, "fail"), result
    assert "serves the checkpoint's `embed_tokens.weight`, which is not the target's embedding" in result["summary"]
    assert "embed_requires_grad: false" in result["summary"]
    assert "overwrite `embed_tokens.weight` with the target's" in result["fix"]


WINDOWED = HD32["speculators-train"]


@pytest.mark.parametrize("engine, applied", [("sglang", False), (V2, True), (V1, True), ("llamacpp", False)])
def test_a_trained_attention_window_is_judged_by_whether_the_engine_applies_it(engine, applied, tmp_path):
    out = tmp_path / "report.json"
    main(["check", str(WINDOWED), "--target", str(HD32_TARGET), "--engine", engine, "--format", "json",
          "--output", str(out), "--only", "config"])
    config = json.loads(out.read_text())["results"][0]
    window = config["evidence"]["window"]
    assert (window["sliding_window"], window["applied"]) == (2048, applied), window
    served_full = "trained with sliding-window attention (window 2048 on layers [0])" in config["summary"]
    assert served_full == (not applied), config["summary"]
    if engine == "sglang":  # its draft class takes a window from a server argument: the fix names it
        assert "serve with --speculative-draft-window-size 2048" in config["fix"]


def test_a_draft_trained_with_full_attention_has_no_window_to_apply(tmp_path):
    layer = json.loads((WINDOWED / "config.json").read_text())["transformer_layer_config"]
    full = make_copy(WINDOWED, tmp_path / "full-attention",
                     config={"transformer_layer_config": {**layer, "layer_types": ["full_attention"]}})
    out = tmp_path / "report.json"
    main(["check", str(full), "--target", str(HD32_TARGET), "--format", "json", "--output", str(out),
          "--only", "config"])
    config = json.loads(out.read_text())["results"][0]
    assert config["evidence"]["window"] is None and "sliding-window" not in config["summary"], config
