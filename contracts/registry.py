"""How a contract is declared, identified and reported.

A contract is a small function from a ``Subject`` (a draft checkpoint, its target, and lazily gathered
engine observations) to a ``Result``. Contracts register under a stable id (the README's table); every selected
contract runs and every result is collected, failures included, as in schemathesis' checks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Protocol

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
STATUSES = (PASS, FAIL, WARN, SKIP)


@dataclass
class Result:
    contract: str
    status: str
    summary: str
    evidence: dict = field(default_factory=dict)
    fix: str | None = None
    # for a failure: the failing contracts it follows from (their failure explains this one); [] = a root cause
    follows_from: list[str] | None = None
    # for a skip: the input the user could give that would judge it ("--target DIR", "--trainer NAME", "the target's
    # weights"); such a skip is not a pass (the run exits NOT_JUDGED unless the user allows it)
    needs: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.needs is None:
            del d["needs"]
        if self.follows_from is None:
            del d["follows_from"]
        else:
            d["root_cause"] = not self.follows_from
        return d


class SubjectView(Protocol):
    """What a check may ask of its subject (``contracts.subject.Subject`` is the one implementation): the checkpoint
    and target as read, the trainer's facts, and the engine's observations (``contracts.observations``), gathered
    once per subject. A check that needs anything else adds it here, so the seam stays visible and typed."""

    name: str
    checkpoint_path: Path
    target_path: Path | None
    reference_path: Path | None  # the bundled or recorded reference, if any (``reference`` is the one judged)
    intended_ids: list[int] | None
    tp: int  # the tensor-parallel size judged (1: one rank)

    @property
    def engine_dir(self) -> Path: ...  # the directory the engine reads (the checkpoint, or the conversion judged)

    @property
    def converted(self) -> bool: ...  # the engine reads a conversion of the checkpoint, not the directory as saved

    @property
    def trainer_name(self) -> str | None: ...

    @property
    def trainer_format(self) -> str: ...

    @property
    def trainer_basis(self) -> tuple[str, bool]: ...

    @property
    def trainer_layers(self) -> dict | None: ...

    @property
    def trainer_switches(self) -> tuple[dict, str] | None: ...

    @property
    def checkpoint(self): ...  # contracts.checkpoint.Checkpoint

    @property
    def target(self): ...  # Checkpoint | None

    @property
    def load(self): ...  # LoadObservation (raises EngineRefused / NotADraft)

    @property
    def aux(self): ...  # AuxCaptureObservation | None

    @property
    def config_obs(self): ...  # ConfigObservation

    @property
    def saved_config_obs(self): ...  # ConfigObservation of the checkpoint as saved, when the engine reads a conversion

    @property
    def embed_head(self): ...  # WiringObservation

    @property
    def ranks(self): ...  # RankObservation: the drafter each of ``tp`` ranks builds (raises as ``load`` does)

    @property
    def reference(self): ...  # contracts.references.Reference: the trainer's reference forward, or why there is none

    @property
    def forward(self): ...  # ForwardObservation

    def forward_for(self, reference): ...  # ForwardObservation of another reference (an unknown trainer's candidates)

    def convert_command(self, verbatim: bool = True) -> str: ...

    def ignored_switches(self) -> list[str]: ...

    def later_step_switches(self) -> list[str]: ...

    def rope_scaling_warning(self) -> str | None: ...


@dataclass(frozen=True)
class Contract:
    id: str
    holds_when: str  # one line, as in the README's table
    check: Callable[[SubjectView], Result]
    # contracts whose failure makes this one fail too (what its observation is computed from): a failure of
    # this one while one of those fails is reported as following from it, not as a root cause of its own
    depends_on: tuple[str, ...] = ()
    # whether the contract is judged on a subject unless asked for by id (None: always): rank-consistency only on a
    # deployment of several ranks
    applies: Callable[[SubjectView], bool] | None = None


CONTRACTS: dict[str, Contract] = {}


def contract(contract_id: str, holds_when: str, depends_on: tuple[str, ...] = (),
             applies: Callable[[SubjectView], bool] | None = None):
    """Register ``func(subject: SubjectView) -> Result`` as the contract ``contract_id``."""

    def register(func):
        if contract_id in CONTRACTS:
            raise ValueError(f"contract {contract_id!r} registered twice")
        CONTRACTS[contract_id] = Contract(contract_id, holds_when, func, tuple(depends_on), applies)
        return func

    return register
