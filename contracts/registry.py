"""How a contract is declared, identified and reported.

A contract is a small function from a ``Subject`` (a draft checkpoint, its target, and lazily gathered
engine observations) to a ``Result``. Contracts register under a stable id (DESIGN.md); every selected
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

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Contract:
    id: str
    holds_when: str  # one line, as in DESIGN.md's table
    check: Callable  # (Subject) -> Result


CONTRACTS: dict[str, Contract] = {}


def contract(contract_id: str, holds_when: str):
    """Register ``func(subject) -> Result`` as the contract ``contract_id``."""

    def register(func):
        if contract_id in CONTRACTS:
            raise ValueError(f"contract {contract_id!r} registered twice")
        CONTRACTS[contract_id] = Contract(contract_id, holds_when, func)
        return func

    return register


def all_contracts() -> dict[str, Contract]:
    import contracts.checks  # noqa: F401  (registers every contract module)

    return CONTRACTS


def select(only: list[str] | None) -> list[Contract]:
    registered = all_contracts()
    if not only:
        return list(registered.values())
    unknown = [c for c in only if c not in registered]
    if unknown:
        raise KeyError(f"unknown contract id(s): {', '.join(unknown)} (known: {', '.join(registered)})")
    return [registered[c] for c in only]
