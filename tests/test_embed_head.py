"""embed-head on SGLang 0.5.23, judged after the engine's own ``EagleDraftWorker.init_lm_head``: the trainers'
drafts pass with evidence of where the served embedding and head came from; every known way to serve the wrong
one fails with evidence and a fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import DRAFTS, TARGET, tree_digest

H, VOCAB, DRAFT_VOCAB = 64, 512, 64


@pytest.mark.parametrize("name", ["specforge", "speculators-default", "speculators-train"])
def test_trainer_drafts_pass_naming_the_sources(name, run_contract):
    result = run_contract(DRAFTS[name], "embed-head")
    assert result.status == "pass", result
    ev = result.evidence
    assert ev["wiring"]["calls"] == ["set_embed"]
    assert ev["embedding"]["from"] == "target (set_embed)"
    assert ev["embedding"]["same_object_as"] == "target:model.embed_tokens.weight"
    assert ev["embedding"]["served_equals_target"] is True
    assert ev["head"]["from"] == "checkpoint"
    assert ev["head"]["served_equals_checkpoint"] is True
    assert "head: checkpoint (trained [64, 64] kept)" in result.summary


@pytest.mark.parametrize("name", ["speculators-default", "speculators-train"])
def test_speculators_frozen_embedding_equals_the_targets(name, run_contract):
    cmp = run_contract(DRAFTS[name], "embed-head").evidence["embedding"]["checkpoint_vs_target"]
    assert cmp["comparable"] and cmp["rows_differing"] == 0 and cmp["max_abs_diff"] == 0.0


def test_trained_reduced_head_replaced_when_draft_vocab_size_is_null(broken, run_contract):
    result = run_contract(broken("specforge", config={"draft_vocab_size": None}), "embed-head")
    assert result.status == "fail"
    assert result.evidence["wiring"]["calls"] == ["set_embed_and_head"]
    assert result.evidence["head"]["from"] == "target (set_embed_and_head)"
    assert result.evidence["head"]["same_object_as"] == "target:lm_head.weight"
    assert "trained `lm_head.weight` [64, 64] is replaced by the target's head [512, 64]" in result.summary
    assert "set `draft_vocab_size: 64`" in result.fix and "d2t" in result.fix


def test_trained_full_vocab_head_replaced_when_draft_vocab_size_is_null(broken, run_contract):
    path = broken("specforge", remove=["d2t", "t2d"], replace={"lm_head.weight": torch.randn(VOCAB, H).bfloat16()},
                  config={"draft_vocab_size": None})
    result = run_contract(path, "embed-head")
    assert result.status == "fail"
    assert result.evidence["head"]["from"] == "target (set_embed_and_head)"
    assert "set `draft_vocab_size: 512`" in result.fix


def test_head_missing_though_draft_vocab_size_is_set(broken, run_contract):
    result = run_contract(broken("specforge", remove=["lm_head.weight"]), "embed-head")
    assert result.status == "fail"
    assert result.evidence["head"]["from"] == "never written (random)"
    assert result.evidence["head"]["checkpoint_tensor"] is None
    assert "random head" in result.summary and "draft_vocab_size is 64" in result.summary
    assert "save the trained head as `lm_head.weight` [64, 64]" in result.fix


def test_head_missing_is_caught_without_a_target(broken):
    from contracts.subject import Subject

    subject = Subject("no-target", broken("specforge", remove=["lm_head.weight"]))
    (result,) = subject.run(["embed-head"])
    assert result.status == "fail" and result.evidence["head"]["from"] == "never written (random)"
    (pristine,) = Subject("no-target", DRAFTS["specforge"]).run(["embed-head"])
    assert pristine.status == "skip" and "--target" in pristine.summary


def test_tied_embeddings_with_a_separate_lm_head(broken, run_contract):
    result = run_contract(broken("speculators-default", config={"tie_word_embeddings": True}), "embed-head")
    assert result.status == "fail"
    assert result.evidence["wiring"]["tied"] is True
    assert result.evidence["head"]["from"] == "the target's embedding, tied (set_embed)"
    assert "trained `lm_head.weight` [64, 64] is dropped" in result.summary
    assert "tie_word_embeddings: false" in result.fix


def _wider_target_config(**more):
    # target_hidden_size != hidden_size: fc takes 3 x 128 inputs (the tensor must fit, or the load fails first)
    return {"replace": {"fc.weight": torch.randn(H, 3 * 128)}, "config": {"target_hidden_size": 128, **more}}


def test_embedding_silently_not_shared_leaves_it_random(broken, run_contract):
    """specforge saves no embed_tokens; set_embed returns without a word when target_hidden_size != hidden_size."""
    change = _wider_target_config()
    change["replace"]["fc.weight"] = change["replace"]["fc.weight"].bfloat16()
    result = run_contract(broken("specforge", **change), "embed-head")
    assert result.status == "fail"
    assert result.evidence["wiring"]["calls"] == ["set_embed"]
    assert result.evidence["embedding"]["from"] == "never written (random)"
    assert result.evidence["embedding"]["same_object_as"] is None
    assert "set_embed returned without sharing because target_hidden_size (128) != hidden_size (64)" in result.summary
    assert "save the embedding the draft was trained with as `embed_tokens.weight` [512, 64]" in result.fix


def test_embedding_not_shared_but_saved_is_the_checkpoints(broken, run_contract):
    result = run_contract(broken("speculators-default", **_wider_target_config()), "embed-head")
    assert result.status == "pass", result
    assert result.evidence["embedding"]["from"] == "checkpoint"
    assert result.evidence["embedding"]["served_equals_checkpoint"] is True


def test_a_changed_embedding_the_trainer_froze_is_unused_on_sglang_which_serves_the_targets(broken, run_contract):
    """speculators trains with the verifier's embedding frozen (embed_requires_grad: false): the draft trained with
    the target's embedding, which SGLang serves; the differing saved one (an exporter's) goes unused."""
    embed = load_file(DRAFTS["speculators-default"] / "model.safetensors")["embed_tokens.weight"].clone()
    embed[7] += 0.5
    result = run_contract(broken("speculators-default", replace={"embed_tokens.weight": embed}), "embed-head")
    assert result.status == "pass", result
    assert "differs and goes unused: the draft trained with the target's, frozen" in result.summary
    assert "embed_requires_grad: false" in result.evidence["embedding"]["trained_with"]


def test_a_changed_trained_embedding_fails_with_the_differing_rows(broken, run_contract):
    embed = load_file(DRAFTS["speculators-default"] / "model.safetensors")["embed_tokens.weight"].clone()
    embed[7] += 0.5
    embed[300] -= 0.25
    result = run_contract(broken("speculators-default", replace={"embed_tokens.weight": embed},
                                 config={"embed_requires_grad": True}), "embed-head")
    assert result.status == "fail"
    cmp = result.evidence["embedding"]["checkpoint_vs_target"]
    assert cmp["rows_differing"] == 2 and cmp["first_differing_row"] == 7 and cmp["max_abs_diff"] == 0.5
    assert result.evidence["embedding"]["from"] == "target (set_embed)"
    assert "2 of 512 rows differ, first row 7" in result.summary
    assert "frozen" in result.fix


def test_target_without_weights_judges_structure_and_skips_values(tmp_path, broken, run_contract):
    target = tmp_path / "target-config-only"
    target.mkdir()
    shutil.copy(TARGET / "config.json", target / "config.json")
    result = run_contract(DRAFTS["speculators-default"], "embed-head", target=target)
    assert result.status == "pass", result
    assert result.evidence["value_checks"].startswith("skipped: the target directory has no *.safetensors")
    assert result.evidence["embedding"]["from"] == "target (set_embed)"
    assert result.evidence["embedding"]["checkpoint_vs_target"] == "skipped: no target weights"
    replaced = run_contract(broken("specforge", config={"draft_vocab_size": None}), "embed-head", target=target)
    assert replaced.status == "fail" and "is replaced by the target's head" in replaced.summary


def test_unbuildable_target_skips_with_the_engine_error(tmp_path, run_contract):
    target = tmp_path / "odd-target"
    target.mkdir()
    cfg = json.loads((TARGET / "config.json").read_text())
    cfg["architectures"] = ["NoSuchForCausalLM"]
    (target / "config.json").write_text(json.dumps(cfg))
    result = run_contract(DRAFTS["specforge"], "embed-head", target=target)
    assert result.status == "skip" and "cannot build the target" in result.summary


def test_nothing_is_written_into_the_checkpoint_or_target(run_contract):
    before = {p: tree_digest(p) for p in (DRAFTS["speculators-train"], TARGET)}
    run_contract(DRAFTS["speculators-train"], "embed-head")
    assert {p: tree_digest(p) for p in before} == before


def test_observation_round_trips_through_json():
    from contracts.engines.sglang.wiring import observe_embed_head
    from contracts.observations_wiring import WiringObservation

    obs = observe_embed_head(DRAFTS["specforge"], TARGET)
    again = WiringObservation.from_dict(json.loads(json.dumps(obs.to_dict())))
    assert again == obs


def test_chunked_fingerprints_match_whole_tensor_and_find_the_row(tmp_path):
    from contracts.fingerprint import (compare_file_tensors, file_chunks, fingerprint, first_differing_rows,
                                       tensor_chunks)

    a = torch.randn(100, 8)
    b = a.clone()
    b[42, 3] += 1e-3
    save_file({"w": a}, tmp_path / "a.safetensors")
    save_file({"w": b}, tmp_path / "b.safetensors")
    whole = fingerprint(tensor_chunks(a, 16), "float32", 16)
    chunked = fingerprint(file_chunks(tmp_path / "a.safetensors", "w", 16), "float32", 16)
    assert whole == chunked and len(whole["chunks"]) == 7
    other = fingerprint(file_chunks(tmp_path / "b.safetensors", "w", 16), "float32", 16)
    assert first_differing_rows(whole, other) == [32, 48]
    cmp = compare_file_tensors((tmp_path / "a.safetensors", "w"), (tmp_path / "b.safetensors", "w"), "float32")
    assert cmp["rows_differing"] == 1 and cmp["first_differing_row"] == 42
    # rounded to bfloat16 the 1e-3 change on a value of order 1 may vanish: compared in the coarser dtype
    assert compare_file_tensors((tmp_path / "a.safetensors", "w"), (tmp_path / "a.safetensors", "w"),
                                "bfloat16")["rows_differing"] == 0


def test_a_failure_of_the_suites_own_replay_is_not_judged(monkeypatch, run_contract):
    """SGLang 0.5.3.post2/.post3 ship ``eagle_worker_v2`` without ``EagleDraftWorker``; the adapter's replay raised
    an AttributeError of its own there and embed-head read the untouched draft as one whose embedding the engine
    never wrote (a false fail in the compatibility table). A replay that cannot run on a release is not judged."""
    import types

    from contracts.engines.sglang import shims

    real = shims.import_with_kernel_stand_in
    monkeypatch.setattr(shims, "import_with_kernel_stand_in", lambda name, optional=False: types.ModuleType(name)
                        if name.endswith("eagle_worker_v2") else real(name, optional=optional))
    monkeypatch.setattr(shims, "import_eagle_worker_v1", lambda: types.ModuleType("eagle_worker_of_no_release"))
    result = run_contract(DRAFTS["specforge"], "embed-head")
    assert result.status == "skip", result
    assert result.summary.startswith("not judged: this suite's replay of SGLang's EAGLEWorker.__init__")
    assert "AttributeError" in result.evidence["replay_error"]


def test_an_error_is_the_engines_only_when_its_own_code_raised_it(tmp_path):
    import sglang

    from contracts.engines.errors import raised_by_engine

    def raise_from(filename):
        try:
            exec(compile("raise RuntimeError('x')", filename, "exec"))  # noqa: S102
        except RuntimeError as e:
            return e

    engine_file = str(Path(sglang.__file__).parent / "srt" / "speculative" / "eagle_worker.py")
    assert raised_by_engine(raise_from(engine_file), "sglang")
    assert not raised_by_engine(raise_from(engine_file), "vllm")
    assert not raised_by_engine(raise_from(str(Path(__file__))), "sglang")  # neither: not the engine's
    from contracts.engines import errors
    assert not raised_by_engine(raise_from(errors.__file__), "sglang")


@pytest.mark.parametrize("head_shared", [False, True])
def test_a_target_loaded_on_meta_gives_the_observation_its_values_give(head_shared, broken, monkeypatch):
    """Above ``META_VOCAB_BYTES`` (a Llama-3.1-8B target's embedding and head: 2 GB, 9.6 GB at the peak of loading
    them into SGLang's own target model) the target's vocabulary is loaded on ``meta`` and the wiring handed
    stand-ins; the held values are the file tensors its loader wrote whole. Forced here on the tiny target: the
    same observation, parameter identities and checksums, as loading its values (``head_shared``: the draft's
    ``draft_vocab_size`` null, so the target's head is shared too)."""
    from contracts.engines.sglang import wiring

    draft = broken("specforge", config={"draft_vocab_size": None}) if head_shared else DRAFTS["specforge"]
    real = wiring.observe_embed_head(draft, TARGET)
    monkeypatch.setenv("EAGLE3_CONTRACTS_META_VOCAB_MB", "0")
    meta = wiring.observe_embed_head(draft, TARGET)
    for role in ("embed", "head"):
        a, b = getattr(real, role), getattr(meta, role)
        assert (a.same_object_as, a.replaced, a.shape, a.dtype, a.written_by) == \
            (b.same_object_as, b.replaced, b.shape, b.dtype, b.written_by)
        assert a.fingerprint == b.fingerprint and a.unwritten_fraction == b.unwritten_fraction
    assert meta.embed.same_object_as == "target:model.embed_tokens.weight"
    assert meta.head.same_object_as == ("target:lm_head.weight" if head_shared else None)
    assert (meta.calls, meta.target["loaded"]) == (real.calls, real.target["loaded"])
