"""A draft a user brings is judged as fully as a bundled one: copies of bundled drafts outside ``fixtures/`` (no
bundled reference, no ``--trainer``) get their twins' documented verdicts, ``forward-parity`` included, from a trainer
reference made on the spot by the trainer's own forward in its own environment (``contracts.references``), with the
target's real aux hidden states or, for a config-only target, synthetic ones; a contract left unjudged for want of an
input the user could give is not a pass (exit 3).

Each reference is made once per content (the user cache, keyed by the files' bytes), so the second engine and the
second run reuse it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, HD32_TARGET

from contracts.engine_spec import EngineSpec
from contracts.bundled import expected_failures
from contracts.cli import main

pytestmark = pytest.mark.xdist_group("trainer-builds")  # the trainers' environments are made once, under a lock

TWINS = ("modelopt-default-hd32", "specforge-eagle31-hd32", "speculators-train-hd32")
VLLM = "vllm==0.32.0"


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """The three drafts, the hd32 target and a config-only copy of it, copied where no manifest names them."""
    root = tmp_path_factory.mktemp("user")
    for name in TWINS:
        shutil.copytree(FIXTURES / "drafts" / name, root / f"my-{name}")
    shutil.copytree(HD32_TARGET, root / "target")
    (root / "target-config").mkdir()
    shutil.copyfile(HD32_TARGET / "config.json", root / "target-config" / "config.json")
    return root


def _check(outside: Path, draft: str, target: str, *args) -> tuple[int, dict]:
    out = outside / f"report-{draft}-{target}-{'-'.join(a.replace('=', '') for a in args)}.json"
    code = main(["check", str(outside / f"my-{draft}"), "--target", str(outside / target), "--format", "json",
                 "--output", str(out), *args])
    return code, json.loads(out.read_text())


def _documented(twin: str, engine: str) -> set[str]:
    return {cid for (name, cid) in expected_failures(EngineSpec.parse(engine)) if name == twin}


@pytest.mark.parametrize("target", ["target", "target-config"])
@pytest.mark.parametrize("twin", TWINS)
def test_a_copy_outside_fixtures_gets_its_twins_verdicts_on_sglang(outside, twin, target):
    code, doc = _check(outside, twin, target)
    by = {r["contract"]: r for r in doc["results"]}
    failed = {cid for cid, r in by.items() if r["status"] == "fail"}
    documented = _documented(twin, "sglang==0.5.23")
    assert failed == documented, doc  # with a config-only target too
    parity = by["forward-parity"]
    assert parity["status"] == "fail" and "forward-parity" in documented
    assert "made on the spot" in parity["evidence"]["reference"]
    synthetic = "synthetic inputs: the target has no layer weights here" in parity["summary"]
    assert synthetic == (target == "target-config"), parity["summary"]
    assert code == 1


@pytest.mark.parametrize("twin", TWINS)
def test_a_copy_outside_fixtures_gets_its_twins_verdicts_on_vllms_default_runner(outside, twin):
    code, doc = _check(outside, twin, "target", "--engine", VLLM)
    failed = {r["contract"] for r in doc["results"] if r["status"] == "fail"}
    assert failed == _documented(twin, VLLM), doc
    parity = next(r for r in doc["results"] if r["contract"] == "forward-parity")
    assert parity["status"] != "skip" and "made on the spot" in parity["evidence"]["reference"]
    assert code == (1 if failed else 0)


def test_a_config_only_target_still_judges_forward_parity_on_vllm(outside):
    """speculators' `train` draft, which vLLM serves as trained: synthetic aux states, the same verdict."""
    code, doc = _check(outside, "speculators-train-hd32", "target-config", "--engine", VLLM)
    parity = next(r for r in doc["results"] if r["contract"] == "forward-parity")
    assert parity["status"] == "pass" and "synthetic inputs" in parity["summary"], parity
    assert "synthetic: LlamaForCausalLM of the target's config" in parity["evidence"]["reference"]
    assert code == 0


def test_a_draft_without_a_target_is_not_judged_in_full_and_does_not_exit_0(outside, capsys):
    """hidden-width, embed-head and forward-parity need the target: the run says which input judges them, exit 3;
    --allow-not-judged accepts that."""
    draft = outside / "my-speculators-train-hd32"
    code = main(["check", str(draft), "--only", "hidden-width,embed-head,forward-parity"])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "NOT JUDGED for want of --target DIR: hidden-width, embed-head, forward-parity" in out
    code = main(["check", str(draft), "--only", "hidden-width,embed-head,forward-parity", "--allow-not-judged"])
    assert code == 0, capsys.readouterr().out


def test_check_json_says_which_input_would_judge_a_skipped_contract(outside, capsys):
    code = main(["check", str(outside / "my-specforge-eagle31-hd32"), "--only", "forward-parity", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    (parity,) = doc["results"]
    assert code == 3 and parity["status"] == "skip" and parity["needs"] == "--target DIR", parity


def test_a_bundled_draft_that_records_no_reference_makes_none(capsys):
    """The Kimi-K2.5 replay was built without a reference (its target keeps only its vocabulary tensors): no trainer
    environment is asked for one, and nothing the user could give would judge it (exit 0)."""
    code = main(["check", str(FIXTURES / "drafts" / "speculators-kimi-k25"), "--only", "forward-parity",
                 "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    (parity,) = doc["results"]
    assert parity["status"] == "skip" and "the bundled draft records none" in parity["summary"]
    assert "needs" not in parity and code == 0


def test_matrix_on_a_bundled_directory_replays_its_bundled_reference(capsys):
    """Before, matrix did not find the bundled reference from the directory: forward-parity skipped on every row."""
    code = main(["matrix", str(FIXTURES / "drafts" / "speculators-default-hd32"), "--engines", "sglang",
                 "--only", "forward-parity", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    statuses = {c["subject"]: c["status"] for c in doc["cells"] if c["contract"] == "forward-parity"}
    assert set(statuses.values()) == {"pass"}, statuses
    reference = doc["reports"][0]["results"][0]["evidence"]["reference"]
    assert reference.endswith("fixtures/references/speculators-default-hd32.safetensors") and code == 0


def test_a_draft_whose_trainer_is_unknown_is_compared_with_each_known_trainers_forward(outside, capsys):
    """speculators' library-default draft converted by hand: a flat config that names no trainer. Which trainer's
    forward the engine must match is the user's to say (exit 3, naming --trainer); the summary says which one SGLang
    computes on these weights, and what each other trainer's own code made of them. With --trainer it is judged."""
    flat = outside / "flat-default"
    assert main(["convert", "--to", "sglang", "--verbatim", "--target", str(outside / "target"),
                 str(FIXTURES / "drafts" / "speculators-default-hd32"), str(flat)]) in (0, 1)
    config = json.loads((flat / "config.json").read_text())
    del config["eagle3_contracts_conversion"]  # as a hand conversion writes it: nothing names the trainer
    (flat / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    code = main(["check", str(flat), "--target", str(outside / "target"), "--only", "forward-parity", "--format",
                 "json"])
    (parity,) = json.loads(capsys.readouterr().out)["results"]
    assert code == 3 and parity["status"] == "skip" and parity["needs"] == "--trainer NAME", parity
    assert "on these weights the engine computes what speculators 0.9.0's own forward computes" in parity["summary"]
    compared = parity["evidence"]["trainers_compared"]
    assert compared["speculators"]["status"] == "pass" and compared["specforge"]["status"] == "fail", compared
    assert "Model Optimizer's EAGLE module has no" in compared["modelopt"]["unavailable"]
    code = main(["check", str(flat), "--target", str(outside / "target"), "--only", "forward-parity", "--trainer",
                 "speculators", "--format", "json"])
    (parity,) = json.loads(capsys.readouterr().out)["results"]
    assert code == 0 and parity["status"] == "pass" and "made on the spot" in parity["evidence"]["reference"]


def test_a_config_asking_for_a_huge_vocabulary_is_not_run_through_the_trainers_forward(outside, tmp_path, capsys):
    """`vocab_size: 2000000` in a tiny draft's config: the trainer builds the config's embedding whatever the
    checkpoint holds (SpecForge's forward held 1.2 GB), so the reference is sized by what the config builds and not
    made; forward-parity says why instead."""
    draft = shutil.copytree(outside / "my-specforge-eagle31-hd32", tmp_path / "huge-vocab")
    config = json.loads((draft / "config.json").read_text())
    config["vocab_size"] = 2_000_000
    (draft / "config.json").write_text(json.dumps(config))
    out = tmp_path / "report.json"
    main(["check", str(draft), "--target", str(outside / "target"), "--only", "forward-parity", "--format", "json",
          "--output", str(out)])
    parity = json.loads(out.read_text())["results"][0]
    assert parity["status"] == "skip", parity
    assert "would hold the draft's 128 M parameters" in parity["summary"] and "memory bound" in parity["summary"]
    assert "making" not in capsys.readouterr().err  # no trainer job was started
