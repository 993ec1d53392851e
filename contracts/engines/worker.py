"""An engine worker: an engine adapter (SGLang's or vLLM's) run inside one release's environment, answering a
parent process.

Protocol (one JSON object per line): the parent writes ``{"id", "op", "args"}`` to stdin; the worker answers
``{"id", "result": <observation dict>}`` or ``{"id", "error": {"kind", "message"}}`` where ``kind`` is
``EngineBuildError`` / ``TargetBuildError`` (the engine's own refusal, an observation), ``ReplayError`` (this
suite's replay cannot run on this release: not judged) or ``internal``.
The first line the worker writes is ``{"ready": {"name", "version"}}``. Anything the engine prints goes to
stderr: the protocol has stdout to itself.

    python -m contracts.engines.worker [ENGINE]    (started by contracts.engines.remote.WorkerEngine)
"""

from __future__ import annotations

import json
import sys
import traceback

OPS = ("path", "load", "aux", "config", "embed_head", "forward", "surface", "ranks")


def _answer(engine, request: dict) -> dict:
    from contracts.checkpoint import WeightsNotFetched
    from contracts.engines.errors import EngineBuildError, ReplayError, TargetBuildError

    op, args = request.get("op"), request.get("args") or {}
    if op not in OPS:
        return {"error": {"kind": "internal", "message": f"unknown op {op!r}"}}
    try:
        found = getattr(engine, op)(**args)
        return {"result": [o.to_dict() for o in found] if isinstance(found, list) else found.to_dict()}
    except TargetBuildError as e:  # (a subclass of EngineBuildError: test it first)
        return {"error": {"kind": "TargetBuildError", "message": str(e), "needs": e.needs}}
    except EngineBuildError as e:
        return {"error": {"kind": "EngineBuildError", "message": str(e)}}
    except ReplayError as e:
        return {"error": {"kind": "ReplayError", "message": str(e)}}
    except WeightsNotFetched as e:  # a Hub draft's tensor left unread (a BaseException: no adapter handler took it)
        return {"error": {"kind": "WeightsNotFetched", "message": str(e)}}
    except Exception as e:  # a bug of this suite on this release: the parent reports it in one line
        return {"error": {"kind": "internal", "message": f"{type(e).__name__}: {e}",
                          "traceback": traceback.format_exc()[-4000:]}}


def main(argv: list[str] | None = None) -> int:
    from contracts.memory import return_large_frees

    return_large_frees()
    argv = sys.argv[1:] if argv is None else argv
    from contracts.engines.channel import result_channel

    protocol = result_channel()
    from contracts.engine_spec import EngineSpec
    from contracts.engines.inprocess import InProcess

    engine = InProcess(EngineSpec.parse(argv[0]) if argv else None)  # the engine this worker's environment holds
    try:
        info = engine.info()
    except Exception as e:  # noqa: BLE001  (reported to the parent, which fails in one line)
        protocol.write(json.dumps({"error": {"kind": "internal", "message": f"{type(e).__name__}: {e}"}}) + "\n")
        return 1
    protocol.write(json.dumps({"ready": info}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        reply = _answer(engine, request)
        reply["id"] = request.get("id")
        protocol.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
