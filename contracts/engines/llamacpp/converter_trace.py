"""llama.cpp's converter run as a user runs it, recording what it did with every checkpoint tensor.

Contract served: ``key-naming`` (and what ``load`` reports for llama.cpp). The converter decides which tensors reach
the GGUF: its model class's ``index_tensors`` renames (``midlayer.*`` / ``layers.0.*`` to ``model.layers.0.*``) and
its ``modify_tensors`` maps each name to a GGUF tensor, keeps one aside (``d2t``, written later as int64), skips one
on purpose (``t2d``) or raises ("Can not map tensor"). Both methods are wrapped, never replaced: the converter's own
code runs and its answers are recorded, keyed by the checkpoint's own tensor names (the renamed ones traced back by
the identity of the loader callable the rename kept). The script is imported as a module and its ``main`` called with
the user's arguments, in a process of its own (``run``: a child of a fork server that imported it once).

    python -m contracts.engines.llamacpp.converter_trace TRACE_JSON CONVERTER_SCRIPT ARGS...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def traced(trace: dict, model_base) -> None:
    """Wrap the converter's MODEL_BASE so every model class it picks reports its renames and mappings into TRACE."""
    index_tensors, prepare_tensors = model_base.index_tensors, model_base.prepare_tensors

    def recording_index(self, *args, **kwargs):
        tensors = index_tensors(self, *args, **kwargs)
        if "original" not in trace:  # the innermost call: the checkpoint's own names
            trace["original"] = {id(gen): name for name, gen in tensors.items()}
        return tensors

    def recording_prepare(self, *args, **kwargs):
        original = trace.get("original", {})
        renamed = {name: original.get(id(gen), name) for name, gen in getattr(self, "model_tensors", {}).items()}
        modify = self.modify_tensors

        def recording_modify(data, name, bid):
            key = renamed.get(name, name)
            mapped = trace["tensors"].setdefault(key, [])
            try:
                for new_name, out in modify(data, name, bid):
                    mapped.append(new_name)
                    yield new_name, out
            except Exception as e:
                trace["refused_at"] = key
                trace["refusal"] = f"{type(e).__name__}: {e}"
                raise

        self.modify_tensors = recording_modify
        return prepare_tensors(self, *args, **kwargs)

    model_base.index_tensors = recording_index
    model_base.prepare_tensors = recording_prepare


def converter_module(script: str):
    """The converter script imported as a module (its ``main`` not run), from its own folder."""
    import importlib

    folder = str(Path(script).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(Path(script).stem)


def main(argv: list[str]) -> int:
    out, script, args = Path(argv[0]), argv[1], argv[2:]
    trace: dict = {"tensors": {}}
    code = 0
    try:
        converter = converter_module(script)
        traced(trace, converter.ModelBase)
        sys.argv = [script, *args]
        converter.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        trace.pop("original", None)
        out.write_text(json.dumps(trace))
    return code


def run(argv: list[str], cwd: Path, log: Path, timeout: float) -> int:
    """``main(ARGV)`` in a process of its own, forked from a server that imported the converter once
    (``contracts.engines.llamacpp.forked``). Returns its exit code (-1: it ran past TIMEOUT)."""
    from contracts.engines.llamacpp import forked

    return forked.run(main, (argv,), cwd, log, timeout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
