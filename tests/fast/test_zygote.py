"""Workers forked from a session's zygote (``contracts.engines.zygote``) are driven exactly as workers started from
scratch: the same answers, a native crash read as the signal that ended it, a fresh worker after it, and no zygote
at all where forking would copy a started thread. Run on the replayed engine (``tests/data/engines``: SGLang
0.5.23's recorded answers served by an engine folder), whose worker starts in this environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contracts.engine_spec import EngineSpec
from contracts.engines.remote import WorkerEngine
from contracts.engines.zygote import ZYGOTES, ForkedWorker, stop_all

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "tests" / "data" / "engines"
DRAFT, TARGET = REPO / "fixtures" / "drafts" / "specforge", REPO / "fixtures" / "targets" / "llama-tiny"

ENGINE = next(p for p in FOLDER.iterdir() if (p / "profile.py").is_file())  # the replayed engine's folder
THREADED = f'''
import threading, time
from {ENGINE.name}.adapter import *  # noqa: F403


def preload():
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
'''

READS_A_SETTING = f'''
import os
from {ENGINE.name}.adapter import *  # noqa: F403
from {ENGINE.name}.adapter import info as recorded_info


def info():
    return {{**recorded_info(), "scale_above_mb": os.environ.get("EAGLE3_CONTRACTS_SCALE_ABOVE_MB")}}
'''

MAKES_SCRATCH = f'''
import atexit, shutil, tempfile
from {ENGINE.name}.adapter import *  # noqa: F403
from {ENGINE.name}.adapter import info as recorded_info

IMPORTED = tempfile.mkdtemp(prefix="eagle3-zygote-test-")  # made as the module is imported: in the zygote
atexit.register(shutil.rmtree, IMPORTED, True)


def info():
    own = tempfile.mkdtemp(prefix="eagle3-zygote-test-")  # made by the worker, as an engine context makes its scratch
    atexit.register(shutil.rmtree, own, True)
    return {{**recorded_info(), "imported": IMPORTED, "own": own}}
'''


def _engine_folder(root: Path, name: str, adapter: str) -> Path:
    """An engine folder at ROOT/engines/NAME_engine: the replayed engine's profile named NAME, ADAPTER its adapter."""
    folder = root / "engines" / f"{name}_engine"
    folder.mkdir(parents=True)
    profile = (ENGINE / "profile.py").read_text()
    (folder / "profile.py").write_text(profile.replace('name="replayed"', f'name="{name}"')
                                       .replace(f'"{ENGINE.name}.adapter"', f'"{name}_engine.adapter"'))
    (folder / "adapter.py").write_text(adapter)
    return folder.parent


@pytest.fixture
def zygotes(monkeypatch):
    """A session directory of this test's own (its zygotes end with it; a short path, as a socket's must be) and the
    replayed engine's folder."""
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="eagle3-zygotes-"))
    (directory / "owner").write_text(str(os.getpid()))
    monkeypatch.setenv(ZYGOTES, str(directory))
    monkeypatch.setenv("EAGLE3_CONTRACTS_ENGINE_PATH", str(FOLDER))
    yield directory
    stop_all(directory)


def _answers(engine: WorkerEngine) -> tuple[dict, dict, dict]:
    return (engine.info(), engine.load(DRAFT, TARGET).to_dict(), engine.embed_head(DRAFT, TARGET).to_dict())


def test_a_forked_worker_answers_as_a_worker_started_from_scratch(zygotes, monkeypatch):
    forked = WorkerEngine(EngineSpec("replayed"), Path(sys.executable))
    try:
        got = _answers(forked)
        assert isinstance(forked._proc, ForkedWorker) and forked.pid != os.getpid()
        assert list(zygotes.glob("*.sock")), "no zygote answered"
    finally:
        forked.close()
    monkeypatch.delenv(ZYGOTES)
    fresh = WorkerEngine(EngineSpec("replayed"), Path(sys.executable))
    try:
        assert _answers(fresh) == got
        assert isinstance(fresh._proc, subprocess.Popen)
    finally:
        fresh.close()


def test_a_forked_worker_that_crashes_reads_as_the_signal_and_the_next_call_forks_another(zygotes):
    from contracts.engines.errors import EngineBuildError

    engine = WorkerEngine(EngineSpec("replayed"), Path(sys.executable))
    try:
        engine.info()
        first = engine.pid
        assert first is not None
        os.kill(first, signal.SIGSTOP)
        with pytest.raises(EngineBuildError, match=r"ended the worker while it ran `load` \(killed by SIGSEGV\)"):
            import threading

            threading.Timer(0.5, lambda: (os.kill(first, signal.SIGSEGV), os.kill(first, signal.SIGCONT))).start()
            engine.load(DRAFT, TARGET)
        assert engine.pid is None
        assert engine.load(DRAFT, TARGET).draft_class
        assert engine.pid not in (None, first)
    finally:
        engine.close()


def test_no_worker_is_forked_from_a_zygote_whose_imports_started_a_thread(zygotes, tmp_path, monkeypatch):
    """A library that starts a thread as it is imported (a BLAS pool without OMP_NUM_THREADS=1) would leave a fork
    with a lock no thread will release: that zygote refuses, says why, and every client starts a plain worker."""
    folders = _engine_folder(tmp_path, "threaded", THREADED)
    monkeypatch.setenv("EAGLE3_CONTRACTS_ENGINE_PATH", os.pathsep.join([str(FOLDER), str(folders)]))
    engine = WorkerEngine(EngineSpec("threaded"), Path(sys.executable))
    try:
        assert engine.load(DRAFT, TARGET).draft_class
        assert isinstance(engine._proc, subprocess.Popen)
    finally:
        engine.close()
    (failed,) = zygotes.glob("threaded-*.failed")
    assert "started 1 thread(s)" in failed.read_text() and "forking it is not safe" in failed.read_text()


def test_a_setting_read_per_check_reaches_each_forked_worker_from_one_zygote(zygotes, tmp_path, monkeypatch):
    """The memory-bound settings a test changes between two checks of one draft (scaled, then at full size) are read
    when a check runs: each worker reads its client's value, and one zygote serves both."""
    folders = _engine_folder(tmp_path, "reads_setting", READS_A_SETTING)
    monkeypatch.setenv("EAGLE3_CONTRACTS_ENGINE_PATH", os.pathsep.join([str(FOLDER), str(folders)]))
    for value in ("1048576", "0"):
        monkeypatch.setenv("EAGLE3_CONTRACTS_SCALE_ABOVE_MB", value)
        engine = WorkerEngine(EngineSpec("reads_setting"), Path(sys.executable))
        try:
            assert engine.info()["scale_above_mb"] == value
            assert isinstance(engine._proc, ForkedWorker)
        finally:
            engine.close()
    assert len(list(zygotes.glob("reads_setting-*.sock"))) == 1


def test_a_forked_worker_removes_its_own_scratch_as_it_ends_and_leaves_the_zygotes(zygotes, tmp_path, monkeypatch):
    """A worker's exit handlers run as it ends (its engine context's scratch directories, as a worker started from
    scratch removes them); the zygote's own, inherited by the fork, stay the zygote's."""
    folders = _engine_folder(tmp_path, "makes_scratch", MAKES_SCRATCH)
    monkeypatch.setenv("EAGLE3_CONTRACTS_ENGINE_PATH", os.pathsep.join([str(FOLDER), str(folders)]))
    engine = WorkerEngine(EngineSpec("makes_scratch"), Path(sys.executable))
    try:
        info = engine.info()
        assert isinstance(engine._proc, ForkedWorker) and Path(info["own"]).is_dir()
    finally:
        engine.close()
    assert not Path(info["own"]).exists(), "the worker left its scratch behind"
    assert Path(info["imported"]).is_dir(), "the worker removed its zygote's scratch"
    stop_all(zygotes)  # the zygote's own go as it ends
    deadline = time.monotonic() + 30
    while Path(info["imported"]).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(info["imported"]).exists(), "the zygote left its scratch behind"


def test_a_job_forked_from_the_zygote_ends_as_the_same_job_started_from_scratch(zygotes, monkeypatch):
    """``run_module``'s one-shot jobs (an engine's serving loop, convert's copy) fork from the engine's zygote in a
    test session: the exit status, stdout and stderr of ``python -m MODULE ARGS`` started from scratch."""
    from contracts.engines.remote import _package_only, run_module
    from contracts.engines.zygote import forked_job

    import shutil

    scratch, env = _package_only("replayed")
    try:
        direct = forked_job(Path(sys.executable), "replayed", env, scratch, "contracts.cli", ["--help"], 60)
    finally:
        shutil.rmtree(scratch)
    assert direct is not None and direct.returncode == 0 and direct.stdout.startswith("usage: ")
    jobs = (["--help"], ["check", "/nowhere/draft"])
    forked = [run_module(sys.executable, "contracts.cli", *args, engine="replayed") for args in jobs]
    monkeypatch.delenv(ZYGOTES)
    fresh = [run_module(sys.executable, "contracts.cli", *args, engine="replayed") for args in jobs]
    assert [(p.returncode, p.stdout, p.stderr) for p in forked] == [(p.returncode, p.stdout, p.stderr) for p in fresh]
    assert forked[1].returncode == 2 and forked[1].stderr.startswith("eagle3-contracts: error: ")


def test_the_settings_that_key_no_zygote_are_read_only_when_a_check_runs():
    """READ_PER_CHECK holds only settings no module reads as it is imported (at module or class level, or as a
    default argument): a forked worker would keep its zygote's value of one that is."""
    import ast

    from contracts.engines.zygote import READ_PER_CHECK

    def inside_a_call(node: ast.AST, parents: dict) -> bool:
        """Whether NODE is evaluated when a function runs: in a body, not in a signature or decorator (evaluated
        where the function is defined)."""
        while node in parents:
            node, child = parents[node], node
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and child is not node.args \
                    and child not in getattr(node, "decorator_list", []) and child is not getattr(node, "returns", None):
                return True
        return False

    seen = set()
    for source in (REPO / "contracts").rglob("*.py"):
        tree = ast.parse(source.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in READ_PER_CHECK and source.name != "zygote.py":
                seen.add(node.value)
                assert inside_a_call(node, parents), f"{source}:{node.lineno} reads {node.value} at import"
    assert seen == set(READ_PER_CHECK)


def test_a_zygote_ends_with_its_session(zygotes):
    engine = WorkerEngine(EngineSpec("replayed"), Path(sys.executable))
    try:
        engine.info()
    finally:
        engine.close()
    (pid_file,) = zygotes.glob("*.pid")
    pid = int(pid_file.read_text())
    stop_all(zygotes)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z":  # gone, or ended and not reaped
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"zygote {pid} outlived its session")
