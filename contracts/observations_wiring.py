"""What the engine's worker wiring left in the draft (contract ``embed-head``): plain, JSON-serialisable
records, filled by an engine adapter from the engine's own code and judged by ``contracts.checks.embed_head``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.observations import Observation


@dataclass
class HeldTensor:
    """One of the draft's two vocabulary tensors (embedding, head) as the draft holds it after the wiring."""

    param: str  # the draft's parameter name
    shape: list[int]
    dtype: str
    same_object_as: str | None  # "target:<param>" / "draft:<param>" (tied) when it IS that parameter object
    replaced: bool  # the wiring swapped the draft's parameter object for another one
    unwritten_fraction: float | None  # NaN sentinel after loading and wiring (None: no values, e.g. meta)
    written_by: list[str] = field(default_factory=list)  # file keys whose load reached this parameter
    fingerprint: dict | None = None  # contracts.fingerprint of the held values (None: no values)


@dataclass
class WiringObservation(Observation):
    engine: dict
    wiring: str  # the engine function that ran, e.g. "EagleDraftWorker.init_lm_head"
    calls: list[str]  # the draft methods the wiring called, in order
    load_lm_head_from_target: bool
    tied: bool  # the draft's lm_head module is its embed_tokens module
    draft: dict  # hidden_size, target_hidden_size (absent: None), vocab_size, draft_vocab_size as the engine built it
    target: dict  # class, dtype, hidden_size, vocab_size, tie_word_embeddings, has_weights, loaded (key -> params)
    embed: HeldTensor
    head: HeldTensor
    hot_token_id_len: int | None = None  # what the worker copied from the draft after the wiring
    error: str | None = None  # what the engine's wiring raised (the tensors are then as loaded)
    runner: str | None = None  # the vLLM model runner whose wiring ran ("v1" / "v2"; SGLang: None)

    @classmethod
    def from_dict(cls, d: dict) -> "WiringObservation":
        d = dict(d)
        d["embed"] = HeldTensor(**d["embed"])
        d["head"] = HeldTensor(**d["head"])
        return cls(**d)
