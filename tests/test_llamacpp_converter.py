"""llama.cpp's own converter (the tree of an xllamacpp source release, in the environment derived from that
release) on the bundled drafts: what it decides for the GGUF llama.cpp serves. These are the decisions the
llama.cpp adapter will judge; each test pins one to the converter's code so a release that changes it shows here."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from safetensors.torch import load_file

from contracts.engine_spec import EngineSpec
from contracts.environments.engines import environment_for
from contracts.engines.remote import run_module

RELEASE = "2026.10.11549"  # the newest xllamacpp on the index
DRAFTS = FIXTURES / "drafts"
HD32_TARGET = FIXTURES / "targets" / "llama-tiny-hd32"


@pytest.fixture(scope="module")
def llamacpp_python():
    return environment_for(EngineSpec("llamacpp", RELEASE))


@pytest.fixture(scope="module")
def converted(llamacpp_python):
    seen = {}

    def run(draft: str, target: Path = HD32_TARGET) -> dict:
        if draft not in seen:
            done = run_module(llamacpp_python, "contracts.engines.llamacpp.converter", str(DRAFTS / draft),
                              str(target))
            assert done.returncode == 0, done.stderr[-2000:]
            seen[draft] = json.loads(done.stdout.strip().splitlines()[-1])
        return seen[draft]

    return run


def _digest(folder: Path) -> dict:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir()) if f.is_file()}


def test_the_environment_holds_the_trees_converter_and_gguf_py_on_the_cpu_torch(llamacpp_python):
    env = Path(llamacpp_python).parent.parent
    assert (env / "llama.cpp" / "convert_hf_to_gguf.py").is_file()
    done = run_module(llamacpp_python, "contracts.engines.probe", "llamacpp")
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"ok": True}, done.stderr[-2000:]
    recipe = (env / "recipe.txt").read_text()
    assert "torch==2.13.0" in recipe and "gguf" not in recipe.split("\n", 2)[2]  # gguf comes from the tree


def test_d2t_offsets_become_absolute_target_ids_and_t2d_is_dropped(converted):
    out = converted("speculators-default-hd32")
    saved = load_file(str(DRAFTS / "speculators-default-hd32" / "model.safetensors"))
    offsets = saved["d2t"].tolist()
    assert out["converted"] and out["architecture"] == "eagle3"
    assert out["d2t"] == [i + d for i, d in enumerate(offsets)]
    assert "t2d" in saved and "t2d" not in out["tensors"]


def test_ids_nested_under_eagle_config_are_dropped_for_the_default(converted):
    """llama.cpp reads only the top-level ``eagle_aux_hidden_state_layer_ids`` (llama.cpp#27040): Model Optimizer's
    ``eagle_config`` ids [1, 4, 6] give way to [2, n//2, n-3] without a word."""
    config = json.loads((DRAFTS / "modelopt-explicit-hd32" / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 4, 6]
    assert "eagle_aux_hidden_state_layer_ids" not in config
    out = converted("modelopt-explicit-hd32")
    n = json.loads((HD32_TARGET / "config.json").read_text())["num_hidden_layers"]
    assert out["metadata"]["eagle3.target_layers"] == [2, n // 2, n - 3]
    assert any("target_layers = [2, 4, 5]" in line for line in out["decisions"])


def test_top_level_ids_and_norm_before_residual_reach_the_gguf(converted):
    out = converted("speculators-train-hd32")
    config = json.loads((DRAFTS / "speculators-train-hd32" / "config.json").read_text())
    assert out["metadata"]["eagle3.target_layers"] == config["eagle_aux_hidden_state_layer_ids"]
    assert out["metadata"]["eagle3.norm_before_residual"] is config["norm_before_residual"] is True


def test_an_eagle31_fc_norm_is_refused_by_name(converted):
    out = converted("specforge-eagle31-hd32")
    assert not out["converted"]
    assert out["refusal"].startswith("ValueError: Can not map tensor 'fc_norm")


def test_a_draft_config_with_the_targets_layer_count_is_not_taken_for_eagle3(converted):
    """The converter recognises EAGLE-3 by ``draft_vocab_size`` and ``num_hidden_layers == 1``; NeMo Automodel's
    exports keep the target's count (8), so the draft converts as a plain Llama until its ``d2t``."""
    assert json.loads((DRAFTS / "automodel-vllm-hd32" / "config.json").read_text())["num_hidden_layers"] == 8
    out = converted("automodel-vllm-hd32")
    assert not out["converted"] and out["refusal"] == "ValueError: Can not map tensor 'd2t'"
    assert not any("Detected EAGLE-3" in line for line in out["decisions"])


def test_nothing_is_written_beside_the_draft_or_the_target(converted):
    before = (_digest(DRAFTS / "speculators-default"), _digest(FIXTURES / "targets" / "llama-tiny"))
    out = converted("speculators-default", FIXTURES / "targets" / "llama-tiny")
    assert out["converted"]
    assert (_digest(DRAFTS / "speculators-default"), _digest(FIXTURES / "targets" / "llama-tiny")) == before


def test_the_local_tokenizer_is_the_same_file_on_every_run_and_covers_the_vocabulary():
    import sentencepiece as spm

    from contracts.engines.llamacpp.target_tokenizer import sentencepiece_model

    first, second = sentencepiece_model(512), sentencepiece_model(512)
    assert hashlib.sha256(first).digest() == hashlib.sha256(second).digest()
    sp = spm.SentencePieceProcessor(model_proto=first)
    assert sp.vocab_size() == 512 and (sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2)
