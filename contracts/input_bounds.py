"""Every input bounded before it is used: what a file may be and how much of it is read, what sizes a config may
ask the engine to build, and how an error line about a hostile input is printed.

Prevents what a careless or hostile checkpoint did to the suite before these bounds: a FIFO named ``config.json``
blocked every run forever, a ``config.json`` linked to ``/dev/zero`` was read until memory ran out, a 2 MB
``pytorch_model.bin`` inflated to 2 GiB before it was refused, ``num_hidden_layers: 1000000`` had the engine build
layers for minutes, a 5000-digit integer or ``hidden_size: 0`` ended in an internal error, and a tensor name with
terminal control characters reached the terminal raw. Each is now one line, exit 2, before any engine work. The
limits are far above any released model (noted at each) and each refusal names the limit it hit.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_HEADER_BYTES = 100 * 1024 * 1024  # a safetensors header (safetensors' own limit)
MAX_JSON_BYTES = 64 * 1024 * 1024  # config.json, *.index.json (a 1T-parameter model's index is ~10 MB)
MAX_ZIP_INFLATED_OVER_FILE = 64 * 1024 * 1024  # what a torch zip may inflate beyond its own size (torch stores)
MAX_DIMENSION = 1 << 32  # a tensor dimension (the largest released vocabularies are ~2^18)
MAX_LINE = 600  # characters of one error line

# Sizes a config may ask for, each far above the largest released model (Llama-3.1-405B: hidden 16384, 126 layers,
# intermediate 53248; Gemma-3: vocab 262144; DeepSeek-V3: 256 experts), and what each bounds.
SIZE_LIMITS = {
    "hidden_size": 1 << 17,
    "intermediate_size": 1 << 20,
    "moe_intermediate_size": 1 << 20,
    "vocab_size": 1 << 23,
    "draft_vocab_size": 1 << 23,
    "num_attention_heads": 1 << 12,
    "num_key_value_heads": 1 << 12,
    "head_dim": 1 << 12,
    "num_hidden_layers": 1024,
}
# Tensors with one entry per token of a vocabulary (EAGLE-3's draft-to-target and target-to-draft maps): one longer
# than any vocabulary a config may declare (``SIZE_LIMITS["vocab_size"]``) is no map of a real vocabulary. Each engine
# reads it whole, and SGLang's ``d2t + arange(len(d2t))`` doubles it: a sparse 1 GiB d2t cost 1.6-4 GB before this.
VOCABULARY_MAPS = ("d2t", "t2d")
# An EAGLE-3 draft has one decoder layer (some trainers allow a few); a draft config asking for more than this is
# no draft an engine would build in useful time (vLLM builds every configured layer: 3000 took 164 s here).
MAX_DRAFT_LAYERS = 64
# a draft vocabulary of 0 rows is no draft (its head proposes nothing): the fuzzing found it ending the config probe
# in an internal error (the max of an empty logits tensor)
POSITIVE = ("hidden_size", "vocab_size", "draft_vocab_size", "num_attention_heads")


class BoundError(ValueError):
    """An input outside its bounds; the reader turns it into its ``InputError`` line."""


def open_regular(path: Path, what: str, limit: int | None = None):
    """PATH opened for reading, once it is known to be a regular file (a FIFO, device or socket is never read:
    opening one could block forever or never end) no larger than LIMIT bytes. Symlinks to regular files are
    followed, as the engines follow them (a Hugging Face cache snapshot is made of them)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as e:
        raise BoundError(f"{path}: cannot read {what}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BoundError(f"{path}: {what} is {_kind(st.st_mode)}, not a regular file; refusing to read it")
        if limit is not None and st.st_size > limit:
            raise BoundError(f"{path}: {what} is {st.st_size} bytes, over this suite's limit of {limit} bytes")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: Path, what: str, limit: int = MAX_JSON_BYTES) -> bytes:
    """The whole of a regular file of at most LIMIT bytes (read no further than LIMIT even if it grows)."""
    with open_regular(path, what, limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BoundError(f"{path}: {what} grew past this suite's limit of {limit} bytes while read")
    return data


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def check_zip_sizes(path: Path) -> None:
    """A torch zip weight file's members, read from its central directory before anything is inflated: their
    inflated total may not exceed the file's own size by more than ``MAX_ZIP_INFLATED_OVER_FILE`` (torch stores
    its members; a deflated ``data.pkl`` that inflates to gigabytes is a zip bomb)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise BoundError(f"{path}: not a readable torch zip file: {e}") from None
    inflated = sum(m.file_size for m in members)
    size = path.stat().st_size
    if inflated > size + MAX_ZIP_INFLATED_OVER_FILE:
        biggest = max(members, key=lambda m: m.file_size)
        raise BoundError(f"{path}: its zip members inflate to {inflated} bytes from a {size}-byte file "
                         f"({escape(biggest.filename)}: {biggest.file_size} bytes); refusing to inflate it "
                         f"(this suite's limit: {MAX_ZIP_INFLATED_OVER_FILE} bytes beyond the file's size)")


def _size_fields(cfg: dict) -> list[tuple[str, dict]]:
    """Where sizes live in a config: the top level, the language-model part, speculators' layer config."""
    out = [("", cfg)]
    for key in ("text_config", "language_config", "llm_config", "transformer_layer_config"):
        if isinstance(cfg.get(key), dict):
            out.append((f"{key}.", cfg[key]))
    return out


def check_sizes(cfg: dict, where: str, *, draft: bool) -> None:
    """The sizes a config asks the engine to build, each an integer within ``SIZE_LIMITS`` (positive where a
    zero-width model is meaningless); a draft's layers within ``MAX_DRAFT_LAYERS``. A value outside is a
    ``BoundError`` naming the key, the value and the limit."""
    for prefix, section in _size_fields(cfg):
        for key, limit in SIZE_LIMITS.items():
            if key not in section or section[key] is None:
                continue
            value = section[key]
            name = f"{prefix}{key}"
            if isinstance(value, bool) or not isinstance(value, int):
                raise BoundError(f"{where}: {name} must be an integer, got {short_repr(value)}")
            low = 1 if key in POSITIVE else 0
            high = MAX_DRAFT_LAYERS if (draft and key == "num_hidden_layers") else limit
            if not low <= value <= high:
                reason = (f"an EAGLE-3 draft has a few layers; this suite builds at most {MAX_DRAFT_LAYERS}"
                          if draft and key == "num_hidden_layers" and value > high else
                          f"this suite's bounds are {low}..{high}")
                raise BoundError(f"{where}: {name} is {short_repr(value)}: {reason}")


def check_vocabulary_map(name: str, shape: tuple, where: str) -> None:
    """A ``d2t`` / ``t2d`` tensor (``VOCABULARY_MAPS``) no longer than the largest vocabulary a config may declare:
    else a ``BoundError`` naming the tensor, its length and the limit."""
    limit = SIZE_LIMITS["vocab_size"]
    if name.split(".")[-1] in VOCABULARY_MAPS and any(d > limit for d in shape):
        raise BoundError(f"{where}: tensor {name!r} has shape {short_repr(list(shape))}: a vocabulary map holds one "
                         f"entry per token, and this suite's bound on a vocabulary is {limit}")


def short_repr(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def escape(text: str) -> str:
    """TEXT with every control or otherwise unprintable character escaped (a tensor name can carry terminal
    escape sequences)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """An error message as one readable line: control characters escaped, at most LIMIT characters."""
    text = escape(" ".join(str(text).split("\n")).strip())
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"
