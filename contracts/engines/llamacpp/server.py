"""A running llama.cpp server read over HTTP (``doctor``): ``/props``, ``/slots``, ``/v1/models`` and the Prometheus
``/metrics`` (served when the server runs with ``--metrics``).

``/props`` names the target's GGUF (``model_path``) and the build (``build_info``, ``b<number>-<commit>``; the
``xllamacpp`` wheels report ``b0-unknown``); ``/slots`` says whether a slot speculates (``speculative``). The
speculative counters (``llamacpp:spec_decode_num_drafts_total``: verification steps, ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total``, ``..._num_accepted_tokens_per_pos_total{position}``) give the mean acceptance
length, 1 + accepted per step, as ``accept --engine llamacpp`` reads it. No endpoint names the draft, its ``n_max``, or
the Hugging Face checkpoints the GGUFs were converted from: ``doctor`` asks for ``--draft`` and ``--target``.
"""

from __future__ import annotations

import re

from contracts.server_facts import Endpoint, ServerFacts, counter, metric_samples

BUILD = re.compile(r"^b(\d+)")


def read(server: Endpoint, label: str) -> ServerFacts | None:
    """llama.cpp's facts, or None when the server is not llama.cpp's (no ``/props`` with its keys)."""
    props = server.json("/props")
    if not isinstance(props, dict) or "build_info" not in props or "model_path" not in props:
        return None
    facts = ServerFacts(engine="llamacpp", label=label, target=props.get("model_path") or None,
                        target_is_checkpoint=False)
    facts.read["target"] = "/props model_path (a GGUF)"
    build = BUILD.match(str(props.get("build_info") or ""))
    if build and int(build.group(1)) > 0:
        facts.extra["build_number"] = int(build.group(1))
        facts.read["version"] = "/props build_info"
    else:
        facts.unknown["version"] = (f"/props build_info is {props.get('build_info')!r} (a build that does not number "
                                    "itself, as the xllamacpp wheels): name the release with --engine llamacpp==X")
    facts.unknown["draft"] = "llama.cpp's server names no draft over HTTP: give --draft (the checkpoint it was " \
                             "converted from)"
    models = server.json("/v1/models")
    if isinstance(models, dict) and models.get("data"):
        facts.served_name = str(models["data"][0].get("id") or "") or None
    slots = server.json("/slots")
    speculative = isinstance(slots, list) and any(isinstance(s, dict) and s.get("speculative") for s in slots)
    metrics = server.text("/metrics")
    samples = metric_samples(metrics, "llamacpp:spec_decode_")
    if samples:
        facts.drafts = int(counter(samples, "llamacpp:spec_decode_num_drafts") or 0)
        facts.draft_tokens = int(counter(samples, "llamacpp:spec_decode_num_draft_tokens") or 0)
        facts.accepted = int(counter(samples, "llamacpp:spec_decode_num_accepted_tokens") or 0)
        per_pos = sorted((int(labels.get("position", -1)), v) for n, labels, v in samples
                         if n.startswith("llamacpp:spec_decode_num_accepted_tokens_per_pos"))
        if facts.drafts and per_pos:
            facts.per_position = [round(v / facts.drafts, 4) for _, v in per_pos]
        facts.read.update(mean_acceptance="/metrics llamacpp:spec_decode_*")
    elif metrics is None:
        facts.unknown["mean_acceptance"] = "/metrics is not served (start the server with --metrics)"
    types = {str((s.get("params") or {}).get("speculative.types")) for s in slots or [] if isinstance(s, dict)
             and isinstance(s.get("params"), dict) and (s["params"].get("speculative.types") or "none") != "none"}
    if speculative or facts.drafts:
        facts.method = ",".join(sorted(types)) or "speculative"
        facts.read["method"] = "/slots" if speculative else "/metrics"
    facts.unknown["speculative_tokens"] = "llama.cpp's server does not report its draft n_max over HTTP"
    return facts.finish()
