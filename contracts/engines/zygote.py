"""Engine workers forked from a process that has imported the engine once (a "zygote"), for a session that starts
many: the test suite starts about seventy workers, and each paid 5-12 s importing vLLM or SGLang before its first
answer.

A zygote runs in the release's own environment: it imports the engine's adapter, asks it for ``info()`` and, where
the adapter has one, runs its ``preload()`` (the engine modules its observations import, imported in the order they
import them; nothing started). It then forks one worker per client that connects to its socket. The forked worker is
``contracts.engines.worker`` as a process started from scratch runs it: the client's environment variables, working
directory and stderr file, the protocol on the socket instead of a pipe. Between the zygote and each worker sits a
warden (one more fork) that waits for the worker and writes how it ended as the last line on the socket, so a
native crash reads as it does from a pipe: "killed by SIGSEGV". A client may instead ask for a one-shot job
(``forked_job``: ``python -m MODULE ARGS``, an engine's serving loop or convert's copy, run by ``runpy`` in the fork
with its output in files), which ``contracts.engines.remote.run_module`` returns as ``subprocess.run`` would.

Forking is safe only from one thread: a zygote whose imports started a thread (a library's pool) says so and exits,
and its clients start plain workers. Used only when ``EAGLE3_CONTRACTS_ZYGOTES`` names a directory (the test
session makes one and stops its zygotes at the end); a check a user runs starts its worker from scratch, so what it
measures of its process tree is the whole tree. A zygote ends when its socket is removed, when its owner has exited
or when no client has asked it for a worker for ten minutes (its memory is given back; a later client starts another).

    python -m contracts.engines.zygote ADAPTER SOCKET OWNER_PID    (started by ``forked_worker``)
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ZYGOTES = "EAGLE3_CONTRACTS_ZYGOTES"
# what differs between two clients of one zygote and reaches a worker through the request, not through its imports
VOLATILE = ("PYTHONPATH", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID",
            "PYTEST_XDIST_WORKER_COUNT", "PYTEST_VERSION", "COLUMNS", "LINES")
# this project's own settings read each time a check runs, never while a module is imported: a forked worker reads the
# value its client gave (the request's environment), so they do not make another zygote (the tests that judge one
# draft scaled and at full size set them per call: 8 more zygotes per run, each 10-20 s of CPU importing an engine)
READ_PER_CHECK = ("EAGLE3_CONTRACTS_SCALE_ABOVE_MB", "EAGLE3_CONTRACTS_META_VOCAB_MB",
                  "EAGLE3_CONTRACTS_META_ABOVE_ELEMENTS")
START_TIMEOUT_S = 300.0
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes, the last a NUL
# a zygote no client has asked for in this long ends (a later client starts another). One suite session judges each
# release's contract items beside the tests that use the release, minutes apart: at 120 s a /proc watcher saw 8 of
# 22 zygotes started again after they had ended idle (10-20 s of CPU each); ten minutes keeps them: 13 at most alive
# at once over a run, their RSS summed 5.5 GB (a page two share counted twice), available memory never under 17 GB
# of the 2-core machine's 24
IDLE_S = 600.0


# --- the client side ------------------------------------------------------------------------------------------------

def zygote_key(python: Path, adapter: str, env: dict[str, str], package: Path) -> str:
    """One zygote per environment, engine, package checkout and set of environment variables a worker starts with
    (an import can read one; not the settings read per check): every client whose worker would start the same gets
    the same zygote."""
    stable = sorted((k, v) for k, v in env.items() if k not in VOLATILE and k not in READ_PER_CHECK)
    text = json.dumps([str(python), adapter, str(package), stable])
    return f"{adapter}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


class WorkerLines:
    """The worker's side of the socket read as lines; the warden's ``{"exit": code}`` line reads as the end of the
    stream (as a pipe's end does), with the code kept for ``wait``."""

    def __init__(self, sock: socket.socket, owner: "ForkedWorker"):
        self._file = sock.makefile("r", encoding="utf-8", newline="\n")
        self._owner = owner

    def fileno(self) -> int:
        return self._file.fileno()

    def readline(self) -> str:
        if self._owner.returncode is not None:
            return ""
        line = self._file.readline()
        if line.startswith('{"exit":'):
            self._owner.returncode = int(json.loads(line)["exit"])
            return ""
        if not line and self._owner.returncode is None:
            self._owner.returncode = -9  # the warden itself was killed: report the worker as killed
        return line


class _Requests:
    """The client's writes to the worker (its stdin); closing it is the end of input the worker exits on."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._file = sock.makefile("w", encoding="utf-8", newline="\n")

    def write(self, text: str) -> int:
        return self._file.write(text)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        try:
            self._file.close()
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class ForkedWorker:
    """A worker forked by a zygote, driven as ``subprocess.Popen`` drives one started from scratch (pid, stdin, stdout,
    wait, kill): ``contracts.engines.remote.WorkerEngine`` cannot tell them apart."""

    def __init__(self, sock: socket.socket, request: dict):
        self.returncode: int | None = None
        self._sock = sock
        sock.sendall((json.dumps(request) + "\n").encode())
        self.stdout = WorkerLines(sock, self)
        first = self.stdout.readline()
        if not first:
            raise OSError(f"the zygote's worker ended before it started (exit {self.returncode})")
        self.pid = int(json.loads(first)["pid"])
        self.stdin = _Requests(sock)

    def wait(self, timeout: float | None = None) -> int:
        import select

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.stdout], [], [], left)
            if not ready:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
            self.stdout.readline()  # anything the worker still wrote, then the warden's exit line
        self._sock.close()
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def _start_zygote(directory: Path, key: str, python: Path, adapter: str, env: dict[str, str],
                  cwd: str) -> socket.socket | None:
    """Start KEY's zygote and wait for its socket (None: it could not start; the reason is in KEY.failed)."""
    sock_path, log_path = directory / f"{key}.sock", directory / f"{key}.log"
    owner = (directory / "owner").read_text().strip() if (directory / "owner").is_file() else str(os.getpid())
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(python), "-m", "contracts.engines.zygote", adapter, str(sock_path), owner],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
    (directory / f"{key}.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if sock_path.exists():
            sock = _connect(sock_path)
            if sock is not None:
                return sock
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    else:
        proc.kill()
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    (directory / f"{key}.failed").write_text((lines or ["(no output)"])[-1])
    return None


def _zygote(python: Path, adapter: str, env: dict[str, str]) -> socket.socket | None:
    """A connection to this session's zygote for ADAPTER in PYTHON's environment (started on first use), or None
    where no session directory is set or its zygote cannot fork safely."""
    import fcntl

    import contracts

    root = os.environ.get(ZYGOTES)
    if not root:
        return None
    directory = Path(root)
    package = Path(contracts.__file__).resolve().parent
    key = zygote_key(python, adapter, env, package)
    if (directory / f"{key}.failed").exists() or len(str(directory / f"{key}.sock")) + 12 > SOCKET_PATH_MAX:
        return None  # (a socket's path, with the zygote's pid on its temporary name, must fit sun_path)
    sock = _connect(directory / f"{key}.sock")
    if sock is None:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process of the session may be starting it
            sock = _connect(directory / f"{key}.sock")
            if sock is None and not (directory / f"{key}.failed").exists():
                zygote_home = directory / f"{key}.home"
                zygote_home.mkdir(exist_ok=True)
                link = zygote_home / "contracts"
                if not link.exists():
                    link.symlink_to(package)
                sock = _start_zygote(directory, key, python, adapter, {**env, "PYTHONPATH": str(zygote_home)},
                                     str(zygote_home))
    return sock


def forked_worker(python: Path, adapter: str, env: dict[str, str], cwd: str, stderr_path: str) -> ForkedWorker | None:
    """A worker forked from this session's zygote for ADAPTER in PYTHON's environment, or None where there is none
    (the caller starts a plain worker)."""
    sock = _zygote(python, adapter, env)
    if sock is None:
        return None
    try:
        return ForkedWorker(sock, {"env": env, "cwd": cwd, "stderr": stderr_path})
    except (OSError, ValueError, KeyError):
        sock.close()
        return None


def forked_job(python: Path, adapter: str, env: dict[str, str], cwd: str, module: str, args: list[str],
               timeout: float) -> subprocess.CompletedProcess | None:
    """``python -m MODULE ARGS`` forked from this session's zygote for ADAPTER (a one-shot job such as an engine's
    serving loop: a process of its own, as ``subprocess.run`` starts one, without importing the engine again), its
    output captured as ``subprocess.run(capture_output=True, text=True)`` captures it; None where there is no
    zygote (the caller starts the job from scratch). Past TIMEOUT the job is killed and ``TimeoutExpired`` raised.
    Driven as a forked worker is (``ForkedWorker``: its pid, then the warden's exit line)."""
    sock = _zygote(python, adapter, env)
    if sock is None:
        return None
    out, err = Path(cwd) / "job.stdout", Path(cwd) / "job.stderr"
    argv = [str(python), "-m", module, *args]
    try:
        job = ForkedWorker(sock, {"env": env, "cwd": cwd, "stderr": str(err),
                                  "job": {"module": module, "args": args, "stdout": str(out)}})
    except (OSError, ValueError, KeyError):
        sock.close()
        return None  # not started: the caller starts it from scratch (once it has started, it is never run twice)
    try:
        code = job.wait(timeout)
    except subprocess.TimeoutExpired:
        job.kill()
        sock.close()
        raise subprocess.TimeoutExpired(argv, timeout) from None
    read = lambda path: path.read_text(errors="replace") if path.is_file() else ""  # noqa: E731
    return subprocess.CompletedProcess(argv, code, read(out), read(err))


def stop_all(directory: Path) -> None:
    """End every zygote of a session (its workers end with their clients)."""
    import shutil

    for pid_file in Path(directory).glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
    shutil.rmtree(directory, ignore_errors=True)


# --- the zygote -----------------------------------------------------------------------------------------------------

def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _serve_one(conn: socket.socket, adapter: str) -> None:
    """In the warden (a child of the zygote): fork the worker, wait for it, write how it ended."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    request = json.loads(conn.makefile("r", encoding="utf-8").readline())
    pid = os.fork()
    if pid == 0 and "job" in request:
        _run_job(conn, request)
    if pid == 0:
        code = 1
        # the exit handlers inherited are the zygote's (what it made while importing, which its next workers use):
        # dropped here; the worker's own (the scratch directories its engine context makes) run as it ends, as they
        # do in a worker started from scratch (os._exit skips them: ~200 directories were left in /tmp per suite run)
        atexit._clear()
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            err = os.open(request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.dup2(err, 2)
            os.dup2(conn.fileno(), 0)
            os.dup2(conn.fileno(), 1)
            os.close(err)
            conn.close()
            sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115  (the worker's for its life)
            os.write(1, (json.dumps({"pid": os.getpid()}) + "\n").encode())
            from contracts.engines.worker import main

            code = main([adapter])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001  (the worker's own last words, then its exit status)
            import traceback

            traceback.print_exc()
        finally:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        conn.sendall((json.dumps({"exit": code}) + "\n").encode())
    except OSError:
        pass
    os._exit(0)


def _run_job(conn: socket.socket, request: dict) -> None:
    """In the forked child: ``python -m MODULE ARGS`` as ``runpy`` runs it, its stdout and stderr into the request's
    files, stdin empty; ends the process with its exit status (the warden reports it)."""
    import runpy

    atexit._clear()  # the zygote's, as in a worker
    code = 1
    try:
        job = request["job"]
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        conn.sendall((json.dumps({"pid": os.getpid()}) + "\n").encode())
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        conn.close()
        sys.argv = [job["module"], *job["args"]]
        runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001  (as the interpreter reports an uncaught exception: traceback, status 1)
        import traceback

        traceback.print_exc()
    finally:
        import threading

        # as the interpreter ends: its threads joined, then its exit handlers
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    from contracts.memory import return_large_frees

    return_large_frees()
    adapter, sock_path, owner = (sys.argv[1:] if argv is None else argv)[:3]
    from contracts.engine_spec import EngineSpec
    from contracts.engines.inprocess import InProcess

    engine = InProcess(EngineSpec.parse(adapter))
    engine.info()
    preload = getattr(engine.adapter, "preload", None)
    if preload is not None:
        preload()
    if _threads() != 1:
        names = sorted(Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task"))
        print(f"zygote: {adapter}'s imports started {_threads() - 1} thread(s) ({', '.join(names)}): forking it is "
              f"not safe", flush=True)
        return 3
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # wardens are reaped as they end
    # stop_all's SIGTERM ends the zygote as its idle end does: its exit handlers run (what its imports made in /tmp)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{sock_path}.{os.getpid()}"
    listener.bind(tmp)
    listener.listen(64)
    os.rename(tmp, sock_path)  # visible only once it accepts
    listener.settimeout(1.0)
    print(f"zygote: {adapter} ready, {len(sys.modules)} modules", flush=True)
    last = time.monotonic()
    while os.path.exists(sock_path) and _alive(int(owner)):
        if time.monotonic() - last > IDLE_S:  # the session has moved on: give the memory back
            os.unlink(sock_path)  # no client connects from now on; one that already did is still served
            listener.settimeout(0)
            while True:
                try:
                    conn, _ = listener.accept()
                except (BlockingIOError, TimeoutError):
                    break
                _fork_worker(listener, conn, adapter)
            break
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        last = time.monotonic()
        _fork_worker(listener, conn, adapter)
    return 0


def _fork_worker(listener: socket.socket, conn: socket.socket, adapter: str) -> None:
    conn.settimeout(None)
    if os.fork() == 0:
        listener.close()
        _serve_one(conn, adapter)
    conn.close()


if __name__ == "__main__":
    sys.exit(main())
