"""llama.cpp's converter on one draft, as a user runs it, and what the GGUF it writes holds.

``convert_hf_to_gguf.py DRAFT --target-model-dir TARGET --outfile F --outtype f32`` (f32 so the tensors are the
checkpoint's values, not a rounding of them), run from the release's own tree (``contracts.engines.llamacpp.tree``)
in the llama.cpp environment. What llama.cpp will serve is decided here: the target layers it will feed the draft
(``eagle3.target_layers``: only the config's top-level ``eagle_aux_hidden_state_layer_ids``, else its own default),
the switches it keeps, which tensors it maps, renames or drops, and ``d2t`` turned into absolute target ids. A
refusal (an exception, e.g. "Can not map tensor") is the converter's own last error line.

    python -m contracts.engines.llamacpp.converter DRAFT TARGET     (in a llama.cpp environment: one JSON line)
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from contracts.engines.llamacpp.target_tokenizer import target_with_tokenizer
from contracts.engines.llamacpp.tree import SCRIPT, converter_dir

TIMEOUT_S = 900
# The converter's own account of the EAGLE-3 decisions it took (its INFO lines "EAGLE-3: ...").
EAGLE3_LINE = re.compile(r"EAGLE-3: .*")
# The converter's exception line (Python's traceback ends with it).
ERROR_LINE = re.compile(r"^(\w*Error|Exception)\b.*")


def convert(draft: Path, target: Path, out_dir: Path) -> dict:
    """Run the converter on DRAFT (TARGET's config and tokenizer beside it) into OUT_DIR/draft.gguf.

    Returns ``{"converted": true, "gguf": PATH, "decisions": [...]}`` or ``{"converted": false, "refusal": LINE,
    "decisions": [...]}``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = target_with_tokenizer(Path(target), out_dir)
    return _run([str(draft), "--target-model-dir", str(target)], out_dir / "draft.gguf", out_dir)


def convert_target(target: Path, out_dir: Path, outtype: str = "f32") -> dict:
    """The target itself as llama.cpp serves it (OUT_DIR/target.gguf; a tokenizer made when it has none)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return _run([str(target_with_tokenizer(Path(target), out_dir))], out_dir / "target.gguf", out_dir, outtype)


def _run(args: list[str], gguf: Path, cwd: Path, outtype: str = "f32") -> dict:
    """The converter on ARGS (``converter_trace`` records what it did with each checkpoint tensor: ``tensors``,
    checkpoint key -> the GGUF tensors it became, and ``refused_at``, the key it raised on)."""
    from contracts.engines.llamacpp import converter_trace

    trace_file, log_file = gguf.with_suffix(".trace.json"), gguf.with_suffix(".log")
    code = converter_trace.run([str(trace_file), str(converter_dir() / SCRIPT), *args, "--outfile", str(gguf),
                                "--outtype", outtype], cwd, log_file, TIMEOUT_S)
    log = log_file.read_text(errors="replace").splitlines() if log_file.is_file() else []
    decisions = [m.group(0) for line in log if (m := EAGLE3_LINE.search(line))]
    trace = json.loads(trace_file.read_text()) if trace_file.is_file() else {}
    traced = {"tensors": trace.get("tensors", {}), "refused_at": trace.get("refused_at")}
    if code or not gguf.is_file():
        errors = [line for line in log if ERROR_LINE.match(line)]
        last = errors[-1] if errors else (log[-1] if log else
                                          "the converter ran past its time limit" if code == -1 else f"exit {code}")
        return {"converted": False, "refusal": last.strip()[:500], "decisions": decisions, **traced}
    return {"converted": True, "gguf": str(gguf), "decisions": decisions, **traced}


def read_gguf(path: Path) -> dict:
    """The GGUF's architecture, its model metadata (the tokenizer's arrays skipped), every tensor's shape (GGUF
    order: fastest dimension first) and type, where its data starts in the file, and ``d2t``'s values.

    Read field by field from the file: gguf-py's ``GGUFReader`` materialises every element of every array, and the
    target's tokenizer a draft GGUF carries (128256 tokens, 280k merges) made that 300 MB for a Llama-3 vocabulary.
    Type names are gguf-py's own (``GGMLQuantizationType``)."""
    import struct

    import numpy as np
    from gguf import GGMLQuantizationType

    scalars = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    with Path(path).open("rb") as f:
        def unpack(fmt):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def string(keep=True):
            n = unpack("<Q")
            if not keep:
                f.seek(n, 1)
                return None
            return f.read(n).decode("utf-8", errors="replace")

        def value(kind, keep=True):
            if kind == 8:
                return string(keep)
            if kind == 9:
                item, count = unpack("<I"), unpack("<Q")
                if item in scalars and item != 7 and not keep:
                    f.seek(count * struct.calcsize(scalars[item]), 1)
                    return None
                items = [value(item, keep) for _ in range(count)]
                return items if keep else None
            return unpack(scalars[kind])

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        unpack("<I")  # version
        n_tensors, n_kv = unpack("<Q"), unpack("<Q")
        metadata = {}
        for _ in range(n_kv):
            key = string()
            kept = not key.startswith(("GGUF.", "tokenizer."))
            got = value(unpack("<I"), kept)
            if kept:
                metadata[key] = got
        infos = []
        for _ in range(n_tensors):
            name = string()
            dims = [unpack("<Q") for _ in range(unpack("<I"))]
            infos.append((name, dims, unpack("<I"), unpack("<Q")))
        align = int(metadata.get("general.alignment", 32))
        data_start = -(-f.tell() // align) * align
        tensors = {name: {"shape": dims, "type": GGMLQuantizationType(kind).name} for name, dims, kind, _ in infos}
        d2t = None
        for name, dims, kind, offset in infos:
            if name == "d2t":
                dtype = {"I64": np.int64, "I32": np.int32, "F32": np.float32}[GGMLQuantizationType(kind).name]
                f.seek(data_start + offset)
                count = int(np.prod(dims))
                d2t = np.frombuffer(f.read(count * np.dtype(dtype).itemsize), dtype=dtype).tolist()
    return {"architecture": metadata.get("general.architecture"), "metadata": metadata, "tensors": tensors,
            "d2t": d2t, "data_offsets": {name: data_start + offset for name, _, _, offset in infos}}


def observe(draft: Path, target: Path) -> dict:
    """``convert`` and, when it wrote a GGUF, ``read_gguf`` of it (the GGUF itself is not kept)."""
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-gguf-") as scratch:
        result = convert(draft, target, Path(scratch))
        if result["converted"]:
            result.update(read_gguf(Path(result.pop("gguf"))))
        return result


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(json.dumps(observe(Path(args[0]).resolve(), Path(args[1]).resolve())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
