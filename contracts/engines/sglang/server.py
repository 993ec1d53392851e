"""A running SGLang server read over HTTP (``doctor``): its server-info endpoint, whose shape is taken from SGLang's own
code, since its serving loop does not run on a CPU and no test here can start one.

``/server_info`` (0.5.9 on; ``/get_server_info`` before, and kept as a deprecated alias since) returns the server
arguments flat (0.5.23: ``ServerArgs.resolved_dict()``; before: ``dataclasses.asdict``) with ``version`` and
``internal_states``, one entry per data-parallel rank: ``speculative_algorithm`` (``EAGLE3``),
``speculative_draft_model_path``, ``speculative_num_steps``, ``speculative_eagle_topk``,
``speculative_num_draft_tokens``, ``model_path``, ``served_model_name`` are top-level keys. The scheduler's
``avg_spec_accept_length`` (in each ``internal_states`` entry) is accepted draft tokens plus the bonus token per
verify round (0.5.23 ``internal_state.py``: ``spec_total_num_accept_tokens / spec_total_num_forward_ct``), so the
mean acceptance length as vLLM and llama.cpp count it; it is absent until the first decode log interval
(``decode_log_interval`` batches, 40 by default) has ended, and without speculative decoding.
"""

from __future__ import annotations

from contracts.server_facts import Endpoint, ServerFacts


def read(server: Endpoint, label: str) -> ServerFacts | None:
    """SGLang's facts, or None when the server is not SGLang (no server-info endpoint with its keys)."""
    for path in ("/server_info", "/get_server_info"):
        info = server.json(path)
        if isinstance(info, dict) and "model_path" in info and "speculative_algorithm" in info:
            break
    else:
        return None
    facts = ServerFacts(engine="sglang", label=label, version=_text(info.get("version")),
                        target=_text(info.get("model_path")),
                        served_name=_text(info.get("served_model_name")) or _text(info.get("model_path")))
    facts.read.update(version=path, target=path)
    if isinstance(info.get("tp_size"), int):
        facts.tp_size = info["tp_size"]
        facts.read["tp_size"] = path
    algorithm = _text(info.get("speculative_algorithm"))
    if algorithm:
        facts.method = algorithm.lower()
        facts.draft = _text(info.get("speculative_draft_model_path"))
        revision = _text(info.get("speculative_draft_model_revision"))
        if facts.draft and revision and revision != "main":
            facts.draft += f"@{revision}"
        steps = info.get("speculative_num_steps")
        facts.speculative_tokens = steps if isinstance(steps, int) else None
        facts.read.update(method=path, draft=path, speculative_tokens=path)
        facts.extra.update({k: info[k] for k in ("speculative_eagle_topk", "speculative_num_draft_tokens",
                                                 "decode_log_interval", "tp_size") if k in info})
        states = [s for s in info.get("internal_states") or [] if isinstance(s, dict)]
        measured = [s["avg_spec_accept_length"] for s in states
                    if isinstance(s.get("avg_spec_accept_length"), (int, float))]
        if measured:
            facts.mean_acceptance = sum(measured) / len(measured)
            facts.read["mean_acceptance"] = f"{path} internal_states[].avg_spec_accept_length"
        else:
            facts.unknown["mean_acceptance"] = (
                "SGLang reports avg_spec_accept_length once a decode log interval has ended "
                f"(every {info.get('decode_log_interval', 40)} decode batches)")
    return facts


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None
