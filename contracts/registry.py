"""How a contract is declared, identified and reported.

A contract is a small function from a ``Subject`` (a draft checkpoint, its target, and lazily gathered
engine observations) to a ``Result``. Contracts register under a stable id (the README's table); every selected
contract runs and every result is collected, failures included, as in schemathesis' checks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

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

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.follows_from is None:
            del d["follows_from"]
        else:
            d["root_cause"] = not self.follows_from
        return d


@dataclass(frozen=True)
class Contract:
    id: str
    holds_when: str  # one line, as in the README's table
    check: Callable  # (Subject) -> Result
    # contracts whose failure makes this one fail too (what its observation is computed from): a failure of
    # this one while one of those fails is reported as following from it, not as a root cause of its own
    depends_on: tuple[str, ...] = ()


CONTRACTS: dict[str, Contract] = {}


def contract(contract_id: str, holds_when: str, depends_on: tuple[str, ...] = ()):
    """Register ``func(subject) -> Result`` as the contract ``contract_id``."""

    def register(func):
        if contract_id in CONTRACTS:
            raise ValueError(f"contract {contract_id!r} registered twice")
        CONTRACTS[contract_id] = Contract(contract_id, holds_when, func, tuple(depends_on))
        return func

    return register
