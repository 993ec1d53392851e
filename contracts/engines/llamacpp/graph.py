"""llama.cpp's own EAGLE-3 draft graph, callable from Python: ``eagle3_replay.cpp`` compiled against the headers of the
release's own tree and linked to the library of the release's own wheel (``xllamacpp.abi3.so``), loaded with ctypes.

Contracts served: ``forward-parity`` and ``config`` (a switch is honoured when flipping it changes this graph's
output), and ``load`` (llama.cpp's own GGUF loader accepts or refuses the pair). The release's wheel exposes only its
server to Python, but its library exports llama.cpp's C API; the small C++ file drives that API the way
``common/speculative.cpp`` does, so no part of the draft's math is re-written here. Compiled once per environment
and source (``g++``, about a second), kept beside the tree.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import os
import re
import subprocess
from pathlib import Path

from contracts.engines.errors import ReplayError
from contracts.engines.llamacpp.log import captured, first_error
from contracts.engines.llamacpp.tree import converter_dir

SOURCE = Path(__file__).with_name("eagle3_replay.cpp")
_P_F = ctypes.POINTER(ctypes.c_float)
_P_I = ctypes.POINTER(ctypes.c_int32)
_ERR = 1024


def wheel_library() -> Path:
    import xllamacpp  # noqa: F401  (loads the library, with its Python symbols, before the replay links to it)

    found = sorted(Path(xllamacpp.__file__).parent.glob("xllamacpp*.so"))
    if not found:
        raise ReplayError(f"the xllamacpp wheel in {Path(xllamacpp.__file__).parent} has no library to link to")
    return found[0]


def compiled() -> Path:
    """The replay compiled for this environment's release (built on first use; a compile error of this release's
    headers is a gap of the replay on this release, not a verdict)."""
    tree = converter_dir()
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:10]
    out = tree / f"eagle3_replay-{digest}.so"
    if out.is_file():
        return out
    library = wheel_library()
    with open(tree / "eagle3_replay.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_file():
            return out
        legacy = "llama_batch_ext_init" not in (tree / "include" / "llama.h").read_text(errors="replace")
        cmd = ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", *(["-DE3_LEGACY_BATCH"] if legacy else []),
               *(f"-I{tree / d}" for d in ("include", "src", "ggml/include")),
               str(SOURCE), "-o", str(out) + ".tmp", str(library), "-Wl,--allow-shlib-undefined",
               f"-Wl,-rpath,{library.parent}"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        except FileNotFoundError:
            raise ReplayError("llama.cpp's draft graph is replayed through a C++ file compiled against the release's "
                              "headers, and this machine has no g++") from None
        if done.returncode:
            first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip()[:300])
            raise ReplayError(f"this release's C API does not offer what the replay drives: {first.strip()[:300]}")
        os.replace(str(out) + ".tmp", out)
    return out


@functools.lru_cache(maxsize=None)
def _library():
    """The compiled replay, loaded and typed once per process (every DraftGraph shares it)."""
    lib = ctypes.CDLL(str(compiled()), mode=ctypes.RTLD_GLOBAL)
    lib.e3_open.restype = ctypes.c_void_p
    lib.e3_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_size_t]
    for name in ("e3_n_vocab", "e3_n_embd", "e3_n_embd_enc", "e3_kv_half", "e3_clear", "e3_close"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    lib.e3_encode.argtypes = [ctypes.c_void_p, ctypes.c_int, _P_F, _P_F, ctypes.c_char_p, ctypes.c_size_t]
    lib.e3_decode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, _P_I, _P_F, _P_F, _P_F, ctypes.c_char_p,
                              ctypes.c_size_t]
    return lib


class GraphError(Exception):
    """llama.cpp's own loader or graph refused (its first logged error, or the call's own message)."""


class DraftGraph:
    """The target and the draft GGUF loaded by llama.cpp as its speculative setup loads them (the draft context's
    ``ctx_other`` is the target's), with the encoder and decoder steps of its EAGLE-3 loop."""

    def __init__(self, target_gguf: Path, draft_gguf: Path, positions: int, log: Path):
        self.lib = _library()
        err = ctypes.create_string_buffer(_ERR)
        with captured(log):
            self.handle = self.lib.e3_open(str(target_gguf).encode(), str(draft_gguf).encode(), positions,
                                           max(1, min(4, os.cpu_count() or 1)), err, _ERR)
        if not self.handle:
            cause = first_error(Path(log).read_text(errors="replace")) if Path(log).is_file() else None
            raise GraphError(cause or err.value.decode(errors="replace") or "llama.cpp could not load the pair")
        self.n_vocab = self.lib.e3_n_vocab(self.handle)
        self.n_embd = self.lib.e3_n_embd(self.handle)
        self.n_embd_enc = self.lib.e3_n_embd_enc(self.handle)
        self.kv_half = bool(self.lib.e3_kv_half(self.handle))
        self.log = log

    def encode(self, features):
        """The encoder (fc, and the input norm under norm_before_fc) on [N, 3 x target hidden] -> g [N, hidden]."""
        import numpy as np

        features = np.ascontiguousarray(features, dtype=np.float32)
        if features.ndim != 2 or features.shape[1] != self.n_embd_enc:
            raise GraphError(f"llama.cpp's EAGLE-3 encoder takes rows of {self.n_embd_enc} (three target layers); "
                             f"the features have shape {list(features.shape)}")
        g = np.zeros((features.shape[0], self.n_embd), dtype=np.float32)
        self._call(self.lib.e3_encode, features.shape[0], _f(features), _f(g))
        return g

    def clear(self) -> None:
        self.lib.e3_clear(self.handle)

    def decode(self, pos0: int, ids, states):
        """The decoder on the pairs (ids[i], states[i]) at positions pos0 + i over the KV cache: (logits [N, vocab]
        on the target vocabulary, -inf off d2t's map; the pre-norm states the loop feeds the next step [N, hidden])."""
        import numpy as np

        ids = np.ascontiguousarray(ids, dtype=np.int32)
        states = np.ascontiguousarray(states, dtype=np.float32)
        logits = np.zeros((len(ids), self.n_vocab), dtype=np.float32)
        prenorm = np.zeros((len(ids), self.n_embd), dtype=np.float32)
        self._call(self.lib.e3_decode, len(ids), pos0, ids.ctypes.data_as(_P_I), _f(states), _f(logits), _f(prenorm))
        return logits, prenorm

    def _call(self, fn, *args) -> None:
        err = ctypes.create_string_buffer(_ERR)
        with captured(self.log):
            rc = fn(self.handle, *args, err, _ERR)
        if rc != 0:
            raise GraphError(err.value.decode(errors="replace") or f"llama.cpp returned {rc}")

    def close(self) -> None:
        if self.handle:
            self.lib.e3_close(self.handle)
            self.handle = None
            _trim_heap()


def _trim_heap() -> None:
    """Give the freed heap back to the system (glibc's ``malloc_trim``): a closed model's vocabulary is millions of
    small allocations, which glibc otherwise keeps mapped, so the next model loaded came on top of the last one."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to give back this way
        pass


def _f(array):
    return array.ctypes.data_as(_P_F)


def load_probe(target_gguf: str, draft_gguf: str, log: str) -> int:
    """(In a child process, ``forked``.) Load the pair and run one encoder and one decoder step on zeros: a pair that
    llama.cpp aborts on (a failed GGML_ASSERT while it builds the graph) aborts here, not in the caller."""
    import numpy as np

    try:
        graph = DraftGraph(Path(target_gguf), Path(draft_gguf), 8, Path(log))
        g = graph.encode(np.zeros((2, graph.n_embd_enc), dtype=np.float32))
        graph.decode(0, np.zeros(2, dtype=np.int32), g)
    except GraphError as e:
        print(f"refused: {e}", flush=True)
        return 3
    return 0


LOADER_ERROR = re.compile(r"error loading model: (.*)")  # llama_model_load's own line
ABORT_LINE = re.compile(r"(GGML_ASSERT\(.*\) failed|GGML_ABORT.*|[\w./-]+:\d+: .*)")


def probe_refusal(code: int, log: str) -> str | None:
    """What a load probe that did not exit 0 says: the engine's first logged error, its failed assertion, or the
    refusal it printed (None: it loaded)."""
    if code == 0:
        return None
    lines = log.splitlines()
    said = next((line.removeprefix("refused: ") for line in lines if line.startswith("refused: ")), None)
    aborted = next((m.group(0) for line in lines if (m := ABORT_LINE.search(line)) and "GGML" in line), None)
    loader = next((" ".join(m.group(1).split()) for line in lines if (m := LOADER_ERROR.search(line))), None)
    return loader or aborted or first_error(log) or said or f"llama.cpp stopped loading the pair (exit status {code})"
