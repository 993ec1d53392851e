"""Papers that are true: the table of the bundled drafts (docs/bundled-drafts.md) and every `matrix` table in the docs say, cell by cell,
what ``fixtures/expected.json`` documents (which the suite's own runs hold the engines to), and the pinned SGLang's rows
what its recorded run gave, so none can drift apart."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXPECTED = json.loads((REPO / "fixtures" / "expected.json").read_text())
TABLE = REPO / "docs" / "bundled-drafts.md"
# The table's columns, left to right after the draft: where each one's verdicts are documented
# (a column may stand for several: "after `convert` (both runners)")
COLUMNS = [[("engines", "sglang==0.5.23")], [("after_convert", "sglang==0.5.23")], [("engines", "vllm==0.32.0")],
           [("engines", "vllm==0.32.0:v1")], [("after_convert", "vllm==0.32.0"), ("after_convert", "vllm==0.32.0:v1")],
           [("engines", "llamacpp==2026.10.11549")], [("engines", "openvino==2026.4.1.0")]]
HEADER = "| draft (trainer) | SGLang 0.5.23"


def table_rows() -> list[list[str]]:
    lines = TABLE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def drafts_in(cell: str) -> list[str]:
    """``specforge``, ``specforge-hd32`` -> both; ``speculators-train``, ``-hd32`` -> speculators-train(-hd32)."""
    names = re.findall(r"`([^`]+)`", cell.split("(")[0])
    out = []
    for name in names:
        out.append(out[0] + name if name.startswith("-") else name)
    return out


def failures_in(cell: str) -> set[str]:
    """``yes`` -> none; ``**no**: `a`, `b``` -> {a, b}; a parenthesis (another release) is not this column's;
    ``not judged (why)`` fails nothing."""
    said = cell.split(" (")[0] if cell.startswith(("yes", "not judged")) else cell
    if said.strip() in ("yes", "not judged"):
        return set()
    assert said.startswith("**no**"), cell
    return set(re.findall(r"`([a-z0-9-]+)`", said.split("(step")[0]))


def documented(where: str, release: str, draft: str) -> set[str]:
    return set(EXPECTED[where].get(release, {}).get(draft, {}))


def test_the_table_names_every_bundled_draft_once():
    from contracts.bundled import bundled_subjects

    drafts = sorted(s.name for s in bundled_subjects())
    named = sorted(d for row in table_rows() for d in drafts_in(row[0]))
    assert named == drafts


def test_every_table_cell_is_what_expected_json_documents():
    wrong = []
    for row in table_rows():
        assert len(row) == len(COLUMNS) + 1, row
        for column, cell in zip(COLUMNS, row[1:]):
            for (where, release), draft in ((c, d) for c in column for d in drafts_in(row[0])):
                if failures_in(cell) != documented(where, release, draft):
                    wrong.append(f"{draft} / {where} {release}: the table says {cell!r}, expected.json "
                                 f"{sorted(documented(where, release, draft))}")
    assert wrong == []


MATRIX_HEADER = "| subject | engine | path | judged | key-naming |"
RELEASES = {("sglang 0.5.23", "EAGLEWorkerV2"): "sglang==0.5.23", ("vllm 0.32.0", "Model Runner V2"): "vllm==0.32.0",
            ("vllm 0.32.0", "Model Runner V1"): "vllm==0.32.0:v1"}


def matrix_rows() -> tuple[list[str], list[list[str]]]:
    lines = (REPO / "docs" / "releases-and-matrix.md").read_text().splitlines()
    section = lines.index("## The bundled drafts on both engines")
    start = next(i for i, line in enumerate(lines) if i > section and line.startswith(MATRIX_HEADER))
    header = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return header, rows


def test_the_bundled_drafts_table_has_every_draft_on_every_path():
    """The docs' table of the bundled drafts holds each one on the pinned SGLang and on both vLLM runners (its cells
    are checked, with every other matrix table's, by the test below)."""
    _, rows = matrix_rows()
    shown = sorted((row[0], release_key(row[1], row[2])) for row in rows)
    assert shown == sorted((d, r) for d in table_drafts() for r in RELEASES.values())


def test_the_matrix_rows_of_every_recorded_engine_path_are_the_recorded_verdicts():
    """Every cell, warnings and skips included, against the verdicts each recorded engine path's run gave (the pinned
    SGLang, vLLM on both runners)."""
    from contracts.engine_spec import EngineSpec
    from contracts.recordings import load_recordings

    header, rows = matrix_rows()
    contracts = header[4:-1]
    compared = set()
    for row in rows:
        recorded = load_recordings(EngineSpec.parse(release_key(row[1], row[2])))
        if recorded:
            cells = {c: cell.split(" ")[0].lower() for c, cell in zip(contracts, row[4:-1])}
            assert cells == recorded[row[0]]["verdicts"], (row[0], row[1], row[2])
            compared.add(release_key(row[1], row[2]))
    assert compared == set(RELEASES.values())


def table_drafts() -> list[str]:
    return [d for row in table_rows() for d in drafts_in(row[0])]


def every_matrix_table() -> list[tuple[list[str], list[list[str]]]]:
    """Every `matrix`-shaped table in docs/releases-and-matrix.md: (header, rows)."""
    lines = (REPO / "docs" / "releases-and-matrix.md").read_text().splitlines()
    tables = []
    for i, line in enumerate(lines):
        if line.startswith("| subject | engine | path |"):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            tables.append((header, rows))
    return tables


def release_key(engine: str, path: str) -> str:
    """``sglang 0.5.9`` + its worker -> ``sglang==0.5.9``; ``vllm 0.32.0`` + ``Model Runner V1 (asked for...`` ->
    ``vllm==0.32.0:v1`` (a vLLM release's documented key is its default path, V2)."""
    key = engine.replace(" ", "==")
    return key + ":v1" if path.startswith("Model Runner V1") else key


def test_every_matrix_table_in_the_docs_fails_what_expected_json_documents():
    wrong, checked = [], 0
    for header, rows in every_matrix_table():
        first = header.index("key-naming")
        contracts = header[first:-1]
        for row in rows:
            release = release_key(row[1], row[2])
            draft, after = row[0].removesuffix(" after convert"), row[0].endswith(" after convert")
            where = "after_convert" if after else "engines"
            if release not in EXPECTED[where]:
                continue
            failing = {c for c, cell in zip(contracts, row[first:-1]) if cell.startswith("FAIL")}
            checked += 1
            if failing != documented(where, release, draft):
                wrong.append(f"{row[0]} on {release}: the docs fail {sorted(failing)}, expected.json documents "
                             f"{sorted(documented(where, release, draft))}")
    assert wrong == []
    assert checked >= 40
