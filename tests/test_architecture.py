"""The house rules a maintainer relies on (docs/architecture.md): no import circle in ``contracts/`` (counting imports
inside functions, which only defer a circle); every module on its floor, importing only floors below it; no private
name taken across a package; every engine adapter answering the same nine observations with the same signatures; and
no file that cites a document this repository does not have."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def modules() -> dict[str, Path]:
    mods = {}
    for p in (REPO / "contracts").rglob("*.py"):
        name = ".".join(p.relative_to(REPO).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


# A module named by a string rather than an import statement: ``pkgutil.resolve_name``'s "module:function", an
# engine profile's adapter, a trainer profile's builder. importlib imports it all the same.
NAMED = re.compile(r"^(contracts(?:\.[A-Za-z_]\w*)+)(:[A-Za-z_]\w*)?$")
# Profiles are data: the modules they name are imported by the code that reads them, on that code's floor (an engine's
# adapter, recipe and source unpacking by the engines' runner and builder; a trainer's builders by build-tiny and the
# converged builds), so their names are counted as imports of that reader.
PROFILE_READERS = {"contracts.trainer_profile": "contracts.trainers.tiny"}


def profile_reader(module: str) -> str | None:
    if module in PROFILE_READERS:
        return PROFILE_READERS[module]
    parts = module.split(".")
    if len(parts) == 4 and parts[:2] == ["contracts", "engines"] and parts[3] == "profile":
        return "contracts.engines.inprocess"
    return None


def import_graph(follow_names: bool = True) -> dict[str, set[str]]:
    """module -> the ``contracts`` modules it imports (a ``from PKG import SUB`` counts as SUB only), and with
    ``follow_names`` the modules importlib imports by name for it: a "module:function" string it holds, and the
    modules a profile it reads names (``PROFILE_READERS``). A bare module name outside a profile is a process's entry
    point (``python -m``, ``run_module``): another process, not an import."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [*subs, node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif follow_names and isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    NAMED.match(node.value):
                named, function = NAMED.match(node.value).groups()
                reader = profile_reader(m)
                if reader is not None:
                    graph[reader] |= {named} if named in mods and named != reader else set()
                    continue
                targets = [named] if function else []
            else:
                continue
            graph[m] |= {t for t in targets if t in mods and t != m}
    return graph


def package_of_module(module: str) -> str:
    """``contracts.engines.vllm.adapter`` -> ``contracts.engines``; a root module is a package of its own."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        out.setdefault(package_of_module(m), set())
        out[package_of_module(m)] |= {package_of_module(t) for t in targets} - {package_of_module(m)}
    return out


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


def test_no_circle_between_packages():
    """A package that imports another which imports it back (the trainers' converged builds measuring with accept,
    which asks the trainers for an expectation) is one package in two places: the floors cannot order them."""
    assert circles(package_graph(import_graph())) == []


def test_names_importlib_imports_are_followed():
    """A "module:function" a module holds, and what a profile names, are imports of their reader."""
    graph = import_graph()
    plain = import_graph(follow_names=False)
    assert "contracts.engines.llamacpp.recipe" in graph["contracts.engines.inprocess"] - \
        plain["contracts.engines.inprocess"]  # llama.cpp's profile: install.derive
    assert "contracts.trainers.speculators" in graph["contracts.trainers.tiny"]  # the trainer profile's builder
    assert not any(t.startswith("contracts.trainers.") for t in graph["contracts.trainer_profile"])


def test_a_circle_is_found_when_there_is_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_file_cites_a_document_outside_the_repository():
    cited = re.compile(r"DESIGN\.md|FIELD-NOTES|FIELD_NOTES")
    offenders = [str(p.relative_to(REPO)) for folder in ("contracts", "tests", "docs", "requirements", "benchmarks")
                 for p in (REPO / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".txt", ".ini")
                 and p.name != "test_architecture.py" and cited.search(p.read_text(errors="replace"))]
    offenders += [n for n in ("README.md", "tox.ini", "pyproject.toml") if cited.search((REPO / n).read_text())]
    assert offenders == []


# The floors of docs/architecture.md, lowest first: a module imports only modules of its own group or of a lower
# floor. Checks and engines share a floor and never see each other (the observations are their only seam).
FLOORS = [
    {"core": ("contracts", "contracts.checkpoint", "contracts.input_bounds", "contracts.observations",
              "contracts.observations_wiring", "contracts.registry", "contracts.report", "contracts.refusals",
              "contracts.renames", "contracts.conventions", "contracts.fingerprint", "contracts.manifest",
              "contracts.config_facts", "contracts.hand_conversion", "contracts.engine_spec", "contracts.engine_profile", "contracts.trainer_profile",
              "contracts.trainer_forms", "contracts.memory", "contracts.server_facts")},
    # making an engine's or a trainer's environment: below both (a build or a probe runs there as a process of its own)
    {"environments": ("contracts.environments",)},
    {"checks": ("contracts.checks",), "engines": ("contracts.engines",)},
    {"subject": ("contracts.subject", "contracts.judging", "contracts.convert_command", "contracts.recordings", "contracts.bundled",
                 "contracts.builds", "contracts.references", "contracts.hub")},
    {"runs": ("contracts.trainers", "contracts.accept", "contracts.doctor")},
    {"tables": ("contracts.tables",)},
    {"front ends": ("contracts.cli", "contracts.plugin")},
]


def floor_of(module: str) -> tuple[int, str]:
    """(floor, group) of a module: the group whose longest prefix names it (a package covers its modules; the root
    package ``contracts`` only itself, so a new root module must be given a floor)."""
    best = None
    for level, groups in enumerate(FLOORS):
        for group, prefixes in groups.items():
            for prefix in prefixes:
                covers = module == prefix or (prefix != "contracts" and module.startswith(prefix + "."))
                if covers and (best is None or len(prefix) > best[2]):
                    best = (level, group, len(prefix))
    assert best is not None, f"{module} is on no floor: add it to FLOORS and docs/architecture.md"
    return best[0], best[1]


def floor_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for m, targets in graph.items():
        level, group = floor_of(m)
        for t in sorted(targets):
            t_level, t_group = floor_of(t)
            if t_level > level or (t_level == level and t_group != group):
                out.append(f"{m} ({group}) imports {t} ({t_group})")
    return out


def test_every_module_imports_only_lower_floors():
    assert floor_violations(import_graph()) == []


def test_a_floor_violation_is_found():
    graph = {"contracts.checks.config": {"contracts.engines.sglang.loader"}, "contracts.engines.sglang.loader": set(),
             "contracts.report": {"contracts.cli"}, "contracts.cli": set()}
    assert floor_violations(graph) == [
        "contracts.checks.config (checks) imports contracts.engines.sglang.loader (engines)",
        "contracts.report (core) imports contracts.cli (front ends)"]


def package_of(module: str) -> str:  # (the private-name rule's package: the module's parent)
    """The package a module belongs to: a package is its own; ``contracts.engines.sglang`` for its modules."""
    if (REPO.joinpath(*module.split(".")) / "__init__.py").is_file():
        return module
    return module.rsplit(".", 1)[0]


def private_imports() -> list[str]:
    """``from contracts.X import _name`` where X lies in another package than the importer."""
    out = []
    for p in [*(REPO / "contracts").rglob("*.py")]:
        importer = ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("contracts"):
                for alias in node.names:
                    if alias.name.startswith("_") and package_of(node.module) != package_of(importer):
                        out.append(f"{importer} takes {node.module}.{alias.name}")
    return out


def test_no_private_name_crosses_a_package():
    assert private_imports() == []


def engine_packages() -> list[str]:
    return sorted(p.parent.name for p in (REPO / "contracts" / "engines").glob("*/adapter.py"))


def test_every_engine_adapter_answers_the_same_observations_with_the_same_signatures():
    """One skeleton: ``contracts.engines.inprocess.InProcess`` drives any ``contracts.engines.<name>.adapter`` module
    that defines the nine observations of ``contracts.engines.Engine``; adding an engine is adding that folder."""
    from contracts.engine_profile import profile
    from contracts.engines import ENGINES, Engine
    from contracts.engines.inprocess import OBSERVATIONS

    assert engine_packages() == sorted(ENGINES)
    protocol = {name: inspect.signature(getattr(Engine, name)) for name in OBSERVATIONS}
    for engine in engine_packages():
        assert profile(engine).adapter == f"contracts.engines.{engine}.adapter" and profile(engine).distributions
        adapter = importlib.import_module(profile(engine).adapter)  # imports no engine (lazy inside)
        for name, wanted in protocol.items():
            got = inspect.signature(getattr(adapter, name))
            wanted_params = [p for p in wanted.parameters if p != "self"]
            assert list(got.parameters) == wanted_params, (engine, name, got)


def test_the_subject_is_what_the_checks_are_typed_against():
    """Every member of ``SubjectView`` (what a check may ask) exists on ``Subject``, and every attribute a check reads
    of its subject is a member of ``SubjectView``."""
    import dataclasses

    from contracts.registry import SubjectView
    from contracts.subject import Subject

    view = {n for n in vars(SubjectView) if not n.startswith("_")} | set(SubjectView.__annotations__)
    subject = {f.name for f in dataclasses.fields(Subject)} | {n for n in dir(Subject) if not n.startswith("_")}
    assert view - subject == set()
    asked = set()
    for p in [*(REPO / "contracts" / "checks").glob("*.py")]:
        asked |= set(re.findall(r"\bsubject\.(\w+)", p.read_text()))
    assert asked - view == set()


def test_a_module_on_no_floor_is_refused():
    import pytest

    with pytest.raises(AssertionError, match="on no floor"):
        floor_of("contracts.somewhere_new")


# An engine is a folder that describes itself (contracts/engines/<name>/profile.py); the rest of contracts/ loops over
# the profiles and never names an engine. What may name one outside its folder, and why:
NAMED_ON_PURPOSE = {
    # the flat config format SGLang's loader reads, a checkpoint format (which trainer wrote it), not an engine
    ("contracts/trainer_profile.py", "sglang"),
    # the trainer grid's releases: the pinned SGLang and vLLM (both runners), and SGLang 0.5.9, the last release that
    # names the draft's layer `midlayer.*` (a choice of releases, kept as data)
    ("contracts/tables/trainer_compatibility.py", "sglang==0.5.23"),
    ("contracts/tables/trainer_compatibility.py", "vllm==0.32.0"),
    ("contracts/tables/trainer_compatibility.py", "vllm==0.32.0:v1"),
    ("contracts/tables/trainer_compatibility.py", "sglang==0.5.9"),
}


# A trainer's name where it is data: the bundled drafts are named after the trainer that built them
# (fixtures/drafts/specforge: the draft the engines' surface snapshots and the probe load), and one trainer release's
# sdist is made from its own files for a reason written beside it.
TRAINER_NAMED_ON_PURPOSE = {
    ("contracts/engines/canonical.py", "specforge"),
    ("contracts/engines/sglang/surface.py", "specforge"),
    ("contracts/engines/vllm/surface.py", "specforge"),
    ("contracts/environments/trainers.py", "specforge"),
}


def names_outside(root: Path, names: set[str], own, allowed: set[tuple[str, str]]) -> list[str]:
    """``path:line value`` for every string constant in ROOT/contracts that is one of NAMES (or a release of one,
    ``vllm==0.32.0``) in a file ``own(relative path)`` does not claim, unless ALLOWED lists it."""
    out = []
    for p in sorted((root / "contracts").rglob("*.py")):
        rel = p.relative_to(root)
        if own(rel):
            continue
        found = [node for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.Constant)
                 and isinstance(node.value, str) and re.sub(r"==.*", "", node.value) in names
                 and (rel.as_posix(), node.value) not in allowed]
        out += [f"{rel.as_posix()}:{node.lineno} {node.value!r}" for node in sorted(found, key=lambda n: n.lineno)]
    return out


def trainer_names_outside_their_folder(root: Path, names: set[str]) -> list[str]:
    """Every trainer's name (or release) outside ``contracts/trainers/`` and ``contracts/trainer_profile.py``: a branch
    on a trainer's name is a table a fifth trainer's author must find (its saved form, its rope, its references are
    fields of its profile)."""
    return names_outside(root, names, lambda rel: rel.parts[1] == "trainers"
                         or rel.as_posix() == "contracts/trainer_profile.py", TRAINER_NAMED_ON_PURPOSE)


def test_no_trainer_is_named_outside_its_folder():
    from contracts.trainer_profile import PROFILES

    assert trainer_names_outside_their_folder(REPO, set(PROFILES)) == []


def test_a_trainer_named_outside_its_folder_is_found(tmp_path):
    (tmp_path / "contracts" / "trainers").mkdir(parents=True)
    (tmp_path / "contracts" / "trainers" / "specforge.py").write_text('NAME = "specforge"\n')  # its own folder
    (tmp_path / "contracts" / "subject.py").write_text('def f(fmt):\n    return fmt == "modelopt"\n')
    assert trainer_names_outside_their_folder(tmp_path, {"specforge", "modelopt"}) == ["contracts/subject.py:2 'modelopt'"]


def engine_names_outside_their_folders(root: Path, names: set[str]) -> list[str]:
    """Every engine's name (or release) outside that engine's folder and the trainers' (whose exporters name the
    engine they write for): a branch, a table key or a default that names an engine is what a new engine's author must
    find and change, and one left unchanged is a silent gap (the nightly's drift report once compared two engines of
    three)."""
    return names_outside(root, names, lambda rel: rel.parts[1] == "trainers" or (
        rel.parts[1] == "engines" and len(rel.parts) > 3 and rel.parts[2] in names), NAMED_ON_PURPOSE)


def test_no_engine_is_named_outside_its_folder():
    from contracts.engine_spec import ENGINES

    assert engine_names_outside_their_folders(REPO, set(ENGINES)) == []


def test_an_engine_named_outside_its_folder_is_found(tmp_path):
    (tmp_path / "contracts" / "engines" / "vllm").mkdir(parents=True)
    (tmp_path / "contracts" / "engines" / "vllm" / "runners.py").write_text('DEFAULT = "vllm"\n')  # its own folder
    (tmp_path / "contracts" / "plugin.py").write_text('def f(name):\n    return name == "vllm"\n')
    (tmp_path / "contracts" / "tables").mkdir()
    (tmp_path / "contracts" / "tables" / "x.py").write_text('FIRST = {"sglang": "0.4.4"}\nSPEC = "vllm==0.32.0:v1"\n')
    assert engine_names_outside_their_folders(tmp_path, {"sglang", "vllm"}) == [
        "contracts/plugin.py:2 'vllm'", "contracts/tables/x.py:1 'sglang'", "contracts/tables/x.py:2 'vllm==0.32.0:v1'"]


def test_every_engine_folder_describes_itself():
    """A folder with an adapter has a profile naming that folder, its adapter and its distributions; the registry is
    what every front end lists (a folder without a profile would be an engine nothing can reach)."""
    from contracts.engine_profile import EngineProfile, profiles

    folders = {p.parent.name for p in (REPO / "contracts" / "engines").glob("*/adapter.py")}
    assert {p.parent.name for p in (REPO / "contracts" / "engines").glob("*/profile.py")} == folders
    for name in folders:
        p = profiles()[name]
        assert isinstance(p, EngineProfile) and p.name == name and p.label and p.package and p.first_release
        assert p.adapter == f"contracts.engines.{name}.adapter" and p.distributions
        assert set(p.table_paths) <= set(p.runners)
        assert (p.serving_loop is None) == bool(p.no_serving_loop)
    assert sum(p.in_process for p in profiles().values()) == 1
