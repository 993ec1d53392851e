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
    """The GGUF's architecture, its model metadata (the tokenizer's arrays left out), every tensor's shape (GGUF
    order: fastest dimension first) and type, and ``d2t``'s values."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith(("GGUF.", "tokenizer.")):
            continue
        value = field.contents()
        metadata[key] = value.item() if hasattr(value, "item") else value
    tensors = {t.name: {"shape": [int(n) for n in t.shape], "type": t.tensor_type.name} for t in reader.tensors}
    d2t = next((t.data.tolist() for t in reader.tensors if t.name == "d2t"), None)
    return {"architecture": metadata.get("general.architecture"), "metadata": metadata, "tensors": tensors,
            "d2t": d2t}


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
