"""``WorkerEngine``: another SGLang release, or vLLM, driven through an engine worker (``contracts.engines.worker``)
in that release's own environment. Observations come back as JSON and are decoded into the same types the
in-process engine returns, so the checks cannot tell (and need not know) where they were made.

One worker per release per process, started on first use and kept for every subject after it (the start-up,
importing SGLang, is paid once per release, not per checkpoint).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Callable

import contracts
from contracts.engine_spec import EngineSpec
from contracts.engines.zygote import ForkedWorker, WorkerLines, forked_job, forked_worker
from contracts.observations import (AuxCaptureObservation, ConfigObservation, ForwardObservation, LoadObservation,
                                    PathObservation, RankObservation)
from contracts.observations_wiring import WiringObservation

DECODE: dict[str, Callable[[dict], object]] = {
    "path": lambda d: PathObservation(**d),
    "load": LoadObservation.from_dict,
    "aux": lambda d: AuxCaptureObservation(**d),
    "config": lambda d: ConfigObservation(**d),
    "embed_head": WiringObservation.from_dict,
    "forward": lambda d: ForwardObservation(**d),
    "surface": dict,
    "ranks": lambda found: [RankObservation(**d) for d in found],
}


def _abs(path) -> str | None:
    """Paths as the worker (another working directory) must see them."""
    return None if path is None else str(Path(path).resolve())


def _package_only(engine: str | None = None) -> tuple[str, dict]:
    """A private directory holding a link to this package, and the environment that puts only it on another
    environment's path: never the directory it is installed in, whose other packages belong to this environment;
    with ENGINE's ``process_env``."""
    from contracts.engine_profile import profile

    scratch = tempfile.mkdtemp(prefix="eagle3-contracts-worker-")
    os.symlink(Path(contracts.__file__).resolve().parent, Path(scratch) / "contracts")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=scratch, PYTHONNOUSERSITE="1")
    env.update(dict(profile(engine).process_env) if engine is not None else {})
    return scratch, env


def last_error(stderr: str) -> str:
    """The last exception line a failed job wrote (else its last line), without torch's ``[rankN]:`` prefix."""
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", line.strip()) for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.split(":")[0].endswith(("Error", "Exception"))]
    return (errors or lines or ["(no output)"])[-1][:400]


def run_module(python, module: str, *args: str, timeout: float = 900,
               engine: str | None = None) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` in another release's environment with this package on its path (a one-shot job,
    e.g. vLLM's serving loop, which sets up process-wide state no worker should share); ENGINE: the engine it runs."""
    scratch, env = _package_only(engine)
    try:
        # in a test session, forked from the zygote that holds ENGINE imported (contracts.engines.zygote)
        forked = forked_job(Path(python), engine, env, scratch, module, list(args), timeout) if engine else None
        if forked is not None:
            return forked
        return subprocess.run([str(python), "-m", module, *args], capture_output=True, text=True, env=env,
                              cwd=scratch, timeout=timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class WorkerError(RuntimeError):
    """The worker could not start, or answered something that is not the protocol (a bug or a broken environment)."""


# How long one observation may take before the worker is taken for hung (``EAGLE3_CONTRACTS_WORKER_TIMEOUT``, seconds):
# the slowest seen, a first vLLM build beside its registry subprocess or a llama.cpp pair converted, takes about 90 s
WORKER_TIMEOUT_S = 300.0


def worker_timeout() -> float:
    return float(os.environ.get("EAGLE3_CONTRACTS_WORKER_TIMEOUT") or WORKER_TIMEOUT_S)


# what glibc, CPython and the C++ runtime print as a process dies of itself
FATAL = re.compile(r"double free|corrupted|free\(\)|malloc\(\)|munmap_chunk|Fatal Python error|"
                                 r"Segmentation fault|terminate called|Aborted|GGML_ASSERT|Assertion `")


def _died(code: int | None) -> str:
    """How a process ended, said as a user reads it: a signal by name (SIGSEGV: a native crash; SIGABRT: an abort,
    e.g. glibc's "double free or corruption"), else the exit status."""
    import signal

    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited ({code})"


class WorkerEngine:
    def __init__(self, spec: EngineSpec, python: Path):
        self.spec = spec
        self.python = Path(python)
        self.adapter = spec.name  # which adapter the worker runs
        self._proc: subprocess.Popen | ForkedWorker | None = None
        self._info: dict | None = None
        self._next = 0
        self._scratch: str | None = None
        self._failed: WorkerError | None = None

    # --- the Engine seam ---------------------------------------------------------------------------------
    def info(self) -> dict:
        self._start()
        return dict(self._info or {})

    def path(self, engine_dir, target_dir, runner=None):
        return self._call("path", engine_dir=_abs(engine_dir), target_dir=_abs(target_dir), runner=runner)

    def load(self, engine_dir, target_dir=None, runner=None):
        return self._call("load", engine_dir=_abs(engine_dir), target_dir=_abs(target_dir), runner=runner)

    def aux(self, engine_dir, target_dir, trainer_hf_indices, runner=None):
        return self._call("aux", engine_dir=_abs(engine_dir), target_dir=_abs(target_dir),
                          trainer_hf_indices=trainer_hf_indices, runner=runner)

    def config(self, engine_dir, trained_config, switches, target_config):
        return self._call("config", engine_dir=_abs(engine_dir), trained_config=trained_config, switches=switches,
                          target_config=target_config)

    def embed_head(self, engine_dir, target_dir, runner=None):
        return self._call("embed_head", engine_dir=_abs(engine_dir), target_dir=_abs(target_dir), runner=runner)

    def forward(self, engine_dir, target_dir, reference_path, runner=None):
        return self._call("forward", engine_dir=_abs(engine_dir), target_dir=_abs(target_dir),
                          reference_path=_abs(reference_path), runner=runner)

    def surface(self) -> dict:
        return self._call("surface")

    def ranks(self, engine_dirs, target_dir, tp, runner=None):
        return self._call("ranks", engine_dirs=[_abs(d) for d in engine_dirs], target_dir=_abs(target_dir), tp=tp,
                          runner=runner)

    # --- the worker ----------------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The worker process's id while one runs (started by the first call)."""
        return None if self._proc is None else self._proc.pid

    def _start(self) -> None:
        if self._failed is not None:  # a worker that could not start is not started again for every call
            raise self._failed
        if self._proc is not None:
            return
        self._scratch, env = _package_only(self.spec.name)
        self._log = open(Path(self._scratch) / "stderr.log", "w+")  # noqa: SIM115  (kept for the worker's life)
        self._proc = forked_worker(self.python, self.adapter, env, self._scratch, self._log.name) or subprocess.Popen(
            [str(self.python), "-m", "contracts.engines.worker", self.adapter], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, text=True, env=env, cwd=self._scratch)
        try:
            first = self._read()
            if "ready" not in first:
                raise WorkerError(f"{self.spec} worker did not start: {first.get('error', first)}")
        except WorkerError as e:
            self._failed = e
            raise
        self._info = first["ready"]

    def _read(self, op: str | None = None) -> dict:
        """The worker's next line. While it answers OP (an observation, not its start), a worker that dies (a native
        crash, an abort) or stops answering within ``worker_timeout()`` is the engine's refusal of what it was given:
        ``EngineBuildError`` with its last words, and the next call starts a fresh worker."""
        import select

        proc, stdout = self._worker()
        if op is not None:
            ready, _, _ = select.select([stdout], [], [], worker_timeout())
            if not ready:
                proc.kill()
                proc.wait()
                why = f"stopped answering `{op}` for {worker_timeout():.0f} s and was killed"
                raise self._lost(op, why)
        line = stdout.readline()
        if not line:
            try:  # its stdout is closed: it is exiting (wait for its status and last words rather than race them)
                code: int | None = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = None
            if op is not None:
                raise self._lost(op, _died(code))
            raise WorkerError(f"{self.spec} worker {_died(code)}: {self._last_words()[-1]}")
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise WorkerError(f"{self.spec} worker broke the protocol: {line[:200]!r}") from None

    def _worker(self) -> tuple[subprocess.Popen | ForkedWorker, IO[str] | WorkerLines]:
        """The started worker and the pipe it answers on."""
        if self._proc is None or self._proc.stdout is None:
            raise WorkerError(f"{self.spec} worker is not running")
        return self._proc, self._proc.stdout

    def _last_words(self, lines: int = 1) -> list[str]:
        """The last lines the worker wrote to stderr (where the engine's own messages go); for a native death, the
        lines that say what killed it (glibc's "double free or corruption (!prev)", "malloc(): unaligned tcache chunk
        detected", "Fatal Python error: Segmentation fault") and where (the innermost Python frame of a fault
        handler's dump), rather than the bottom of a native stack dump."""
        self._log.flush()
        self._log.seek(0)
        text = self._log.read()[-20000:]
        all_lines = [line for line in text.strip().splitlines() if line.strip()]
        fatal = [line for line in all_lines if FATAL.search(line)]
        if fatal:
            frames = [line for line in all_lines if line.strip().startswith('File "') and ".py" in line]
            return (fatal[-lines:] + frames[:1])[:max(lines, 2)]
        return all_lines[-lines:] or ["(no output)"]

    def _lost(self, op: str, why: str):
        """The worker is gone while it held the engine's call: the engine's refusal, as an observation. The worker is
        closed; the next call starts another."""
        from contracts.engines.errors import EngineBuildError

        words = " | ".join(line.strip()[:300] for line in self._last_words(3))
        self.close()
        return EngineBuildError(f"{self.spec}'s own code ended the worker while it ran `{op}` ({why}); its last "
                                f"words: {words}")

    def _call(self, op: str, **args):
        from contracts.engines.errors import EngineBuildError, ReplayError, TargetBuildError

        self._start()
        self._next += 1
        proc, _ = self._worker()
        try:
            assert proc.stdin is not None  # (started with stdin=PIPE)
            proc.stdin.write(json.dumps({"id": self._next, "op": op, "args": args}) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:  # it died between two calls
            raise self._lost(op, _died(proc.wait())) from None
        reply = self._read(op)
        if reply.get("id") != self._next:
            raise WorkerError(f"{self.spec} worker answered request {reply.get('id')}, not {self._next}")
        if "error" in reply:
            kind, message = reply["error"]["kind"], reply["error"]["message"]
            if kind == "TargetBuildError":
                raise TargetBuildError(message, reply["error"].get("needs"))
            if kind == "EngineBuildError":
                raise EngineBuildError(message)
            if kind == "ReplayError":
                raise ReplayError(message)
            if kind == "WeightsNotFetched":
                from contracts.checkpoint import WeightsNotFetched

                raise WeightsNotFetched(message)
            raise WorkerError(f"{self.spec} worker: {message}")
        return DECODE[op](reply["result"])

    def close(self) -> None:
        if self._proc is not None:
            try:
                if self._proc.stdin is not None:
                    self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
            self._proc = None
            self._log.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
