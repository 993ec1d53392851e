"""llama.cpp's converter and loader run in children of one fork server, each in a process of its own.

The server imports the release's converter once (``converter_preload``: torch, transformers and gguf-py take about
8 s of the 10 s a fresh conversion takes; from the server a conversion takes a quarter of a second). A child is also
where llama.cpp first loads a pair: its loader and graph builder stop on a failed ``GGML_ASSERT`` with ``abort()``,
which would take this process with it; in a child it is an exit status and a logged line, the engine's refusal.
"""

from __future__ import annotations

import sys
from pathlib import Path

PRELOAD = ["contracts.engines.llamacpp.converter_preload"]
_context = None


def _child(fn, args, cwd: str, log: str) -> None:
    import os

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(cwd)
    sys.exit(fn(*args))


def run(fn, args: tuple, cwd: Path, log: Path, timeout: float) -> int:
    """``FN(*ARGS)`` in a child of the fork server, its output into LOG; its exit code (-1: past TIMEOUT; a negative
    signal number when it died of one, e.g. -6 for llama.cpp's abort)."""
    import multiprocessing

    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    child = _context.Process(target=_child, args=(fn, args, str(cwd), str(log)))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
        return -1
    return -1 if child.exitcode is None else child.exitcode
