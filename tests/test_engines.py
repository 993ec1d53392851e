"""The engine seam: an engine worker (another release's environment, here this one's interpreter) returns the
same observations as the in-process adapter, maps the engine's refusals to the same exceptions, and a dead or
misbehaving worker is one clear error, never a hang or a half-made report."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import DRAFTS, TARGET, make_copy

from contracts.engine_spec import EngineSpec, EngineSpecError
from contracts.environments.engines import check_release
from contracts.engines.inprocess import InProcess
from contracts.engines.remote import WorkerEngine, WorkerError
from contracts.engines.errors import EngineBuildError


@pytest.fixture(scope="module")
def worker():
    engine = WorkerEngine(EngineSpec("sglang"), Path(sys.executable))  # SGLang's adapter, this interpreter
    yield engine
    engine.close()


def test_worker_observations_equal_the_in_process_ones(worker):
    local = InProcess(EngineSpec("sglang"))
    draft = DRAFTS["specforge"]
    assert worker.info() == local.info()
    assert worker.load(draft).to_dict() == local.load(draft).to_dict()
    assert worker.embed_head(draft, TARGET).to_dict() == local.embed_head(draft, TARGET).to_dict()
    assert worker.aux(draft, TARGET, [2, 4, 5]).to_dict() == local.aux(draft, TARGET, [2, 4, 5]).to_dict()


def test_the_engines_refusal_crosses_the_worker_as_the_same_exception(worker, tmp_path):
    broken = make_copy(DRAFTS["specforge"], tmp_path / "d", config={"architectures": ["NoSuchEagle3"]})
    with pytest.raises(EngineBuildError) as local:
        InProcess(EngineSpec("sglang")).load(broken)
    with pytest.raises(EngineBuildError) as remote:
        worker.load(broken)
    assert str(remote.value) == str(local.value)


def test_a_worker_that_cannot_start_is_one_line(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ImportError: no sglang here' >&2\nexit 3\n")
    fake.chmod(0o755)
    engine = WorkerEngine(EngineSpec("sglang", "9.9.9"), fake)
    with pytest.raises(WorkerError, match=r"sglang==9.9.9 worker exited \(3\): ImportError: no sglang here"):
        engine.info()
    engine.close()


def test_worker_sees_only_this_package_not_this_environment(worker):
    """The worker's path holds a link to `contracts` alone: another release's environment must not import this
    environment's transformers/SGLang through it."""
    worker.info()  # started (under xdist this test may be the first to use the worker)
    scratch = Path(worker._scratch)
    assert sorted(p.name for p in scratch.iterdir() if p.name != "stderr.log") == ["contracts"]


@pytest.mark.parametrize("spec,expected", [
    ("sglang", ("sglang", None)), ("sglang==0.5.9", ("sglang", "0.5.9")), ("vllm", ("vllm", None)),
    ("vllm==0.32.0", ("vllm", "0.32.0")),
])
def test_engine_specs(spec, expected):
    parsed = EngineSpec.parse(spec)
    assert (parsed.name, parsed.version) == expected and str(parsed) == spec


def test_a_bare_vllm_is_its_pinned_release_in_its_own_environment():
    assert EngineSpec.parse("vllm").canonical() == EngineSpec("vllm", "0.32.0")
    assert EngineSpec.parse("sglang").canonical() == EngineSpec("sglang")


@pytest.mark.parametrize("spec", ["tgi", "sglang==", "vllm==", "trtllm==1.0"])
def test_bad_engine_specs(spec):
    with pytest.raises(EngineSpecError):
        EngineSpec.parse(spec)


def test_any_release_on_the_index_is_accepted_and_another_is_refused_with_the_nearest():
    check_release(EngineSpec("sglang", "0.5.6"))  # no recipe written for it: derived from its own metadata
    check_release(EngineSpec("vllm", "0.32.0"))
    with pytest.raises(EngineSpecError, match=r"sglang==0.5.999 is not a release on the package index \(nearest: "):
        check_release(EngineSpec("sglang", "0.5.999"))


def test_an_environment_the_installer_cannot_make_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """A recipe the installer cannot satisfy (here a package no index has) ends in one EnvironmentBuildError naming
    the log; no half-made environment is left to be mistaken for a ready one."""
    from contracts.environments import engines as environments
    from contracts.environments.recipes import Recipe

    monkeypatch.setattr(environments, "derive", lambda release: Recipe(
        release.name, release.version, ["eagle3-contracts-no-such-package-anywhere==1.0"]))
    monkeypatch.setenv("EAGLE3_CONTRACTS_ENVS", str(tmp_path / "envs"))
    with pytest.raises(environments.EnvironmentBuildError, match=r"could not make the sglang==0.0.1 environment"):
        environments.environment_for(EngineSpec("sglang", "0.0.1"))
    left = sorted(p.name for p in (tmp_path / "envs").iterdir())
    assert not [n for n in left if not n.endswith((".log", ".lock")) and n != "uv-cache"], left


# --- a worker that dies or stops answering is the engine's refusal, in bounded time --------------------------------

def _worker(name: str) -> WorkerEngine:
    """A worker of each engine: SGLang in this environment, vLLM and llama.cpp in their releases' own."""
    from contracts.environments.engines import environment_for

    if name == "sglang":
        return WorkerEngine(EngineSpec("sglang"), Path(sys.executable))
    spec = EngineSpec.parse({"vllm": "vllm==0.32.0", "llamacpp": "llamacpp==2026.10.11549"}[name])
    return WorkerEngine(spec, environment_for(spec))


def _signal_while_busy(pid: int, *signals) -> None:
    """Stop the worker before it reads the next request, then (from another thread, once the request is sent) send
    SIGNALS and let it go on: the signal lands while the worker holds the call, every time."""
    import os
    import signal
    import threading
    import time

    os.kill(pid, signal.SIGSTOP)

    def later():
        time.sleep(1.0)
        for sig in signals:
            os.kill(pid, sig)
        os.kill(pid, signal.SIGCONT)

    threading.Thread(target=later, daemon=True).start()


HD32_DRAFT = Path(__file__).resolve().parents[1] / "fixtures" / "drafts" / "specforge-hd32"
HD32_TARGET = Path(__file__).resolve().parents[1] / "fixtures" / "targets" / "llama-tiny-hd32"


@pytest.mark.parametrize("name", ["sglang", "vllm", "llamacpp"])
def test_a_native_crash_of_the_worker_is_the_engines_refusal_and_the_next_call_starts_another(name):
    """SIGSEGV (a native crash) and SIGABRT (glibc's "double free or corruption" ends a process this way) while the
    worker runs an observation: EngineBuildError naming the signal and the worker's last words (a verdict, exit 1),
    never a WorkerError (exit 2, "report it") or a hang; the next observation gets a fresh worker."""
    import signal

    engine = _worker(name)
    try:
        for sig in (signal.SIGSEGV, signal.SIGABRT):
            engine.info()
            _signal_while_busy(engine.pid, sig)
            with pytest.raises(EngineBuildError, match=rf"ended the worker while it ran `load` \(killed by "
                                                        rf"{sig.name}\); its last words: "):
                engine.load(HD32_DRAFT, HD32_TARGET)
            assert engine.pid is None
        assert engine.load(HD32_DRAFT, HD32_TARGET).draft_class  # a fresh worker answers
    finally:
        engine.close()


@pytest.mark.parametrize("name", ["sglang", "vllm", "llamacpp"])
def test_a_worker_that_stops_answering_is_killed_after_the_timeout_and_is_the_engines_refusal(name, monkeypatch):
    import signal
    import time

    engine = _worker(name)
    try:
        engine.info()
        import os

        os.kill(engine.pid, signal.SIGSTOP)  # it will never answer
        monkeypatch.setenv("EAGLE3_CONTRACTS_WORKER_TIMEOUT", "5")
        start = time.perf_counter()
        with pytest.raises(EngineBuildError, match=r"ended the worker while it ran `load` \(stopped answering `load` "
                                                   r"for 5 s and was killed\)"):
            engine.load(HD32_DRAFT, HD32_TARGET)
        assert time.perf_counter() - start < 30
        monkeypatch.delenv("EAGLE3_CONTRACTS_WORKER_TIMEOUT")
        assert engine.load(HD32_DRAFT, HD32_TARGET).draft_class
    finally:
        engine.close()
