"""Drafts and targets read from the Hub (``contracts.hub``) through huggingface_hub, against the loopback stand-in of
the Hub's HTTP API (tests/hub_standin.py): what is fetched (headers and the small tensors of a real-size drafter, by
ranges; every tensor of a small one), that a tensor left unread is never read as zeros, the layouts repositories are
published in, and every way a repository cannot be reached as one line that leaves nothing in the cache."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
import torch
from conftest import FIXTURES, HD32_TARGET

from contracts import hub
from contracts.checkpoint import NOT_FETCHED, Checkpoint, InputError, WeightsNotFetched, tensor_rows

sys.path.insert(0, str(FIXTURES.parent / "benchmarks"))
sys.path.insert(0, str(FIXTURES.parent / "tests"))

from hub_standin import HubStandIn  # noqa: E402

SPECULATORS = FIXTURES / "drafts" / "speculators-default-hd32"


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """The repositories served: bundled drafts and a target as published, a Llama-3.1-8B-sized sparse drafter
    (1.9 GB of shapes, 0.4 MB on disk), NeMo Automodel's layout, a pickle draft, a truncated file."""
    from bench_check import drafter

    root = tmp_path_factory.mktemp("repos")
    drafter(root / "llama-8b", hidden=4096, vocab=128256, draft_vocab=32000, heads=32, kv_heads=8, inter=14336,
            layer_prefix="layers.0", with_embed=True, ids=[1, 15, 28])
    automodel = root / "automodel" / "model" / "consolidated"
    shutil.copytree(FIXTURES / "drafts" / "automodel-raw-hd32", automodel)
    (root / "automodel" / "README.md").write_text("a NeMo Automodel training checkpoint\n")
    pickled = root / "pickled"
    pickled.mkdir()
    shutil.copy(SPECULATORS / "config.json", pickled)
    torch.save(dict(Checkpoint.open(SPECULATORS).iter_tensors()), pickled / "pytorch_model.bin")
    truncated = root / "truncated"
    shutil.copytree(SPECULATORS, truncated)
    weights = next(truncated.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:6])
    bad_json = root / "bad-json"
    shutil.copytree(SPECULATORS, bad_json)
    (bad_json / "config.json").write_text('{"hidden_size": 64,')
    return {"org/bad-json": bad_json, "org/speculators-default-hd32": SPECULATORS, "org/llama-tiny-hd32": HD32_TARGET,
            "org/llama-8b-drafter": root / "llama-8b", "org/automodel": root / "automodel",
            "org/pickled": pickled, "org/truncated": truncated, "org/gated": SPECULATORS}


@pytest.fixture
def served(repos, tmp_path, monkeypatch):
    import huggingface_hub.constants

    with HubStandIn(repos, gated=("org/gated",)) as stand_in:
        monkeypatch.setenv("HF_ENDPOINT", stand_in.endpoint)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
        monkeypatch.setenv("EAGLE3_CONTRACTS_HUB_CACHE", str(tmp_path / "ours"))
        hub.FETCHED.clear()
        yield stand_in


def test_a_small_draft_is_fetched_whole_and_reads_as_the_local_one(served):
    fetched = hub.resolve("hf:org/speculators-default-hd32")
    local, copy = Checkpoint.open(SPECULATORS), Checkpoint.open(fetched.path)
    assert copy.tensors.keys() == local.tensors.keys() and not copy.not_fetched
    for name in local.tensors:
        assert torch.equal(copy.load_tensor(name), local.load_tensor(name)), name
    assert copy.config == local.config
    # what the report says was fetched is what left the server, and a second run fetches nothing
    assert fetched.fetched_bytes == served.served_bytes["org/speculators-default-hd32"] > 0
    again = hub.resolve("hf:org/speculators-default-hd32")
    assert again.fetched_bytes == 0 and again.path == fetched.path
    assert served.served_bytes["org/speculators-default-hd32"] == fetched.fetched_bytes


def test_a_real_size_drafter_is_read_by_headers_and_small_tensors(served):
    fetched = hub.resolve("hf:org/llama-8b-drafter")
    assert fetched.weight_bytes > 1.8e9
    assert fetched.fetched_bytes == served.served_bytes["org/llama-8b-drafter"] < 0.01 * fetched.weight_bytes
    # every request for a weight file was ranged
    assert all(rng for method, path, rng in served.requests if path.endswith(".safetensors") and method == "GET")
    ckpt = Checkpoint.open(fetched.path)
    assert set(ckpt.not_fetched) == {n for n, i in ckpt.tensors.items() if i.numel > 1 << 20 and n not in ("d2t", "t2d")}
    assert "embed_tokens.weight" in ckpt.not_fetched and "layers.0.mlp.up_proj.weight" in ckpt.not_fetched
    # the small tensors read are the published ones
    d2t = ckpt.load_array("d2t")
    assert d2t.shape == (32000,) and (d2t + range(32000) == [2 * i for i in range(32000)]).all()
    assert ckpt.load_tensor("norm.weight").eq(1).all()
    # a tensor left unread is refused, never read back as the zeros of its hole
    with pytest.raises(WeightsNotFetched, match="--download"):
        ckpt.load_tensor("embed_tokens.weight")
    with pytest.raises(WeightsNotFetched):
        tensor_rows(fetched.path / "model.safetensors", "lm_head.weight")
    with pytest.raises(WeightsNotFetched):
        next(ckpt.iter_tensors())
    assert "1.9 GB drafter" in fetched.summary() and "left unread" in fetched.summary()


def test_download_fetches_every_file_through_the_hub_cache(served, tmp_path):
    fetched = hub.resolve("hf:org/speculators-default-hd32", download=True)
    assert fetched.downloaded and str(tmp_path / "hf") in str(fetched.path)
    assert fetched.fetched_bytes == served.served_bytes["org/speculators-default-hd32"] > fetched.weight_bytes
    assert not (fetched.path / NOT_FETCHED).exists()
    assert Checkpoint.open(fetched.path).tensors.keys() == Checkpoint.open(SPECULATORS).tensors.keys()


def test_a_revision_is_resolved_to_its_commit(served):
    commit = served.commit("org/speculators-default-hd32")
    by_sha = hub.resolve(f"hf:org/speculators-default-hd32@{commit}")
    by_branch = hub.resolve("hf:org/speculators-default-hd32@main")
    assert by_sha.commit == by_branch.commit == commit and by_sha.path == by_branch.path


def test_nemo_automodels_consolidated_folder_and_pickle_weights(served):
    automodel = hub.resolve("hf:org/automodel")
    assert automodel.path.name == "draft" and (automodel.path / "config.json").is_file()
    # its shard index was read to find the shards: counted among the bytes fetched, as the server sent it
    assert automodel.fetched_bytes == served.served_bytes["org/automodel"]
    assert Checkpoint.open(automodel.path).trainer_format == "automodel"
    pickled = Checkpoint.open(hub.resolve("hf:org/pickled").path)  # read as the engines read it: weights_only
    assert torch.equal(pickled.load_tensor("d2t"), Checkpoint.open(SPECULATORS).load_tensor("d2t"))


@pytest.mark.parametrize("spec, message", [
    ("hf:org/no-such-drafter", "no such repository"),
    ("hf:org/speculators-default-hd32@v9", "has no revision 'v9'"),
    ("hf:org/gated", "gated repository"),
    ("hf:org/truncated", "truncated safetensors file"),
    ("hf:org/bad-json", "invalid JSON in config.json"),
    ("hf:not a repo", "not a Hub repository"),
])
def test_an_unusable_repository_is_one_line_and_leaves_nothing(served, tmp_path, spec, message):
    with pytest.raises(InputError, match=message) as e:
        hub.resolve(spec)
    assert "\n" not in str(e.value)
    ours = tmp_path / "ours"
    assert not ours.exists() or not any(ours.rglob("*")), sorted(ours.rglob("*"))


def test_a_gated_repository_is_read_with_the_token(served, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", served.token)
    assert hub.resolve("hf:org/gated").not_fetched == 0


def test_a_hub_that_cannot_be_reached_is_one_line(served, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard: nothing listens
    with pytest.raises(InputError, match="cannot reach http://127.0.0.1:9"):
        hub.resolve("hf:org/speculators-default-hd32")


def test_a_draft_record_names_where_it_came_from(served):
    path = hub.local("hf:org/speculators-default-hd32")
    report = hub.record({"checkpoint": path, "target": None})
    assert report["name"] == "hf:org/speculators-default-hd32"
    assert report["hub"]["draft"]["commit"] == served.commit("org/speculators-default-hd32")
    assert hub.shown(path) == (f"hf:org/speculators-default-hd32@{served.commit('org/speculators-default-hd32')}",
                               "./speculators-default-hd32")
    assert json.loads(json.dumps(report))  # plain JSON


def test_an_unread_tensor_crosses_the_engine_workers_pipe_as_itself():
    """An engine worker that meets a tensor left unread answers it as such (not as an internal error of its own), and
    the client raises it again for the judging loop to mark the contract not judged."""
    from contracts.engines.worker import _answer

    class Reads:
        def load(self, **_):
            raise WeightsNotFetched("embed_tokens.weight: not fetched from hf:org/x@0123456789: rerun with --download")

    reply = _answer(Reads(), {"op": "load", "args": {}})
    assert reply == {"error": {"kind": "WeightsNotFetched", "message": "embed_tokens.weight: not fetched from "
                                                                        "hf:org/x@0123456789: rerun with --download"}}


def test_the_hub_stays_reachable_where_an_engine_turned_it_off_not_where_the_user_did(served, monkeypatch):
    """SGLang's and vLLM's in-process contexts set HF_HUB_OFFLINE for their own loads (checkpoint.offline_for_engine);
    a later hf: input in the same process (a pytest session, doctor) is still read. The user's own setting stands."""
    import huggingface_hub.constants

    from contracts.checkpoint import ENGINE_SET_OFFLINE, offline_for_engine

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv(ENGINE_SET_OFFLINE, raising=False)
    offline_for_engine()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ[ENGINE_SET_OFFLINE] == "1"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # as read at import after the engine's
    assert hub.resolve("hf:org/speculators-default-hd32").fetched_bytes > 0
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True  # put back for the engine
    monkeypatch.delenv(ENGINE_SET_OFFLINE)  # the user's own HF_HUB_OFFLINE=1
    with pytest.raises(InputError, match="offline mode is enabled"):
        hub.resolve("hf:org/llama-tiny-hd32")
