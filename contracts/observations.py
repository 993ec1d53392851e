"""What an engine adapter reports back: plain, JSON-serialisable records of what the engine's own code did.

This is the narrow seam between engines and checks: an adapter fills these from the engine's real code
(in-process for the pinned engine, or in a subprocess inside another engine version's environment);
the checks judge them and never import an engine.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


class Observation:
    """Base of the top-level observations an adapter returns: plain data that survives JSON."""

    def to_dict(self) -> dict:
        return asdict(self)  # type: ignore[call-overload]  # every subclass is a dataclass


class SurfaceObservation(Observation, dict):
    """An engine release's EAGLE-3 contract surface as a plain dict (``to_dict`` returns it)."""

    def to_dict(self) -> dict:
        return dict(self)


@dataclass
class LoadCall:
    """One call the engine's ``load_weights`` made into a parameter's weight loader."""

    param: str
    shard: str | None = None
    error: str | None = None  # what the engine raised, e.g. its shape assertion
    written: int | None = None  # elements of the parameter this call wrote (None: not measured)


@dataclass
class TensorFate:
    """What became of one checkpoint tensor inside the engine's ``load_weights``."""

    key: str
    shape: list[int]
    dtype: str
    calls: list[LoadCall] = field(default_factory=list)
    side_channel: str | None = None  # e.g. "hot_token_id" for d2t

    @property
    def reached(self) -> list[str]:
        return [c.param for c in self.calls if c.error is None]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def dropped(self) -> bool:
        return not self.calls and self.side_channel is None


@dataclass
class ParamState:
    """One engine parameter after loading: shape, dtype and how much of it the checkpoint wrote."""

    name: str
    shape: list[int]
    dtype: str
    unwritten_fraction: float  # 1.0 = never written (still the NaN sentinel), 0.0 = fully written
    shared_from_target: str | None = None  # the engine's wiring that replaces it (e.g. "set_embed")
    read: bool | None = None  # a decoder-layer parameter: does the engine's forward read it (None: not observed)


@dataclass
class RenameProbe:
    """The engine's verdict on one candidate fix for a dropped tensor, obtained by loading it again."""

    key: str
    candidate: str  # a new tensor name, or "" when the fix is a config change
    config_change: dict | None
    reached: list[str]


@dataclass
class LoadObservation(Observation):
    engine: dict  # {"name", "version"}
    draft_class: str
    config: dict  # the draft config the engine built the model from (after its own config handling)
    model_dtype: str
    tensors: list[TensorFate]
    params: list[ParamState]
    load_error: str | None = None  # an exception that escaped load_weights itself
    probes: list[RenameProbe] = field(default_factory=list)
    device: str = "cpu"  # "cpu": values traced with a NaN sentinel; "meta": copy regions counted, no values
    hot_token_id: list | None = None  # the engine's draft->target map, exactly as it computed it
    hot_token_id_dtype: str | None = None
    is_eagle3_draft: bool | None = None  # draft_class is an EAGLE-3 draft class (not e.g. the target's LlamaForCausalLM)
    # a setting under which the engine builds exactly what the checkpoint holds and writes every parameter (observed by
    # loading it again): the one setting that explains a list of never-written parameters
    config_fix: dict | None = None
    reads_not_observed: str | None = None  # why no forward could say which layer parameters the engine reads
    reads_observed_on: str | None = None  # where the reads were observed when not on the checkpoint's own weights
    # the engine was given a copy of the pair, not the checkpoint itself (a real-size pair scaled down), read back in
    # the checkpoint's numbers: what it was
    observed_on: str | None = None

    @classmethod
    def from_dict(cls, d: dict) -> "LoadObservation":
        d = dict(d)
        d["tensors"] = [TensorFate(**{**t, "calls": [LoadCall(**c) for c in t["calls"]]}) for t in d["tensors"]]
        d["params"] = [ParamState(**p) for p in d["params"]]
        d["probes"] = [RenameProbe(**p) for p in d.get("probes", [])]
        return cls(**d)

    def fate(self, key: str) -> TensorFate:
        return next(t for t in self.tensors if t.key == key)

    def param(self, name: str) -> ParamState:
        return next(p for p in self.params if p.name == name)


@dataclass
class PathObservation(Observation):
    """Which of the engine release's code paths serves the draft (vLLM's model runner, SGLang's speculative
    worker): the one a GPU deployment takes by default, found from the release's own code, and the one judged."""

    engine: dict
    kind: str  # "runner" (vLLM: Model Runner V1 / V2) or "worker" (SGLang: its speculative worker class)
    judged: str  # "v1" / "v2" (vLLM), or the worker class (SGLang)
    label: str  # what reports print, e.g. "Model Runner V2"
    default: str  # what a GPU deployment of this release takes by default for this draft
    default_label: str  # the default, as reports print it
    default_why: str  # how the release's own code decides it
    asked: str | None = None  # the path asked for (``--runner``); None: the default
    available: list = field(default_factory=list)  # the paths this release has (vLLM runners)

    @property
    def is_default(self) -> bool:
        return self.judged == self.default


@dataclass
class AuxCaptureObservation(Observation):
    """What the engine hands the draft as target hidden states (hidden-width), and how it was learned."""

    engine: dict
    target_architecture: str
    num_target_layers: int | None = None
    target_hidden_size: int | None = None
    target_class: str | None = None
    hook: str | None = None  # "implemented", "missing", "delegates ..." (from the engine's class)
    hook_name: str | None = None  # the engine's capture interface a target class must implement, as a fix names it
    hook_since: str | None = None  # the engine release that gained the hook for this target class, where one did
    evidence: str = "static"  # "observed": a tiny target forward ran; "static": the registry only
    evidence_reason: str | None = None
    tiny_target: str | None = None
    use_aux_hidden_state: bool | None = None  # the engine's reading of the draft's eagle_config
    aux_layer_ids: list | None = None  # explicit ids the engine read (None: its default)
    configure_error: str | None = None  # what the engine raised when wiring capture
    layers_to_capture: list | None = None  # engine state after its hook: layer indices whose input is captured
    hf_indices: list | None = None  # transformers hidden_states index of each captured tensor (when verifiable)
    hidden_width: int | None = None  # width of the hidden states the target handed over
    tiny_hidden_size: int | None = None
    fc_in_features: int | None = None
    fc_ran: bool | None = None
    draft_forward_error: str | None = None
    ids_for_trainer_layers: list | None = None  # explicit ids that make the engine capture the trainer's layers
    ids_unreachable: str | None = None  # why no ids make the engine capture the trainer's layers (observed)
    ids_key: str | None = None  # where the engine reads explicit ids (None: eagle_config.eagle_aux_hidden_state_layer_ids)
    hf_indices_from: str | None = None  # how hf_indices were verified (None: against transformers' hidden_states)
    runner: str | None = None  # the vLLM model runner whose reading and wiring this is ("v1" / "v2")
    wiring: str | None = None  # the engine functions that read the ids and wired the capture


@dataclass
class ConfigObservation(Observation):
    """How the engine reads a draft config (config): dispatch, switches it honours, the rope it applies."""

    engine: dict
    architectures: list | None = None
    draft_class: str | None = None
    is_eagle3_draft: bool | None = None
    dispatch_error: str | None = None
    engine_dtype: str | None = None
    target_engine_dtype: str | None = None  # the target's dtype under --dtype auto, by the engine's rule
    switches: dict = field(default_factory=dict)  # key -> {"value", "honoured", "max_abs_change_when_flipped"}
    probed_on: str | None = None  # the checkpoint's weights, or a scaled-down copy for real-size drafts
    rope: dict | None = None  # {"applied", "trained", "same"}
    switches_not_probed: str | None = None  # why the switches could not be flipped here (no forward runs)
    window: dict | None = None  # the draft's attention window and whether the engine applies it (window_effect)
    forward_error: str | None = None  # the engine's own forward of this draft raised (even on seeded weights)


@dataclass
class ForwardObservation(Observation):
    """The engine's draft forward on a trainer's reference inputs (forward-parity)."""

    engine: dict
    trainer: str | None = None
    engine_dtype: str | None = None
    compute_dtype: str | None = None
    reference_logits: list | None = None  # [positions][draft vocab], the trainer's own forward
    engine_logits: list | None = None  # [positions][draft vocab], the engine's draft forward
    reference_map: list | None = None  # draft id -> target id, as the trainer defines d2t
    engine_map: list | None = None  # draft id -> target id, the engine's hot_token_id
    max_abs_diff: float | None = None
    tolerance: float | None = None
    tolerance_why: str | None = None
    error: str | None = None
    skip_reason: str | None = None  # the engine cannot run this replay here (e.g. a head size its CPU kernel lacks)
    runner: str | None = None  # the vLLM model runner whose wiring fed the draft ("v1" / "v2"; SGLang: None)
    # draft steps after the first (a multi-step reference): [step k - 1][anchor][draft vocab] for k = 1..K-1, the
    # anchors whose step k has a ground-truth token (0..T-1-k); the trainer's TTT step k and the engine's
    reference_chain: list | None = None
    engine_chain: list | None = None
    chain_path: str | None = None  # how the engine's later steps were run, in words
    chain_loop: str | None = None  # the engine's own loop the later steps stand for, as a verdict names it


@dataclass
class RankObservation(Observation):
    """The drafter each of N tensor-parallel ranks builds (rank-consistency): the engine's own wiring run in every rank
    (``how``: N processes over gloo, or the engine's shard-range functions in one process for a TP size beyond what
    this machine runs), per rank and per vocabulary role (``embed`` / ``lm_head``): the engine's decision ("shared":
    the target's module; "kept": the draft's own), the global rows the rank holds, and fingerprints
    (``contracts.fingerprint``) of what the ranks serve together; beside them the TP=1 candidates, the draft's own
    tensor and the target's, cast as the engine serves them."""

    engine: dict
    tp_size: int
    how: str  # "processes" (N ranks ran) or "shard-ranges" (one process, the engine's shard functions per rank)
    runner: str | None = None  # the vLLM model runner whose decisions these are
    ranks: list = field(default_factory=list)  # [{"rank", "embed": {"decision", "rows", "target_rows", "shard", "served"},
    #                                             "lm_head": {...}, "aux_layer_ids", "peak_rss_mb"}]
    candidates: dict = field(default_factory=dict)  # role -> {"own": fingerprint | None, "target": fingerprint | None}
    wiring: str | None = None  # the engine functions that decided, in each rank
    seconds: float | None = None
    error: str | None = None  # what a rank met building this draft (with the rank), as ``error_kind`` says
    error_kind: str | None = None  # "EngineBuildError" / "TargetBuildError" (the engine's refusal) or "ReplayError"
