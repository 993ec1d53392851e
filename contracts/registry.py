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
    holds_when: str  # one line, as in DESIGN.md's table
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


def mark_causes(results: list[Result]) -> list[Result]:
    """Mark each failure as a root cause or as following from other failures (by ``depends_on``, transitively
    through failing contracts): the Kimi-K2.5 replay fails key-naming (dropped layer weights) and, because of
    it, forward-parity; only the first is something to fix."""
    registered = all_contracts()
    failing = {r.contract for r in results if r.status == FAIL}

    def upstream(cid: str, seen: set) -> set:
        found = set()
        for dep in registered[cid].depends_on if cid in registered else ():
            if dep in failing and dep not in seen:
                seen.add(dep)
                found |= {dep} | upstream(dep, seen)
        return found

    for r in results:
        if r.status == FAIL:
            r.follows_from = sorted(upstream(r.contract, set()), key=list(registered).index)
    return results


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
