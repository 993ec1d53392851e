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
MAX_RANKS_VAR = "EAGLE3_CONTRACTS_MAX_RANKS"
RANK_MB = 800  # an engine rank with a tiny draft and target: about 600-720 MB measured (vLLM 0.32.0, SGLang 0.5.23)
GRACE_S = 20.0  # how long the other ranks may still finish once one has failed
ROLE_KEYS = {"embed": "embed_tokens.weight", "lm_head": "lm_head.weight"}  # a role's tensor, by its name's ending


def max_process_ranks() -> int:
    """How many ranks this machine runs as processes (``EAGLE3_CONTRACTS_MAX_RANKS``, else as many as its memory holds
    at ``RANK_MB`` each with half of it left free, at least 2 and at most 4: a larger TP size is judged from the
    engine's shard-range functions in one process where its adapter can)."""
    given = os.environ.get(MAX_RANKS_VAR, "")
    if given.strip().isdigit():
        return max(1, int(given))
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (ValueError, OSError):
        available = 4 * RANK_MB * 2
    return max(2, min(4, int(available / 2 // RANK_MB)))


def _child(entry: str, rank: int, tp: int, rendezvous: str, payload: dict, out: str) -> None:
    """One rank: ENTRY(rank, tp, rendezvous, payload) -> dict, written to OUT with the rank's peak memory."""
    import resource
    import traceback

    module, function = entry.split(":")
    if Path("/sys/class/net/lo").exists():  # gloo's connections between the ranks on the loopback, not the host's address
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    made = _shared_memory_kept()
    try:
        record = getattr(importlib.import_module(module), function)(rank, tp, rendezvous, payload)
        record["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    except BaseException as e:  # noqa: BLE001  (the parent reports it: the engine's refusal or this replay's failure)
        traceback.print_exc()
        Path(out).write_text(json.dumps({"rank": rank, **failure(e, payload.get("engine", ""))}))
        _unlink(made)
        sys.stderr.flush()
        os._exit(1)
    Path(out).write_text(json.dumps(record))
    _unlink(made)
    sys.stderr.flush()
    os._exit(0)  # past the engine's atexit hooks (its process groups are torn down with the process)


def failure(e: BaseException, engine: str) -> dict:
    """``{"error", "kind"}`` of an exception a rank met: ``TargetBuildError`` / ``EngineBuildError`` (the engine's own
    refusal, as the one-rank adapters raise it, or raised inside the engine's code), else ``ReplayError``."""
    from contracts.engines.errors import TargetBuildError, engine_words, raised_by_engine

    if isinstance(e, TargetBuildError):
        kind = "TargetBuildError"
    elif isinstance(e, EngineBuildError) or (engine and raised_by_engine(e, engine)):
        kind = "EngineBuildError"
    else:
        kind = "ReplayError"
    return {"error": engine_words(e)[:600], "kind": kind}


def agreed(build, engine: str):
    """BUILD() in every rank, then every rank told whether all succeeded (a gloo ``all_gather_object``), before any
    collective that a failed rank would never join: ``(value, None)``, or ``(None, {"error", "kind", "rank"})`` of the
    first rank that failed, on every rank."""
    import torch.distributed as dist

    try:
        value, mine = build(), None
    except Exception as e:  # noqa: BLE001  (reported below, by every rank alike)
        import traceback

        traceback.print_exc()
        value, mine = None, failure(e, engine)
    states: list = [None] * dist.get_world_size()
    dist.all_gather_object(states, mine)
    failed = next(({**s, "rank": r} for r, s in enumerate(states) if s is not None), None)
    return (None, failed) if failed else (value, None)


UNLINKABLE = ("shared_memory", "semaphore")  # what a rank's engine may leave for the resource tracker


def _shared_memory_kept() -> list[tuple[str, str]]:
    """The named shared-memory segments and semaphores this rank's engine makes (SGLang's CPU groups make a segment),
    recorded as they are registered with multiprocessing's resource tracker, so the rank removes what is left of them
    as it exits (past the engine's own teardown, which ``os._exit`` skips)."""
    from multiprocessing import resource_tracker

    made: list[tuple[str, str]] = []
    register, unregister = resource_tracker.register, resource_tracker.unregister

    def recorded(name, rtype):
        if rtype in UNLINKABLE:
            made.append((name, rtype))
        return register(name, rtype)

    def removed(name, rtype):  # the engine removed its own
        if (name, rtype) in made:
            made.remove((name, rtype))
        return unregister(name, rtype)

    resource_tracker.register, resource_tracker.unregister = recorded, removed
    return made


def _unlink(made: list[tuple[str, str]]) -> None:
    import _multiprocessing
    import _posixshmem
    from multiprocessing import resource_tracker

    for name, rtype in list(made):
        try:
            (_posixshmem.shm_unlink if rtype == "shared_memory" else _multiprocessing.sem_unlink)(name)
        except OSError:
            pass
        resource_tracker.unregister(name, rtype)


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
        raise as_raised(errors[0], tp)
    missing = [r for r, record in enumerate(records) if record is None]
    if missing:
        raise ReplayError(f"rank(s) {missing} of {tp} ended without a record ({[procs[r].exitcode for r in missing]}; "
                          f"{seconds:.0f} s)")
    return [r for r in records if r is not None], seconds


def as_raised(found: dict, tp: int) -> Exception:
    """The exception a rank's ``failure`` stands for, said with the rank."""
    return raised_as(found["kind"], f"rank {found['rank']} of {tp}: {found['error']}")


def raised_as(kind: str | None, message: str) -> Exception:
    """``TargetBuildError`` / ``EngineBuildError`` / ``ReplayError`` (KIND, as ``failure`` names it) of MESSAGE."""
    from contracts.engines.errors import TargetBuildError

    return {"TargetBuildError": TargetBuildError, "EngineBuildError": EngineBuildError}.get(kind or "",
                                                                                          ReplayError)(message)


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


def shard_digest(module, rows: list[int]) -> str:
    """The checksum of the rows of MODULE's weight this rank holds for the global ROWS [start, end) (its padding left
    out), in the dtype it serves them: what this rank serves, beside what the ranks serve together."""
    local = module.weight[: rows[1] - rows[0]]
    return fingerprint_of(local, str(local.dtype).removeprefix("torch."))["digest"]


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
    from contracts.checkpoint import key_ending as ending

    return ending(Checkpoint.open(directory, require_weights=False).tensors, suffix)



def observations_of(records: list[dict], drafts: list[str], target: Path, engine: dict, tp: int, seconds: float,
                    runner: str | None, wiring: str) -> list:
    """A ``RankObservation`` per draft from the ranks' RECORDS (each rank's ``{"rank", "peak_rss_mb", "drafts":
    {draft: its record, or {"failed": ...}}}``): a draft any rank failed on carries that rank's error."""
    from contracts.observations import RankObservation

    found = []
    for draft in drafts:
        failed = next((r["drafts"][draft]["failed"] for r in records if "failed" in r["drafts"][draft]), None)
        if failed:
            found.append(RankObservation(engine=engine, tp_size=tp, how="processes", runner=runner,
                                         error=f"rank {failed['rank']} of {tp}: {failed['error']}",
                                         error_kind=failed["kind"]))
            continue
        ranks = [{"rank": r["rank"], "peak_rss_mb": r["peak_rss_mb"], **r["drafts"][draft]} for r in records]
        found.append(RankObservation(engine=engine, tp_size=tp, how="processes", runner=runner, ranks=ranks,
                                     candidates=candidates(ranks, Path(draft), target), wiring=wiring,
                                     seconds=round(seconds, 2)))
    return found


def candidates(ranks: list[dict], draft: Path, target: Path) -> dict:
    """What each role could serve, as the ranks' served fingerprints are taken (their rows and dtype): the draft's own
    tensor and the target's, read from their files (what TP=1 serves is one of them)."""
    found = {}
    for role, suffix in ROLE_KEYS.items():
        like = ranks[0][role]["served"]
        found[role] = {"own": file_fingerprint_of(draft, key_ending(draft, suffix), like["rows"], like["dtype"]),
                       "target": file_fingerprint_of(target, key_ending(target, suffix), like["rows"], like["dtype"])}
    return found
