"""What a running server says about itself over HTTP, as ``doctor`` reads it: one record (``ServerFacts``) whatever the
engine, filled by the engine's own reader (``contracts/engines/<name>/server.py``, named by its profile), and the
plain HTTP client they read with (``Endpoint``: GETs and a POST, bounded answers, nothing but the standard library).

Every fact keeps where it came from (``read``): a diagnosis says which endpoint told it what, and what it could not
learn (``unknown``: vLLM gives its configuration only on ``/server_info`` in its development mode).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field

MAX_ANSWER_BYTES = 16 << 20  # an endpoint's answer read at most (a metrics page of a large deployment is ~1 MB)
TIMEOUT_S = 10.0


class NotAServer(Exception):
    """The URL answers nothing a server of this kind would (a refused connection, not HTTP, another service)."""


@dataclass
class ServerFacts:
    """One running server: what it serves and what it measured, each fact from the server's own endpoints."""

    engine: str  # the engine profile's name
    label: str  # as a report names the engine
    version: str | None = None
    target: str | None = None  # the target as the server names it (a path or a Hub name)
    target_is_checkpoint: bool = True  # False: ``target`` names what the server loads instead (llama.cpp: a GGUF)
    draft: str | None = None  # the draft as the server names it (None: it does not say)
    method: str | None = None  # the speculative method it runs ("eagle3"; None: no speculative decoding)
    speculative_tokens: int | None = None
    served_name: str | None = None  # the model name requests give
    runner: str | None = None  # the engine path it serves on, where it says
    tp_size: int | None = None  # its tensor-parallel size, where it says (doctor judges rank-consistency at it)
    drafts: int | None = None  # draft rounds so far
    draft_tokens: int | None = None
    accepted: int | None = None  # accepted draft tokens so far
    per_position: list[float] | None = None  # acceptance rate at each draft position
    mean_acceptance: float | None = None  # mean acceptance length (1 + accepted per round), as measured
    read: dict[str, str] = field(default_factory=dict)  # fact -> the endpoint that gave it
    unknown: dict[str, str] = field(default_factory=dict)  # fact -> why the server did not say
    extra: dict = field(default_factory=dict)  # what else the server reported that a report shows

    def finish(self) -> "ServerFacts":
        """The mean acceptance length and per-position rates computed from the counters, where the server gave
        counters rather than the mean."""
        if self.mean_acceptance is None and self.drafts:
            self.mean_acceptance = 1 + (self.accepted or 0) / self.drafts
        return self

    def to_dict(self) -> dict:
        return asdict(self)


class Endpoint:
    """A server at BASE (``http://host:port``), read with GETs of bounded size."""

    def __init__(self, base: str, timeout: float = TIMEOUT_S):
        self.base = base.rstrip("/")
        self.timeout = timeout

    def _open(self, path: str, data: bytes | None = None, timeout: float | None = None):
        headers = {"Content-Type": "application/json"} if data is not None else {}
        request = urllib.request.Request(self.base + path, data=data, headers=headers,
                                         method="POST" if data is not None else "GET")
        return urllib.request.urlopen(request, timeout=timeout or self.timeout)  # noqa: S310  (a URL the user gave)

    def text(self, path: str) -> str | None:
        """The body of GET PATH, or None when the server answers it with an HTTP error (it has no such endpoint)."""
        try:
            with self._open(path) as r:
                return r.read(MAX_ANSWER_BYTES).decode("utf-8", "replace")
        except urllib.error.HTTPError:
            return None

    def json(self, path: str):
        """GET PATH as JSON, or None (no such endpoint, or not JSON)."""
        body = self.text(path)
        if body is None:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None

    def post(self, path: str, payload: dict, timeout: float | None = None):
        """POST PATH with a JSON body; its JSON answer."""
        with self._open(path, json.dumps(payload).encode(), timeout) as r:
            return json.loads(r.read(MAX_ANSWER_BYTES))


def metric_samples(text: str | None, prefix: str) -> list[tuple[str, dict, float]]:
    """(name, labels, value) of each Prometheus sample whose name starts with PREFIX, parsed by prometheus_client."""
    if not text:
        return []
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.startswith(prefix):
                    out.append((s.name, dict(s.labels), float(s.value)))
    except ValueError:  # not a metrics page
        return []
    return out


def counter(samples: list[tuple[str, dict, float]], name: str) -> float | None:
    """The sum over labels of counter NAME (with or without its ``_total`` suffix), None when absent."""
    values = [v for n, _, v in samples if n in (name, f"{name}_total")]
    return sum(values) if values else None
