"""Tensor-parallel ranks on a CPU: N processes of this environment joined in one gloo world on the loopback, each
running an engine's own wiring of a draft (``rank-consistency``), and what each rank reports about the drafter it
built. Engine-neutral: an engine's folder gives the function one rank runs (``module:function``); this module starts
the ranks, collects their records, and gives the helpers a rank uses to describe what it serves.

Each rank is a fresh interpreter (``spawn``: no engine state or threads inherited from the parent, which may hold a
one-rank engine world of its own), rendezvous through a private ``file://`` store in a scratch directory. A rank that
raises writes its error (whether the engine's own code raised it) and exits; the others, then waiting in a
collective, are stopped.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from contracts.engines.errors import EngineBuildError, ReplayError

RANK_TIMEOUT_S = 900.0
GRACE_S = 20.0  # how long the other ranks may still finish once one has failed
ROLE_KEYS = {"embed": "embed_tokens.weight", "lm_head": "lm_head.weight"}  # a role's tensor, by its name's ending


def _child(entry: str, rank: int, tp: int, rendezvous: str, payload: dict, out: str) -> None:
    """One rank: ENTRY(rank, tp, rendezvous, payload) -> dict, written to OUT with the rank's peak memory."""
    import resource
    import traceback

    from contracts.engines.errors import raised_by_engine

    module, function = entry.split(":")
    made = _shared_memory_kept()
    try:
        record = getattr(importlib.import_module(module), function)(rank, tp, rendezvous, payload)
        record["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    except BaseException as e:  # noqa: BLE001  (the parent reports it: the engine's refusal or this replay's failure)
        traceback.print_exc()
        engine = payload.get("engine", "")
        Path(out).write_text(json.dumps({"rank": rank, "error": f"{type(e).__name__}: {e}"[:600],
                                         "by_engine": bool(engine) and raised_by_engine(e, engine)}))
        _unlink(made)
        sys.stderr.flush()
        os._exit(1)
    Path(out).write_text(json.dumps(record))
    _unlink(made)
    sys.stderr.flush()
    os._exit(0)  # past the engine's atexit hooks (its process groups are torn down with the process)


def _shared_memory_kept() -> list[str]:
    """The names of the shared-memory segments this rank's engine makes (SGLang's CPU groups make one), recorded as
    they are registered with multiprocessing's resource tracker, so the rank removes them as it exits."""
    from multiprocessing import resource_tracker

    made: list[str] = []
    register = resource_tracker.register

    def recorded(name, rtype):
        if rtype == "shared_memory":
            made.append(name)
        return register(name, rtype)

    resource_tracker.register = recorded
    return made


def _unlink(names: list[str]) -> None:
    import _posixshmem
    from multiprocessing import resource_tracker

    for name in names:
        try:
            _posixshmem.shm_unlink(name)
        except OSError:
            pass
        resource_tracker.unregister(name, "shared_memory")


def run_ranks(entry: str, tp: int, payload: dict, timeout: float = RANK_TIMEOUT_S) -> tuple[list[dict], float]:
    """Run ENTRY in TP ranks; each rank's record, in rank order, and the wall time. Raises ``EngineBuildError``
    when a rank's engine code refused (with the rank), ``ReplayError`` when a rank failed otherwise or hung."""
    import multiprocessing

    start = time.perf_counter()
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-ranks-") as work:
        rendezvous = str(Path(work) / f"rendezvous-{os.getpid()}-{time.monotonic_ns()}")
        outs = [str(Path(work) / f"rank{r}.json") for r in range(tp)]
        procs = [spawn.Process(target=_child, args=(entry, r, tp, rendezvous, payload, outs[r]), daemon=True)
                 for r in range(tp)]
        for p in procs:
            p.start()
        deadline, failed_at = start + timeout, None
        while any(p.is_alive() for p in procs):
            now = time.perf_counter()
            if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
                failed_at = now
            if now > deadline or (failed_at is not None and now - failed_at > GRACE_S):
                break
            time.sleep(0.2)
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        records = [json.loads(Path(o).read_text()) if Path(o).exists() else None for o in outs]
        for segment in Path("/dev/shm").glob(f"{Path(rendezvous).name}*"):  # a rank's shared memory (vLLM's CPU
            segment.unlink(missing_ok=True)  # all-reduce names its segments from the rendezvous), past its exit
    seconds = time.perf_counter() - start
    errors = [r for r in records if r is not None and "error" in r]
    if errors:
        first = errors[0]
        message = f"rank {first['rank']} of {tp}: {first['error']}"
        raise EngineBuildError(message) if first["by_engine"] else ReplayError(message)
    missing = [r for r, record in enumerate(records) if record is None]
    if missing:
        raise ReplayError(f"rank(s) {missing} of {tp} ended without a record ({[procs[r].exitcode for r in missing]}; "
                          f"{seconds:.0f} s)")
    return [r for r in records if r is not None], seconds


# ---- inside a rank ---------------------------------------------------------------------------------------------

def gathered(local_rows, group=None):
    """Every rank's LOCAL_ROWS concatenated in rank order (``torch.distributed.all_gather_object`` over gloo: the
    shards may differ in length), on every rank."""
    import torch
    import torch.distributed as dist

    parts: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(parts, local_rows.detach().to("cpu").contiguous(), group=group)
    return torch.cat(parts, dim=0)


def fingerprint_of(tensor, dtype: str) -> dict:
    """``contracts.fingerprint.fingerprint`` of a whole 2-D tensor, chunked as a file tensor of its shape is."""
    from contracts.fingerprint import chunk_rows_for, fingerprint, tensor_chunks

    step = chunk_rows_for(tensor.shape)
    return fingerprint(tensor_chunks(tensor, step), dtype, step)


def file_fingerprint_of(directory: Path, key: str | None, rows: int, dtype: str) -> dict | None:
    """The fingerprint of tensor KEY's first ROWS rows in DIRECTORY's weights, cast to DTYPE as the engine casts
    it (None: no such tensor)."""
    from contracts.checkpoint import Checkpoint
    from contracts.fingerprint import chunk_rows_for, file_chunks, fingerprint

    if key is None:
        return None
    ckpt = Checkpoint.open(directory, require_weights=False)
    if key not in ckpt.tensors:
        return None
    info = ckpt.tensors[key]
    step = chunk_rows_for(info.shape)
    return fingerprint(file_chunks(ckpt.path / info.file, key, step, rows), dtype, step)


def rows_differing(served, directory: Path, suffix: str) -> dict | None:
    """How many rows of SERVED (a 2-D tensor, every global row in order) differ from the tensor named ``*SUFFIX`` in
    DIRECTORY's weights cast to SERVED's dtype, and the first of them (None: no such tensor). Read in row chunks."""
    import torch

    from contracts.checkpoint import Checkpoint
    from contracts.fingerprint import chunk_rows_for, file_chunks

    key = key_ending(directory, suffix)
    if key is None:
        return None
    ckpt = Checkpoint.open(directory, require_weights=False)
    info = ckpt.tensors[key]
    step, start, differing, first = chunk_rows_for(info.shape), 0, 0, None
    for chunk in file_chunks(ckpt.path / info.file, key, step, served.shape[0]):
        chunk = torch.as_tensor(chunk).to(served.dtype)
        mine = served[start:start + chunk.shape[0]]
        rows = (mine != chunk).reshape(chunk.shape[0], -1).any(dim=1) if mine.shape == chunk.shape else \
            torch.ones(chunk.shape[0], dtype=torch.bool)
        if first is None and bool(rows.any()):
            first = start + int(rows.nonzero()[0])
        differing += int(rows.sum())
        start += chunk.shape[0]
    if start < served.shape[0]:  # the file's tensor is shorter: every row past it differs
        first = start if first is None else first
        differing += served.shape[0] - start
    return {"rows": differing, "of": int(served.shape[0]), "first": first}


def differences(served, draft: Path, target: Path, role: str) -> dict:
    """``rows_differing`` of SERVED against the draft's own tensor and the target's for ROLE."""
    return {"own": rows_differing(served, draft, ROLE_KEYS[role]),
            "target": rows_differing(served, target, ROLE_KEYS[role])}


def key_ending(directory: Path, suffix: str) -> str | None:
    """The shortest tensor name in DIRECTORY's weights ending with SUFFIX (the language model's, not a tower's)."""
    from contracts.checkpoint import Checkpoint

    keys = sorted((k for k in Checkpoint.open(directory, require_weights=False).tensors if k.endswith(suffix)), key=len)
    return keys[0] if keys else None



def candidates(ranks: list[dict], draft: Path, target: Path) -> dict:
    """What each role could serve, as the ranks' served fingerprints are taken (their rows and dtype): the draft's own
    tensor and the target's, read from their files (what TP=1 serves is one of them)."""
    found = {}
    for role, suffix in ROLE_KEYS.items():
        like = ranks[0][role]["served"]
        found[role] = {"own": file_fingerprint_of(draft, key_ending(draft, suffix), like["rows"], like["dtype"]),
                       "target": file_fingerprint_of(target, key_ending(target, suffix), like["rows"], like["dtype"])}
    return found
