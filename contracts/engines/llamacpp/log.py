"""llama.cpp's own log (it writes to file descriptor 2), captured while one of its calls runs, and the error it
names: how its refusals reach a verdict in its own words."""

from __future__ import annotations

import fcntl
import os
import re
import stat
import sys
from contextlib import contextmanager
from pathlib import Path

# An error line of llama.cpp's log ("0.00.014.408 E llama_model_load: error loading model: check_tensor_dims: ...").
LOG_ERROR = re.compile(r"^[\d.]+ E (.*)$", re.M)


@contextmanager
def captured(path: Path, echo: bool = False):
    """File descriptor 2 into PATH while the block runs (ECHO: then passed on to this process's stderr). Where fd 2
    is a file (an engine worker's stderr), llama.cpp writes there as it would and the block's part is copied to PATH
    after it: a native abort inside the block (a GGML_ASSERT) leaves its own words where the worker's parent reads
    its last words, instead of in a file nobody reads."""
    sys.stderr.flush()
    if stat.S_ISREG(os.fstat(2).st_mode) and fcntl.fcntl(2, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR:
        start = os.lseek(2, 0, os.SEEK_CUR)
        try:
            yield
        finally:
            sys.stderr.flush()
            end = os.lseek(2, 0, os.SEEK_CUR)
            Path(path).write_bytes(os.pread(2, max(0, end - start), start))
        return
    saved = os.dup(2)
    with open(path, "w") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        if echo:
            sys.stderr.write(Path(path).read_text(errors="replace"))


def first_error(log: str) -> str | None:
    """The first error llama.cpp logged (the cause; the lines after it report the same failure upwards)."""
    found = LOG_ERROR.search(log)
    return " ".join(found.group(1).split()) if found else None
