"""The house rules a maintainer relies on: no import circle in ``contracts/`` (counting imports inside functions,
which only defer a circle), and no file that cites a document this repository does not have."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def import_graph() -> dict[str, set[str]]:
    """module -> the ``contracts`` modules it imports (a ``from PKG import SUB`` counts as SUB only)."""
    mods = {}
    for p in (REPO / "contracts").rglob("*.py"):
        name = ".".join(p.relative_to(REPO).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [*subs, node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[m] |= {t for t in targets if t in mods and t != m}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_a_circle_is_found_when_there_is_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_file_cites_a_document_outside_the_repository():
    cited = re.compile(r"DESIGN\.md|FIELD-NOTES|FIELD_NOTES")
    offenders = [str(p.relative_to(REPO)) for folder in ("contracts", "tests", "docs", "requirements", "benchmarks")
                 for p in (REPO / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".txt", ".ini")
                 and p.name != "test_architecture.py" and cited.search(p.read_text(errors="replace"))]
    offenders += [n for n in ("README.md", "tox.ini", "pyproject.toml") if cited.search((REPO / n).read_text())]
    assert offenders == []
