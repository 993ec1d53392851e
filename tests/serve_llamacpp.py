"""llama.cpp's own HTTP server (``xllamacpp.Server``, listening on the loopback) serving a target with an EAGLE-3 draft,
both converted by the release's own converter, for ``doctor``'s tests: run in the llama.cpp environment,

    python tests/serve_llamacpp.py DRAFT_DIR TARGET_DIR SCRATCH_DIR [--no-draft]

prints the address it listens on (one line) and serves until SIGTERM. The settings are ``accept --engine llamacpp``'s
(n_max 3, n_min 0, p_min 0), with the metrics endpoint on as ``--metrics`` turns it on."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from contracts.engines.llamacpp.converter import convert, convert_target


def main(draft_dir: str, target_dir: str, scratch: str, *flags: str) -> int:
    import xllamacpp as xlc

    target = convert_target(Path(target_dir), Path(scratch) / "target")
    params = xlc.CommonParams()
    params.model.path = str(target["gguf"])
    if "--no-draft" not in flags:
        draft = convert(Path(draft_dir), Path(target_dir), Path(scratch) / "draft")
        params.speculative.draft.mparams.path = str(draft["gguf"])
        params.speculative.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3]
        params.speculative.draft.n_max = 3
        params.speculative.draft.n_min = 0
        params.speculative.draft.p_min = 0.0
    params.n_ctx = 256
    params.n_parallel = 1
    params.endpoint_metrics = True
    params.endpoint_props = True
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    server = xlc.Server(params)
    print(server.listening_address, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
