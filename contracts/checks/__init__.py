"""One module per contract; importing this package registers them all, in the README's order, and gives the
registered list (``all_contracts``, ``select``) and the root-cause marking that reads their dependencies. Kept here,
above ``contracts.registry``, so the registry never imports the checks that register into it."""

from contracts.registry import CONTRACTS, FAIL, Contract, Result
from contracts.checks import key_naming  # noqa: F401  (isort: skip)
from contracts.checks import tensor_shapes  # noqa: F401  (isort: skip)
from contracts.checks import d2t_semantics  # noqa: F401  (isort: skip)
from contracts.checks import hidden_width  # noqa: F401  (isort: skip)
from contracts.checks import embed_head  # noqa: F401  (isort: skip)
from contracts.checks import config  # noqa: F401  (isort: skip)
from contracts.checks import forward_parity  # noqa: F401  (isort: skip)
from contracts.checks import rank_consistency  # noqa: F401  (isort: skip)


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
    return CONTRACTS


def select(only: list[str] | None) -> list[Contract]:
    registered = all_contracts()
    if not only:
        return list(registered.values())
    unknown = [c for c in only if c not in registered]
    if unknown:
        raise KeyError(f"unknown contract id(s): {', '.join(unknown)} (known: {', '.join(registered)})")
    return [registered[c] for c in only]
