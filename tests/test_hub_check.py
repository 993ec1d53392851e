"""``check hf:ORG/NAME --target hf:ORG/NAME``: a published drafter judged where it lives, by the installed engine,
against the loopback stand-in of the Hub (tests/hub_standin.py): the verdicts of the local directories, the bytes it
fetched said (and equal to what left the server), a real-size drafter judged from a fraction of a percent of its
bytes, a contract that reads a tensor left unread not judged and naming --download, and a repository that cannot be
read as one line, exit 2."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import FIXTURES, HD32_TARGET

from contracts import hub
from contracts.cli import main

sys.path.insert(0, str(FIXTURES.parent / "benchmarks"))
sys.path.insert(0, str(FIXTURES.parent / "tests"))

from hub_standin import HubStandIn  # noqa: E402

SPECULATORS = FIXTURES / "drafts" / "speculators-default-hd32"


@pytest.fixture(scope="module")
def real_size(tmp_path_factory):
    """A Llama-3.1-8B-sized drafter as speculators publishes one (1.9 GB of bfloat16 shapes, sparse on disk) and a
    target of its shape holding its vocabulary tensors and first layer."""
    from bench_check import drafter, weighted_target

    root = tmp_path_factory.mktemp("real-size")
    drafter(root / "draft", hidden=4096, vocab=128256, draft_vocab=32000, heads=32, kv_heads=8, inter=14336,
            layer_prefix="layers.0", with_embed=True, ids=[1, 15, 28])
    weighted_target(root / "target")
    return root / "draft", root / "target"


@pytest.fixture
def served(real_size, tmp_path, monkeypatch):
    import huggingface_hub.constants

    repos = {"org/speculators-default-hd32": SPECULATORS, "org/llama-tiny-hd32": HD32_TARGET,
             "org/llama-3.1-8b-drafter": real_size[0], "org/converged-speculators": FIXTURES / "converged" / "speculators",
             "org/converged-target": FIXTURES / "converged" / "target"}
    with HubStandIn(repos) as stand_in:
        monkeypatch.setenv("HF_ENDPOINT", stand_in.endpoint)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
        monkeypatch.setenv("EAGLE3_CONTRACTS_HUB_CACHE", str(tmp_path / "ours"))
        hub.FETCHED.clear()
        yield stand_in


def check(capsys, *args) -> tuple[int, dict, str]:
    code = main(["check", *map(str, args), "--format", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else {}), err


def statuses(doc: dict) -> dict[str, str]:
    return {r["contract"]: r["status"] for r in doc["results"]}


def test_a_published_drafter_gets_the_verdicts_of_its_local_directory(served, capsys):
    code, doc, err = check(capsys, "hf:org/speculators-default-hd32", "--target", "hf:org/llama-tiny-hd32")
    local_code, local, _ = check(capsys, SPECULATORS, "--target", HD32_TARGET)
    assert (code, statuses(doc)) == (local_code, statuses(local)), err
    assert doc["name"] == "hf:org/speculators-default-hd32"
    fetched = doc["hub"]["draft"]
    assert fetched["commit"] == served.commit("org/speculators-default-hd32")
    assert fetched["fetched_bytes"] == served.served_bytes["org/speculators-default-hd32"] > 0
    assert doc["hub"]["target"]["fetched_bytes"] == served.served_bytes["org/llama-tiny-hd32"] > 0
    # a failure's reproduce line names the repository at the commit judged, not the local copy
    text = main(["check", "hf:org/speculators-default-hd32", "--target", "hf:org/llama-tiny-hd32", "--only",
                 "hidden-width"])
    out = capsys.readouterr().out
    commit = fetched["commit"]
    assert text == 1 and f"check hf:org/speculators-default-hd32@{commit} --target hf:org/llama-tiny-hd32@" in out
    assert "0 B fetched by this run" in out  # the second run read the cached copy


def test_a_real_size_drafter_is_judged_from_its_headers_and_small_tensors(served, real_size, capsys):
    draft, target = real_size
    code, doc, err = check(capsys, "hf:org/llama-3.1-8b-drafter", "--target", target)
    fetched = doc["hub"]["draft"]
    assert fetched["weight_bytes"] > 1.8e9 and fetched["fetched_bytes"] < 0.01 * fetched["weight_bytes"]
    assert fetched["fetched_bytes"] == served.served_bytes["org/llama-3.1-8b-drafter"]
    _, local, _ = check(capsys, draft, "--target", target)
    # what the engine's loader, its capture and its config decide is judged as on the local directory ...
    hub_status, local_status = statuses(doc), statuses(local)
    for contract in ("key-naming", "tensor-shapes", "d2t-semantics", "hidden-width", "config"):
        assert hub_status[contract] == local_status[contract], contract
    # ... and embed-head, which compares the draft's embedding with the target's, says what it needs
    embed = next(r for r in doc["results"] if r["contract"] == "embed-head")
    assert local_status["embed-head"] != "skip"
    assert embed["status"] == "skip" and embed["needs"] == "the draft's full weights (--download)"
    assert "embed_tokens.weight: not fetched" in embed["summary"]
    assert code == 3  # a contract not judged for an input the user can give is never a silent pass


@pytest.mark.parametrize("spec, message", [
    ("hf:org/no-such-drafter", "hf:org/no-such-drafter: no such repository on http://127.0.0.1:"),
    ("hf:org/speculators-default-hd32@v0.0.1", "has no revision 'v0.0.1'"),
])
def test_a_repository_that_cannot_be_read_is_one_line_exit_2(served, capsys, spec, message):
    code, doc, err = check(capsys, spec, "--target", "hf:org/llama-tiny-hd32")
    assert code == 2 and not doc
    assert err.startswith("eagle3-contracts: error: ") and message in err and err.count("\n") == 1


def test_the_plugin_judges_a_published_drafter_as_contract_items(served, tmp_path):
    import os
    import subprocess

    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-m", "contracts",
                           "--checkpoint", "hf:org/speculators-default-hd32", "--target", "hf:org/llama-tiny-hd32",
                           "--contracts-only", "key-naming,d2t-semantics,hidden-width"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert "PASSED contracts::key-naming[speculators-default-hd32]" in out, out[-3000:] + proc.stderr[-2000:]
    assert "PASSED contracts::d2t-semantics[speculators-default-hd32]" in out
    assert "FAILED contracts::hidden-width[speculators-default-hd32]" in out and proc.returncode == 1
    # its reproduce line names the repository, not the local copy
    assert "--checkpoint hf:org/speculators-default-hd32 --target hf:org/llama-tiny-hd32" in out
    missing = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "contracts",
                              "--checkpoint", "hf:org/no-such-drafter"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600)
    assert missing.returncode == 4 and "hf:org/no-such-drafter: no such repository" in missing.stderr


def test_matrix_names_a_published_drafter_and_says_what_it_fetched(served, capsys):
    code = main(["matrix", "hf:org/speculators-default-hd32", "--target", "hf:org/llama-tiny-hd32", "--engines",
                 "sglang", "--only", "key-naming,d2t-semantics", "--format", "json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 0, err
    assert doc["hub"]["draft"]["fetched_bytes"] == served.served_bytes["org/speculators-default-hd32"]
    assert "hf:org/speculators-default-hd32@" in err and "fetched by this run" in err
    assert doc["subjects"][0] == "hf:org/speculators-default-hd32"  # rows named by the spec, not the local copy


def test_convert_and_accept_take_a_published_drafter_whole(served, capsys, tmp_path):
    """The copy convert writes and the draft accept serves hold every weight: both download the repository (through
    huggingface_hub's cache) and never work on a copy read by ranges."""
    code = main(["convert", "--to", "sglang", "hf:org/speculators-default-hd32", str(tmp_path / "for-sglang"),
                 "--target", "hf:org/llama-tiny-hd32"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert str(tmp_path / "hf") in err  # converted from the downloaded snapshot
    assert (tmp_path / "for-sglang" / "model.safetensors").stat().st_size > 0
    served.served_bytes.clear()
    code = main(["accept", "hf:org/converged-speculators", "--target", "hf:org/converged-target", "--no-expectation",
                 "--prompts", "2", "--format", "json", "--output", str(tmp_path / "accept.json")])
    assert code == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "accept.json").read_text())
    assert result["mean_acceptance_length"] > 3.0
    sizes = {repo: sum(f.stat().st_size for f in served.files(repo)) for repo in ("org/converged-speculators",
                                                                                  "org/converged-target")}
    assert all(served.served_bytes[repo] >= size for repo, size in sizes.items())  # every file, whole
