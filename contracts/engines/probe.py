"""The environment builder's probe: run an engine adapter's own steps once, inside a newly made environment, and
say which module the engine's EAGLE-3 path could not import (``contracts.environments.recipes``: the import closure).

Every step a contract takes is run on the canonical bundled draft and tiny Llama target (``canonical``) (load, config, aux capture,
embed/head wiring, the reference forward); a missing module shows either as the exception itself or inside the
engine refusal the adapter records, so both are searched. Prints one JSON line:
``{"ok": true}``, ``{"missing": MODULE, "step": OP, "where": "FILE:LINE"}`` (the engine's own statement that
imports it, when the traceback shows one) or ``{"error": MESSAGE, "step": OP}``.

    python -m contracts.engines.probe ENGINE    (an engine's name: its profile, contracts/engines/<name>/profile.py)
"""

from __future__ import annotations

import json
import re
import sys
import traceback

from contracts.engine_spec import EngineSpec
from contracts.engines.canonical import CANONICAL_DRAFT, CANONICAL_REFERENCE, CANONICAL_TARGET

MISSING = re.compile(r"No module named '([^']+)'")


def _steps(engine):
    draft, target, reference = CANONICAL_DRAFT, CANONICAL_TARGET, CANONICAL_REFERENCE
    yield "info", lambda: engine.info()
    if not draft.is_dir():  # an installed package without the fixtures: the imports the first step made
        return
    yield "load", lambda: engine.load(draft, target)
    yield "config", lambda: engine.config(draft, json.loads((draft / "config.json").read_text()), {}, None)
    yield "aux", lambda: engine.aux(draft, target, [2, 4, 5])
    yield "embed_head", lambda: engine.embed_head(draft, target)
    yield "forward", lambda: engine.forward(draft, target, reference)


def _where(error: BaseException, spec: EngineSpec) -> dict:
    """The engine's own statement the import failed in (``sglang/srt/layers/rotary_embedding.py:9``)."""
    package = spec.profile.import_name
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f"/{package}/" in f.filename]
    if not frames:
        return {}
    last = frames[-1]
    return {"where": f"{package}/{last.filename.rsplit(f'/{package}/', 1)[1]}:{last.lineno}"}


def probe(spec: EngineSpec) -> dict:
    from contracts.engines.errors import EngineBuildError
    from contracts.engines.inprocess import InProcess

    for step, run in _steps(InProcess(spec)):
        try:
            result = run()
        except ModuleNotFoundError as e:
            named = MISSING.search(str(e))
            return {"missing": e.name or (named.group(1) if named else str(e)), "step": step, **_where(e, spec)}
        except EngineBuildError as e:  # the engine's refusal: a missing module inside it is what the closure adds
            found = MISSING.search(str(e))
            if found:
                return {"missing": found.group(1), "step": step}
            return {"error": f"{type(e).__name__}: {e}"[:500], "step": step}
        except Exception as e:  # noqa: BLE001  (reported: the sweep records what the release cannot do)
            found = MISSING.search(traceback.format_exc())
            if found:
                cause = e.__context__ if isinstance(e.__context__, ModuleNotFoundError) else e
                return {"missing": found.group(1), "step": step, **_where(cause, spec)}
            return {"error": f"{type(e).__name__}: {e}"[:500], "step": step}
        found = MISSING.search(json.dumps(result.to_dict() if hasattr(result, "to_dict") else result, default=str))
        if found:
            return {"missing": found.group(1), "step": step}
    return {"ok": True}


def main() -> int:
    from contracts.engines.channel import result_channel

    protocol = result_channel()
    try:
        answer = probe(EngineSpec.parse(sys.argv[1]))  # the engine this environment holds
    except ModuleNotFoundError as e:  # the adapter's own imports (e.g. the engine's package itself)
        answer = {"missing": e.name, "step": "import"}
    protocol.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
