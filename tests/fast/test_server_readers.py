"""The engines' server readers (``contracts/engines/<name>/server.py``) on answers in the shapes the engines' own code
gives. SGLang's serving loop does not run on a CPU, so its server-info answers are written here from its source at
0.5.23 (``/server_info``: the server arguments flat, ``version``, ``internal_states[].avg_spec_accept_length``) and
0.5.3 (``/get_server_info`` only); vLLM's and llama.cpp's readers meet the real servers in tests/test_doctor.py."""

from __future__ import annotations

import contextlib
import sys

import pytest
from conftest import FIXTURES

from contracts.doctor import read_server
from contracts.checkpoint import InputError

sys.path.insert(0, str(FIXTURES.parent / "tests"))

import servers  # noqa: E402

SGLANG_0_5_23 = {  # http_server.py server_info(): {**build_server_info(...), "internal_states", "version", ...}
    "model_path": "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "meta-llama/Llama-3.1-8B-Instruct",
    "tp_size": 1, "speculative_algorithm": "EAGLE3",
    "speculative_draft_model_path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
    "speculative_draft_model_revision": None, "speculative_num_steps": 3, "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4, "decode_log_interval": 40, "status": "ready", "version": "0.5.23",
    "frontend": "python",
    "internal_states": [{"speculative_algorithm": "EAGLE3", "avg_spec_accept_length": 1.02,
                         "last_gen_throughput": 41.3}],
}


@pytest.fixture
def answering():
    with contextlib.ExitStack() as stack:
        yield lambda routes: stack.enter_context(servers.answering(routes))


def test_sglang_0_5_23_server_info(answering):
    facts = read_server(answering({"/server_info": SGLANG_0_5_23, "/get_server_info": SGLANG_0_5_23}))
    assert (facts.engine, facts.version, facts.method) == ("sglang", "0.5.23", "eagle3")
    assert facts.target == "meta-llama/Llama-3.1-8B-Instruct"
    assert facts.draft == "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B" and facts.speculative_tokens == 3
    assert facts.mean_acceptance == 1.02
    assert facts.read["mean_acceptance"] == "/server_info internal_states[].avg_spec_accept_length"
    assert facts.tp_size == 1 and facts.read["tp_size"] == "/server_info"  # doctor judges rank-consistency above 1


def test_sglang_0_5_3_has_only_get_server_info_and_no_measure_before_a_log_interval(answering):
    old = {k: v for k, v in SGLANG_0_5_23.items() if k not in ("frontend",)}
    old.update(version="0.5.3", internal_states=[{"speculative_algorithm": "EAGLE3"}])
    facts = read_server(answering({"/get_server_info": old}))
    assert (facts.engine, facts.version) == ("sglang", "0.5.3") and facts.read["version"] == "/get_server_info"
    assert facts.mean_acceptance is None and "every 40 decode batches" in facts.unknown["mean_acceptance"]


def test_sglang_without_speculative_decoding(answering):
    plain = {**SGLANG_0_5_23, "speculative_algorithm": None, "internal_states": [{}]}
    facts = read_server(answering({"/server_info": plain}))
    assert facts.engine == "sglang" and facts.method is None


def test_a_server_of_none_of_the_engines(answering):
    with pytest.raises(InputError, match="answers HTTP but is not a server of SGLang, vLLM, llama.cpp"):
        read_server(answering({"/version": {"version": "1.0"}}))  # a /version alone is not vLLM's
