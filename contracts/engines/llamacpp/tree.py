"""Where llama.cpp's converter lives in a llama.cpp environment, and how it gets there.

An xllamacpp source release carries the llama.cpp tree its wheel was built from (``thirdparty/llama.cpp``). The
converter (``convert_hf_to_gguf.py`` and, since the converter was split, its ``conversion`` package) must run with
that tree's own ``gguf-py``: the index's ``gguf`` does not know the EAGLE-3 architecture. The environment builder
unpacks those files into ``<environment>/llama.cpp`` and installs ``gguf-py`` from there.
"""

from __future__ import annotations

import shutil
import sys
import tarfile
from pathlib import Path

from contracts.engines.llamacpp.recipe import LLAMACPP_TREE

# What the converter reads from the tree: its script, its model classes, gguf-py, its requirement files; and the C
# headers the draft-graph replay (``contracts.engines.llamacpp.graph``) is compiled against.
CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py", "requirements", "LICENSE")
HEADER_PARTS = ("include/", "ggml/include/", "src/llama-ext.h")
SCRIPT = "convert_hf_to_gguf.py"


def converter_dir(prefix: str | Path | None = None) -> Path:
    """The converter's folder in the environment whose prefix is PREFIX (default: this interpreter's)."""
    return Path(prefix or sys.prefix) / "llama.cpp"


def unpack_converter(sdist: Path, env: Path) -> Path:
    """Unpack the converter's parts and the C headers of the source release's llama.cpp tree into ``ENV/llama.cpp``
    (replacing what was there); returns that folder. Only regular files and folders are taken, each kept inside it."""
    dest = converter_dir(env)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        base = f"{top}/{LLAMACPP_TREE}/"
        members = []
        for m in tar.getmembers():
            if not m.name.startswith(base) or not (m.isfile() or m.isdir()):
                continue
            rel = m.name[len(base):]
            wanted = rel.split("/")[0] in CONVERTER_PARTS or rel.startswith(HEADER_PARTS) or \
                any(part.startswith(rel + "/") for part in HEADER_PARTS if part.endswith("/"))
            if not wanted or ".." in rel.split("/"):
                continue
            m.name = rel
            members.append(m)
        tar.extractall(dest, members=members, filter="data")
    if not (dest / SCRIPT).is_file():
        raise FileNotFoundError(f"{sdist.name} has no {LLAMACPP_TREE}/{SCRIPT}")
    return dest


def unpack_for_environment(sdist: Path, env: Path) -> list[Path]:
    """The environment builder's step for llama.cpp (its profile's ``install.from_source``): the tree's parts unpacked into ENV,
    and the local package to install from them, the tree's own gguf-py."""
    return [unpack_converter(sdist, env) / "gguf-py"]
