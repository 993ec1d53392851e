"""A draft or target published on the Hugging Face Hub, judged where it lives: ``hf:ORG/NAME[@REVISION]``.

Read through ``huggingface_hub`` (its endpoint, ``HF_ENDPOINT``; its token; its cache for whole files): the repository
at the revision asked is resolved to one commit, its ``config.json`` and small side files are downloaded, and of each
safetensors file only the header is read, by ranged GETs, into a sparse local copy of the file (same size, same
offsets; the bytes not read are holes). The tensors a check reads whole are then read by ranges too: every tensor of
a draft small enough for the engine to be traced on real weights, else those the engine's loader is given whole on
the meta device (``contracts.engines.tracing.READ_WHOLE_ELEMENTS`` elements or fewer, and ``d2t``/``t2d`` at any
length). A target's weights are downloaded only when small (``TARGET_WHOLE_BYTES``); otherwise it is judged from its
config, as a local config-only target is.

What was not read is listed beside the copy (``NOT_FETCHED``); ``contracts.checkpoint`` refuses to read it
(``WeightsNotFetched``): a contract that needs it is not judged and says ``--download``, which fetches every file
(``snapshot_download``). Pickle weights cannot be read by ranges: they are downloaded when small, else ``--download``.

The copy lives in this suite's cache (``EAGLE3_CONTRACTS_HUB_CACHE``, default ``~/.cache/eagle3-contracts/hub``), one
directory per commit, made beside and renamed into place when complete: an error part-way (a missing repository, a
revision that does not exist, a network error: one line, exit 2) leaves nothing behind. The bytes fetched are counted
and reported ("judged from 3.1 MB of a 1.9 GB drafter").
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contracts.checkpoint import (ENGINE_SET_OFFLINE, NOT_FETCHED, NOT_WEIGHTS, Checkpoint, InputError, TensorInfo,
                                  header_length, read_json, read_safetensors_header)

PREFIX = "hf:"
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
SIDE_FILE_BYTES = 1 << 20  # config-like files of the draft's folder fetched whole (never weights)
TARGET_WHOLE_BYTES = 64 << 20  # a target's weights up to this size are downloaded (a tiny target is judged with them)
DRAFT_FOLDERS = ("", "model/consolidated")  # where a repository keeps its config.json (NeMo Automodel: consolidated)
TIMEOUT_S = 60.0


def is_hub(text) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX)


@dataclass(frozen=True)
class HubRef:
    repo: str
    revision: str | None = None

    @classmethod
    def parse(cls, text: str) -> "HubRef":
        body = text[len(PREFIX):]
        repo, _, revision = body.partition("@")
        if not REPO_ID.match(repo) or ".." in repo or (revision == "" and "@" in body):
            raise InputError(f"{text}: not a Hub repository (give hf:ORG/NAME or hf:ORG/NAME@REVISION)")
        return cls(repo, revision or None)

    def __str__(self) -> str:
        return f"{PREFIX}{self.repo}" + (f"@{self.revision}" if self.revision else "")


@dataclass
class Fetched:
    """A Hub repository made local: ``path`` is what the check opens."""

    ref: HubRef
    commit: str
    path: Path
    role: str
    weight_bytes: int  # the repository's weight files, as published
    held_bytes: int  # of the repository, what the local copy holds (headers, side files, tensors read)
    fetched_bytes: int  # of that, fetched by this run (the rest was cached)
    not_fetched: int  # tensors left unread (0: the weights are whole)
    downloaded: bool  # --download: every file

    @property
    def pinned(self) -> str:
        """``hf:ORG/NAME@COMMIT``: this very copy, as a command names it again."""
        return f"{PREFIX}{self.ref.repo}@{self.commit}"

    def to_dict(self) -> dict:
        return {"spec": self.pinned, "repo": self.ref.repo, "revision": self.ref.revision, "commit": self.commit, "path": str(self.path),
                "weight_bytes": self.weight_bytes, "held_bytes": self.held_bytes,
                "fetched_bytes": self.fetched_bytes, "tensors_not_fetched": self.not_fetched,
                "downloaded": self.downloaded, "summary": self.summary()}

    def summary(self) -> str:
        what = "drafter" if self.role == "draft" else "target"
        if self.downloaded:
            how = "every file downloaded"
        elif self.weight_bytes == 0:
            how = "its config: the repository has no weights"
        elif self.held_bytes < self.weight_bytes and self.role == "target" and self.not_fetched == 0:
            how = "its config; its weights not fetched (--download fetches them)"
        else:
            how = "config and safetensors headers, " + (
                "every tensor" if not self.not_fetched else f"the small tensors ({self.not_fetched} left unread)"
            ) + " read by ranges"
        return (f"{self.ref}@{self.commit[:10]}: judged from {human(self.held_bytes)} of a {human(self.weight_bytes)} "
                f"{what} ({how}; {human(self.fetched_bytes)} fetched by this run)")


FETCHED: dict[str, Fetched] = {}  # local path -> what it was fetched from (the report names it)


def human(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def local(text, *, role: str = "draft", download: bool = False) -> str:
    """TEXT itself, or, for ``hf:...``, the local directory judged in its place (fetched as the module says)."""
    if not is_hub(text):
        return text
    fetched = resolve(text, role=role, download=download)
    FETCHED[str(fetched.path)] = fetched
    return str(fetched.path)


def shown(path) -> tuple[str, str]:
    """(what a command a report prints names for PATH, the stem of an output beside it): ``hf:ORG/NAME@COMMIT`` and
    ``./NAME`` for a Hub repository's local copy, else the path itself twice."""
    fetched = FETCHED.get(str(path))
    if fetched is None:
        text = str(path).rstrip("/")
        return text, text
    return fetched.pinned, f"./{fetched.ref.repo.rpartition('/')[2]}"


def record(report: dict) -> dict:
    """REPORT with ``hub``: what its draft and target were fetched from, and how many bytes it took."""
    found = {role: FETCHED[str(report.get(key))] for role, key in (("draft", "checkpoint"), ("target", "target"))
             if str(report.get(key)) in FETCHED}
    if found:
        report["hub"] = {role: fetched.to_dict() for role, fetched in found.items()}
        if "draft" in found and not report.get("name"):
            report["name"] = str(found["draft"].ref)
    return report


def cache_root() -> Path:
    return Path(os.environ.get("EAGLE3_CONTRACTS_HUB_CACHE") or Path.home() / ".cache" / "eagle3-contracts" / "hub")


def resolve(text: str, *, role: str = "draft", download: bool = False) -> Fetched:
    ref = HubRef.parse(text)
    _DOWNLOADED.clear()  # what this resolution fetches whole (an index file included) is counted from here
    with _hub_errors(ref), _online():
        from huggingface_hub import HfApi

        info = HfApi(endpoint=_endpoint()).model_info(ref.repo, revision=ref.revision, files_metadata=True,
                                                      timeout=TIMEOUT_S)
        commit = info.sha or ref.revision or "main"
        sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
        folder = _draft_folder(ref, sizes)
        weights = _weight_files(ref, commit, folder, sizes)
        weight_bytes = sum(sizes[w] for w in weights)
        if download:
            return _download(ref, commit, folder, sizes, weights, role)
        return _by_ranges(ref, commit, folder, sizes, weights, weight_bytes, role)


@contextlib.contextmanager
def _online():
    """The Hub reachable while a user's hf: input is read, where only an engine's in-process context turned it off
    (``checkpoint.offline_for_engine``: SGLang's and vLLM's set ``HF_HUB_OFFLINE`` for their own loads); an
    ``HF_HUB_OFFLINE`` the user set is honoured (one line, exit 2)."""
    import huggingface_hub.constants as constants

    if os.environ.get(ENGINE_SET_OFFLINE) != "1":
        yield
        return
    saved = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved


def _endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


class _hub_errors:
    """Every way reaching the Hub fails, as one line (``InputError``, exit 2)."""

    def __init__(self, ref: HubRef):
        self.ref = ref

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if e is None or isinstance(e, InputError) or not isinstance(e, Exception):
            return False
        from huggingface_hub.utils import (EntryNotFoundError, GatedRepoError, HfHubHTTPError,
                                           RepositoryNotFoundError, RevisionNotFoundError)

        where = _endpoint() or "the Hugging Face Hub"
        if isinstance(e, GatedRepoError):
            raise InputError(f"{self.ref}: a gated repository on {where}: accept its terms on its page and give a "
                             "token (HF_TOKEN, or `hf auth login`)") from None
        if isinstance(e, RepositoryNotFoundError):
            raise InputError(f"{self.ref}: no such repository on {where} (or a private one: give a token with "
                             "access, HF_TOKEN)") from None
        if isinstance(e, RevisionNotFoundError):
            raise InputError(f"{self.ref}: {self.ref.repo} has no revision {self.ref.revision!r} on {where}") \
                from None
        if isinstance(e, EntryNotFoundError):
            raise InputError(f"{self.ref}: a file the repository lists is missing on {where}: "
                             f"{_first_line(e)}") from None
        if isinstance(e, HfHubHTTPError):
            raise InputError(f"{self.ref}: {where} refused: {_first_line(e)}") from None
        module = type(e).__module__.split(".")[0]
        if isinstance(e, OSError) or module.startswith(("httpx", "httpcore", "requests", "urllib3")):
            raise InputError(f"{self.ref}: cannot reach {where}: {type(e).__name__}: {_first_line(e)}") from None
        return False


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _draft_folder(ref: HubRef, sizes: dict[str, int]) -> str:
    """The folder holding the checkpoint's config.json: the root, NeMo Automodel's ``model/consolidated``, or the one
    folder that has one."""
    for folder in DRAFT_FOLDERS:
        if _join(folder, "config.json") in sizes:
            return folder
    found = sorted({n.rpartition("/")[0] for n in sizes if n.endswith("/config.json")})
    if len(found) == 1:
        return found[0]
    raise InputError(f"{ref}: no config.json in the repository" + (
        f" (several folders have one: {', '.join(found[:4])})" if found else ""))


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _weight_files(ref: HubRef, commit: str, folder: str, sizes: dict[str, int]) -> list[str]:
    """The weight files an engine reads in FOLDER (the order of ``Checkpoint._weight_files``), as repository paths."""
    here = {n.rpartition("/")[2]: n for n in sizes if n.rpartition("/")[0] == folder}
    for index, suffix in (("model.safetensors.index.json", ".safetensors"),
                          ("pytorch_model.bin.index.json", ".bin")):
        if index in here:
            return sorted(_join(folder, shard) for shard in _index_shards(ref, commit, here[index], here))
        found = sorted(path for name, path in here.items() if name.endswith(suffix) and name not in NOT_WEIGHTS)
        if found:
            return found
    return sorted(path for name, path in here.items() if name.endswith(".pt") and name not in NOT_WEIGHTS)


def _index_shards(ref: HubRef, commit: str, index: str, here: dict[str, str]) -> list[str]:
    data = json.loads(Path(_hf_file(ref, index, commit)).read_text())
    shards = sorted(set((data.get("weight_map") or {}).values()), key=str) if isinstance(data, dict) else []
    missing = [s for s in shards if not isinstance(s, str) or s not in here]
    if not shards or missing:
        raise InputError(f"{ref}: {index} names shard(s) the repository does not have: {missing[:3]}")
    return shards


_DOWNLOADED: dict[tuple[str, str], int] = {}  # (repo, file) -> bytes the resolution under way fetched whole


def _hf_file(ref: HubRef, name: str, commit: str) -> str:
    """One whole file at COMMIT through ``hf_hub_download`` (its cache: a second run fetches nothing)."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(ref.repo, name, revision=commit)
    if isinstance(cached, str):
        return cached
    path = hf_hub_download(ref.repo, name, revision=commit, endpoint=_endpoint(), etag_timeout=TIMEOUT_S)
    _DOWNLOADED[(ref.repo, name)] = Path(path).stat().st_size
    return path


def _download(ref, commit, folder, sizes, weights, role) -> Fetched:
    from huggingface_hub import snapshot_download, try_to_load_from_cache
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # stderr is the CLI's one line
    here = [n for n in sizes if n.rpartition("/")[0] == folder]
    missing = sum(sizes[n] for n in here if not isinstance(try_to_load_from_cache(ref.repo, n, revision=commit), str))
    root = Path(snapshot_download(ref.repo, revision=commit, endpoint=_endpoint(), etag_timeout=TIMEOUT_S,
                                  allow_patterns=[_join(folder, "*")] if folder else None))
    path = root / folder if folder else root
    return Fetched(ref, commit, path, role, sum(sizes[w] for w in weights), sum(sizes[n] for n in here), missing, 0,
                   True)


def _by_ranges(ref, commit, folder, sizes, weights, weight_bytes, role) -> Fetched:
    """The local copy of the module docstring, made in a scratch folder and renamed into place (or found there)."""
    final = cache_root() / ref.repo.replace("/", "--") / commit / role
    record = final / NOT_FETCHED
    if record.is_file():
        kept = json.loads(record.read_text())
        return Fetched(ref, commit, final, role, weight_bytes, kept["held_bytes"], 0, kept["not_fetched_count"],
                       False)
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{role}-", dir=final.parent))
    try:
        fetched = _fill(ref, commit, folder, sizes, weights, role, scratch)
        try:
            scratch.rename(final)
        except OSError:  # another run made it first: theirs is as good
            shutil.rmtree(scratch, ignore_errors=True)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        for empty in (final.parent, final.parent.parent):  # the commit's and the repository's folders, if new
            try:
                empty.rmdir()
            except OSError:
                break
        raise
    kept = json.loads(record.read_text())
    return Fetched(ref, commit, final, role, weight_bytes, kept["held_bytes"], fetched, kept["not_fetched_count"],
                   False)


def _fill(ref, commit, folder, sizes, weights, role, out: Path) -> int:
    """Write the copy into OUT; the bytes fetched (whole files through the Hub cache count only when fetched now)."""
    held = 0
    for name in sorted(sizes):
        base = name.rpartition("/")[2]
        if name.rpartition("/")[0] != folder or name in weights or (sizes[name] > SIDE_FILE_BYTES
                                                                    and base != "config.json"):
            continue
        if base.endswith((".bin", ".pt", ".safetensors", ".gguf", ".pth")):
            continue
        shutil.copyfile(_hf_file(ref, name, commit), out / base)
        held += sizes[name]
    whole = role == "target" and sum(sizes[w] for w in weights) <= TARGET_WHOLE_BYTES
    if role == "draft" or whole:
        pickles = [w for w in weights if not w.endswith(".safetensors")]
        if pickles:
            total = sum(sizes[w] for w in pickles)
            if total > TARGET_WHOLE_BYTES:
                raise InputError(f"{ref}: publishes pickle weights ({human(total)}), whose names and shapes cannot be "
                                 "read by ranges: rerun with --download")
            for w in pickles:
                shutil.copyfile(_hf_file(ref, w, commit), out / w.rpartition("/")[2])
                held += sizes[w]
        else:
            reader = _Ranges(ref, commit)
            headers = {w: reader.header(w, out / w.rpartition("/")[2], sizes[w]) for w in weights}
            held += sum(h for h in headers.values())
            tensors = {name: info for w in weights for name, info in read_safetensors_header(
                out / w.rpartition("/")[2]).items()}
            chosen = set(tensors) if whole else _tensors_read(out, tensors)
            not_fetched: dict[str, list[str]] = {}
            for w in weights:
                local = out / w.rpartition("/")[2]
                here = [n for n, info in tensors.items() if info.file == local.name]
                read = [n for n in here if n in chosen]
                held += reader.tensors(local, read, every=len(read) == len(here))
                if len(read) < len(here):
                    not_fetched[local.name] = sorted(set(here) - set(read))
            (out / NOT_FETCHED).write_text(json.dumps({
                "repo": ref.repo, "commit": commit, "held_bytes": held,
                "not_fetched_count": sum(len(v) for v in not_fetched.values()), "not_fetched": not_fetched}))
            return reader.fetched + sum(_DOWNLOADED.values())
    (out / NOT_FETCHED).write_text(json.dumps({"repo": ref.repo, "commit": commit, "held_bytes": held,
                                               "not_fetched_count": 0, "not_fetched": {}}))
    return sum(_DOWNLOADED.values())


def _tensors_read(out: Path, tensors: dict[str, TensorInfo]) -> set[str]:
    """The tensors a check of this draft reads: all of them when the engine is traced on real weights, else those
    given whole on the meta device (the engine's loader sees the others as shapes only)."""
    from contracts.engines.tracing import READ_WHOLE_ELEMENTS, is_real_size
    from contracts.input_bounds import VOCABULARY_MAPS

    ckpt = Checkpoint(path=out, config=read_json(out / "config.json", "config.json"), tensors=tensors)
    if not is_real_size(ckpt):
        return set(tensors)
    return {n for n, i in tensors.items() if i.numel <= READ_WHOLE_ELEMENTS or n.split(".")[-1] in VOCABULARY_MAPS}


class _Ranges:
    """Ranged GETs of one commit's files, counted; each written at its offset of a sparse local copy."""

    def __init__(self, ref: HubRef, commit: str):
        self.ref, self.commit, self.fetched = ref, commit, 0
        self.files: dict[Path, tuple[str, int, int]] = {}  # local copy -> (repository path, data start, size)

    def url(self, name: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.ref.repo, name, revision=self.commit, endpoint=_endpoint())

    def get(self, name: str, start: int, end: int) -> bytes:
        """Bytes START..END (exclusive) of repository file NAME."""
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        if end <= start:
            return b""
        headers = {**build_hf_headers(), "Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
        session = get_session()
        want = end - start
        if hasattr(session, "stream"):  # httpx (huggingface_hub 1.x)
            with session.stream("GET", self.url(name), headers=headers, timeout=TIMEOUT_S) as r:
                hf_raise_for_status(r)
                data = bytearray()
                for chunk in r.iter_bytes():
                    data += chunk
                    if len(data) >= want:
                        break
                status = r.status_code
        else:  # requests (huggingface_hub 0.x)
            r = session.get(self.url(name), headers=headers, timeout=TIMEOUT_S, stream=True)
            hf_raise_for_status(r)
            data = bytearray()
            for chunk in r.iter_content(1 << 20):
                data += chunk
                if len(data) >= want:
                    break
            status = r.status_code
            r.close()
        if status != 206 and start > 0:
            raise InputError(f"{self.ref}: {name}: the server ignored a ranged read (status {status})")
        self.fetched += len(data)
        if len(data) < want:
            raise InputError(f"{self.ref}: {name}: truncated answer ({len(data)} of {want} bytes at {start})")
        return bytes(data[:want])

    def header(self, name: str, local: Path, size: int) -> int:
        """The safetensors header of repository file NAME written into LOCAL, a sparse file of SIZE bytes; its bytes."""
        head = self.get(name, 0, min(8, size)) if size else b""
        n = header_length(head, size, f"{self.ref}: {name}")
        raw = self.get(name, 8, 8 + n)
        with local.open("wb") as f:
            f.write(head + raw)
            f.truncate(size)
        self.files[local] = (name, 8 + n, size)
        return 8 + n

    def tensors(self, local: Path, names: list[str], every: bool) -> int:
        """Tensors NAMES of LOCAL read into their places (EVERY: the whole data section, in one range); their bytes."""
        name, base, size = self.files[local]
        if every:
            spans = [(base, size)]
        else:
            with local.open("rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            spans = sorted((base + header[t]["data_offsets"][0], base + header[t]["data_offsets"][1]) for t in names)
        held = 0
        with local.open("r+b") as f:
            for start, end in spans:
                f.seek(start)
                f.write(self.get(name, start, end))
                held += end - start
        return held
