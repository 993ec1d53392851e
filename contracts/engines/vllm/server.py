"""A running vLLM server read over HTTP (``doctor``): ``/version``, ``/v1/models``, the Prometheus ``/metrics`` and, in its
development mode (``VLLM_SERVER_DEV_MODE=1``), ``/server_info``.

``/version`` is ``{"version": "0.32.0"}``; each ``/v1/models`` entry's ``root`` is the target's path as the server
loaded it (``base_model.model_path``, whatever ``--served-model-name`` says). The speculative counters
(``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total``,
``..._num_accepted_tokens_per_pos_total{position}``; present at zero from the start when speculative decoding is on)
give the mean acceptance length, 1 + accepted per draft round. Only ``/server_info?config_format=json`` names the
draft (``vllm_config.speculative_config.model``, ``.method``, ``.num_speculative_tokens``) and the device; outside
the development mode it answers 404. No endpoint names the model runner: a CPU server runs Model Runner V1 (V2 needs
Triton), which the device says; elsewhere the release's default path is judged and the report says so.
"""

from __future__ import annotations

from contracts.server_facts import Endpoint, ServerFacts, counter, metric_samples


def read(server: Endpoint, label: str) -> ServerFacts | None:
    """vLLM's facts, or None when the server is not vLLM (no ``/version`` beside vLLM's metrics)."""
    version = server.json("/version")
    if not isinstance(version, dict) or not isinstance(version.get("version"), str):
        return None
    metrics = server.text("/metrics")
    if metrics is None or "vllm:" not in metrics:
        return None
    facts = ServerFacts(engine="vllm", label=label, version=version["version"])
    facts.read["version"] = "/version"
    models = server.json("/v1/models")
    if isinstance(models, dict) and models.get("data"):
        first = models["data"][0]
        facts.target, facts.served_name = first.get("root") or first.get("id"), first.get("id")
        facts.read["target"] = "/v1/models root"
    samples = [s for s in metric_samples(metrics, "vllm:spec_decode_") if not s[0].endswith("_created")]
    if samples:
        facts.method = "speculative"
        facts.read["method"] = "/metrics vllm:spec_decode_*"
        facts.drafts = int(counter(samples, "vllm:spec_decode_num_drafts") or 0)
        facts.draft_tokens = int(counter(samples, "vllm:spec_decode_num_draft_tokens") or 0)
        facts.accepted = int(counter(samples, "vllm:spec_decode_num_accepted_tokens") or 0)
        per_pos = sorted((int(labels.get("position", -1)), v) for n, labels, v in samples
                         if n.startswith("vllm:spec_decode_num_accepted_tokens_per_pos"))
        if facts.drafts:
            facts.per_position = [round(v / facts.drafts, 4) for _, v in per_pos]
            facts.read["mean_acceptance"] = "/metrics vllm:spec_decode_*"
        if per_pos:
            facts.speculative_tokens = len(per_pos)
            facts.read["speculative_tokens"] = "/metrics (positions counted)"
    info = server.json("/server_info?config_format=json")
    config = info.get("vllm_config") if isinstance(info, dict) else None
    if isinstance(config, dict):
        spec = config.get("speculative_config") if isinstance(config.get("speculative_config"), dict) else {}
        if spec:
            facts.method = str(spec.get("method") or facts.method)
            facts.draft = spec.get("model") or None
            tokens = spec.get("num_speculative_tokens")
            facts.speculative_tokens = tokens if isinstance(tokens, int) else facts.speculative_tokens
            facts.read.update(method="/server_info", draft="/server_info", speculative_tokens="/server_info")
        model = (config.get("model_config") or {}).get("model") if isinstance(config.get("model_config"), dict) else None
        if model:
            facts.target = model
            facts.read["target"] = "/server_info"
        parallel = config.get("parallel_config")
        size = parallel.get("tensor_parallel_size") if isinstance(parallel, dict) else None
        if isinstance(size, int):
            facts.tp_size = size
            facts.read["tp_size"] = "/server_info"
        device = (config.get("device_config") or {}).get("device") if isinstance(config.get("device_config"),
                                                                                 dict) else None
        if str(device) == "cpu":
            facts.runner = "v1"
            facts.read["runner"] = "/server_info device cpu (Model Runner V2 needs Triton: a CPU server runs V1)"
    else:
        facts.unknown["draft"] = ("vLLM names its draft only on /server_info, in its development mode "
                                  "(VLLM_SERVER_DEV_MODE=1): give --draft")
        facts.unknown["runner"] = "vLLM does not report its model runner: the release's default path is judged " \
                                  "(--runner says another)"
    return facts.finish()
