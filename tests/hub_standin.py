"""A stand-in for the Hugging Face Hub on the loopback interface, serving local directories as model repositories.

It answers the part of the Hub's HTTP API that ``huggingface_hub`` calls when it reads a model repository, the way
the Hub answers it (``huggingface_hub``'s own ``hf_raise_for_status`` and ``get_hf_file_metadata`` read these):

- ``GET /api/models/ORG/NAME[/revision/REV][?blobs=true]``: the repository's id, its commit ``sha`` and its
  ``siblings`` (file names; with ``blobs``, each size, blob id and, for a weight file, its LFS record);
- ``GET /api/models/ORG/NAME/tree/REV[/PATH][?recursive=true]``: the files and folders under PATH, one page
  (``snapshot_download`` lists a revision this way);
- ``HEAD`` and ``GET /ORG/NAME/resolve/REV/PATH``: the file, with ``X-Repo-Commit``, ``ETag`` (``X-Linked-Etag`` and
  ``X-Linked-Size`` for LFS files), ``Accept-Ranges: bytes``, and ``Range: bytes=A-B`` answered ``206`` with its
  ``Content-Range``, as the Hub's CDN answers it;
- the Hub's refusals: ``404`` with ``X-Error-Code: RepoNotFound`` (a missing or private repository), ``RevisionNotFound``
  (a revision that is neither ``main`` nor the commit) and ``EntryNotFound``; a gated repository without a token
  ``401`` with ``X-Error-Code: GatedRepo``.

Each repository has one commit, a hash of its files' names, sizes and modification times. What it served is counted
(``served_bytes``): a test compares the bytes a check says it fetched with the bytes that left the server.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class HubStandIn:
    """``with HubStandIn({"org/name": directory}) as hub:`` serves the repositories at ``hub.endpoint``
    (``HF_ENDPOINT``); ``gated`` names repositories that answer only a request carrying ``token``."""

    def __init__(self, repos: dict[str, Path], *, gated: tuple[str, ...] = (), token: str = "hf_standin"):
        self.repos = {name: Path(d) for name, d in repos.items()}
        self.gated, self.token = set(gated), token
        self.served_bytes: Counter = Counter()  # repository -> bytes of file bodies sent
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "HubStandIn":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def commit(self, repo: str) -> str:
        h = hashlib.sha1(repo.encode())
        for f in self.files(repo):
            st = f.stat()
            h.update(f"{f.relative_to(self.repos[repo])}:{st.st_size}:{st.st_mtime_ns}".encode())
        return h.hexdigest()

    def files(self, repo: str) -> list[Path]:
        root = self.repos[repo]
        return sorted(p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in
                                                                               p.relative_to(root).parts))

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet: a test reads hub.requests
                pass

            def do_HEAD(self):
                self._serve(body=False)

            def do_GET(self):
                self._serve(body=True)

            def _refuse(self, status: int, code: str, message: str):
                data = json.dumps({"error": message}).encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _repo(self, org: str, name: str, revision: str | None):
                repo = f"{org}/{name}"
                if repo not in hub.repos:
                    self._refuse(404, "RepoNotFound", "Repository not found")
                    return None
                if repo in hub.gated and self.headers.get("Authorization") != f"Bearer {hub.token}":
                    self._refuse(401, "GatedRepo", f"Access to model {repo} is restricted. You must have access "
                                                   "to it and be authenticated to access it. Please log in.")
                    return None
                if revision not in (None, "main", hub.commit(repo)):
                    self._refuse(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                    return None
                return repo

            def _serve(self, body: bool):
                url = urlparse(self.path)
                parts = [unquote(p) for p in url.path.split("/") if p]
                hub.requests.append((self.command, url.path, self.headers.get("Range")))
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
                    repo = self._repo(parts[2], parts[3], parts[5])
                    if repo is not None:
                        self._tree(repo, "/".join(parts[6:]), "recursive=true" in (url.query or "").lower())
                    return
                if parts[:2] == ["api", "models"] and len(parts) in (4, 6):
                    revision = parts[5] if len(parts) == 6 and parts[4] == "revision" else None
                    repo = self._repo(parts[2], parts[3], revision)
                    if repo is not None:
                        self._info(repo, "blobs=true" in (url.query or ""))
                    return
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo = self._repo(parts[0], parts[1], parts[3])
                    if repo is not None:
                        self._file(repo, "/".join(parts[4:]), body)
                    return
                self._refuse(404, "EntryNotFound", f"no route {url.path}")

            def _info(self, repo: str, blobs: bool):
                root, sha = hub.repos[repo], hub.commit(repo)
                siblings = []
                for f in hub.files(repo):
                    entry: dict = {"rfilename": str(f.relative_to(root))}
                    if blobs:
                        entry.update(size=f.stat().st_size, blobId=_etag(f, sha))
                        if f.suffix in LFS_SUFFIXES:
                            entry["lfs"] = {"sha256": _etag(f, sha, 64), "size": f.stat().st_size,
                                            "pointerSize": 134}
                    siblings.append(entry)
                data = {"_id": sha[:24], "id": repo, "modelId": repo, "sha": sha, "private": False,
                                   "gated": "auto" if repo in hub.gated else False, "disabled": False,
                                   "tags": [], "siblings": siblings}
                self._json(data)

            def _json(self, value) -> None:
                data = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _tree(self, repo: str, under: str, recursive: bool):
                root, sha = hub.repos[repo], hub.commit(repo)
                entries, folders = [], set()
                for f in hub.files(repo):
                    rel = str(f.relative_to(root))
                    if under and not rel.startswith(under + "/"):
                        continue
                    rest = rel[len(under) + 1:] if under else rel
                    if "/" in rest:
                        top = (under + "/" if under else "") + rest.split("/")[0]
                        if top not in folders:
                            folders.add(top)
                            entries.append({"type": "directory", "path": top, "oid": sha})
                        if not recursive:
                            continue
                    entry = {"type": "file", "path": rel, "size": f.stat().st_size, "oid": _etag(f, sha)}
                    if f.suffix in LFS_SUFFIXES:
                        entry["lfs"] = {"oid": _etag(f, sha, 64), "size": f.stat().st_size, "pointerSize": 134}
                    entries.append(entry)
                self._json(entries)

            def _file(self, repo: str, name: str, body: bool):
                root, sha = hub.repos[repo], hub.commit(repo)
                path = (root / name).resolve()
                if not path.is_relative_to(root.resolve()) or not path.is_file():
                    self._refuse(404, "EntryNotFound", f"Entry not found: {name}")
                    return
                size = path.stat().st_size
                start, end, status = 0, size - 1, 200
                wanted = self.headers.get("Range")
                if wanted:
                    m = RANGE.match(wanted.strip())
                    if not m or int(m.group(1)) >= size:
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{size}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    start = int(m.group(1))
                    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                    status = 206
                self.send_response(status)
                self.send_header("X-Repo-Commit", sha)
                lfs = path.suffix in LFS_SUFFIXES
                etag = _etag(path, sha, 64 if lfs else 40)
                self.send_header("ETag", f'"{etag}"')
                if lfs:
                    self.send_header("X-Linked-Etag", f'"{etag}"')
                    self.send_header("X-Linked-Size", str(size))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(end - start + 1))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.end_headers()
                if not body:
                    return
                with path.open("rb") as f:
                    f.seek(start)
                    left = end - start + 1
                    while left > 0:
                        chunk = f.read(min(left, 1 << 20))
                        if not chunk:
                            break
                        hub.served_bytes[repo] += len(chunk)  # counted first: the client may finish first
                        self.wfile.write(chunk)
                        left -= len(chunk)

        return Handler


def _etag(path: Path, commit: str, width: int = 40) -> str:
    """An opaque, stable identifier of one file at one commit (the Hub's git blob id or LFS sha256 in form)."""
    return hashlib.sha256(f"{commit}:{path.name}:{path.stat().st_size}".encode()).hexdigest()[:width]
