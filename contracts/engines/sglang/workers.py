"""Which speculative worker an SGLang release serves an EAGLE-3 draft with by default on a GPU, from the release's
own code.

Prevents a verdict about a worker no deployment runs: releases 0.5.4-0.5.16 ship two EAGLE workers, and which one a
server constructs follows its own server arguments (``EAGLEWorker`` unless the overlap scheduler is on, which
0.5.9 turns off for EAGLE-3 unless ``SGLANG_ENABLE_SPEC_V2`` is set; 0.5.17 on construct ``EAGLEWorkerV2`` only).
The answer is the release's ``SpeculativeAlgorithm.create_worker`` given the release's own ``ServerArgs`` for
``--speculative-algorithm EAGLE3`` on a CUDA device (its ``__post_init__`` decides ``disable_overlap_schedule``);
a release without ``create_worker`` (0.5.3) constructs ``EAGLEWorker`` in its scheduler.
"""

from __future__ import annotations

import os
from pathlib import Path

V1_WORKER, V2_WORKER = "EAGLEWorker", "EAGLEWorkerV2"


def default_worker(draft_dir: Path, target_dir: Path | None) -> tuple[str, str]:
    """(worker class name, how the release decided it) for serving DRAFT_DIR as the EAGLE-3 draft of TARGET_DIR."""
    from contracts.engines.sglang.context import engine_version, ensure_context

    ensure_context()
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    version = engine_version()
    algorithm = SpeculativeAlgorithm.from_string("EAGLE3")
    if not hasattr(algorithm, "create_worker"):
        return V1_WORKER, (f"SGLang {version} has no SpeculativeAlgorithm.create_worker: its scheduler constructs "
                           f"{V1_WORKER} for EAGLE-3")
    from sglang.srt.server_args import ServerArgs

    saved = dict(os.environ)  # (its __post_init__ may set SGLang's own environment switches)
    try:
        args = ServerArgs(model_path=str(target_dir or draft_dir), speculative_algorithm="EAGLE3",
                          speculative_draft_model_path=str(draft_dir), device="cuda", skip_tokenizer_init=True)
        worker = algorithm.create_worker(args).__name__
    except Exception as e:  # noqa: BLE001  (the release's server arguments cannot be made here: said)
        return V2_WORKER if _has_v2_worker() else V1_WORKER, (
            f"SGLang {version}'s ServerArgs for EAGLE3 could not be made on this machine ({type(e).__name__}: "
            f"{str(e)[:200]}): judged on the worker this release has")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    overlap = "off" if getattr(args, "disable_overlap_schedule", None) else "on"
    return worker, (f"SGLang {version}'s SpeculativeAlgorithm.create_worker with its own ServerArgs for "
                    f"--speculative-algorithm EAGLE3 on a CUDA device (overlap scheduler {overlap})")


def _has_v2_worker() -> bool:
    import importlib.util

    return importlib.util.find_spec("sglang.srt.speculative.eagle_worker_v2") is not None


def observe_path(draft_dir: Path, target_dir: Path | None):
    from contracts.engines.sglang.context import engine_version
    from contracts.observations import PathObservation

    worker, why = default_worker(Path(draft_dir), None if target_dir is None else Path(target_dir))
    import importlib.util

    available = [w for w, module in ((V1_WORKER, "eagle_worker"), (V2_WORKER, "eagle_worker_v2"))
                 if importlib.util.find_spec(f"sglang.srt.speculative.{module}") is not None]
    return PathObservation(engine={"name": "sglang", "version": engine_version()}, kind="worker", judged=worker,
                           label=worker, default=worker, default_label=worker, default_why=why, available=available)
