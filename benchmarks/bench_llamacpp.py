"""What judging a draft on llama.cpp costs, against the naive way, in one run each (the machines are shared and
noisy: compare within a run only).

  conversion  llama.cpp's converter on a bundled draft as a fresh process, as a user runs it (`python
              convert_hf_to_gguf.py DRAFT --target-model-dir TARGET`; most of its 10 s is importing torch and
              transformers) against a conversion forked from the server that imported the converter once
              (`contracts.engines.llamacpp.forked`, what the adapter does): median of 3 each, interleaved
  real-size   `check --engine llamacpp` on a Llama-3.1-8B-sized SpecForge-layout drafter (hidden 4096, target vocab
              128256, draft vocab 32000; sparse safetensors, zeros) beside a target of its real shape whose file
              holds its vocabulary tensors and first layer (sparse too): wall time and the peaks of the process
              tree's summed Pss and summed RSS (the check, its engine worker, the fork server and its children),
              sampled every 20 ms; llama.cpp is given the scaled copy (``contracts.engines.scaled``)

    python benchmarks/bench_llamacpp.py [--only conversion,real-size] [--keep DIR]   (tox -e bench-llamacpp)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_check import drafter, measure_tree, weighted_target

REPO = Path(__file__).resolve().parents[1]
DRAFT = REPO / "fixtures" / "drafts" / "specforge"
TARGET = REPO / "fixtures" / "targets" / "llama-tiny"


def llamacpp_python() -> Path:
    sys.path.insert(0, str(REPO))
    from contracts.engine_spec import PINNED, EngineSpec
    from contracts.environments.engines import environment_for

    return environment_for(EngineSpec("llamacpp", PINNED["llamacpp"]))


CONVERSION = """
import json, statistics, subprocess, sys, tempfile, time
from pathlib import Path
from contracts.engines.llamacpp import converter_trace
from contracts.engines.llamacpp.target_tokenizer import target_with_tokenizer
from contracts.engines.llamacpp.tree import SCRIPT, converter_dir

draft, target, runs = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
scratch = Path(tempfile.mkdtemp())
target = target_with_tokenizer(target, scratch)
fresh, forked = [], []
for i in range(runs + 1):
    args = [str(draft), "--target-model-dir", str(target), "--outtype", "f32"]
    t = time.perf_counter()
    done = subprocess.run([sys.executable, str(converter_dir() / SCRIPT), *args, "--outfile",
                           str(scratch / f"fresh{i}.gguf")], capture_output=True, cwd=scratch)
    assert done.returncode == 0, done.stderr[-400:]
    fresh.append(time.perf_counter() - t)
    t = time.perf_counter()
    code = converter_trace.run([str(scratch / f"t{i}.json"), str(converter_dir() / SCRIPT), *args, "--outfile",
                                str(scratch / f"forked{i}.gguf")], scratch, scratch / f"forked{i}.log", 600)
    assert code == 0
    forked.append(time.perf_counter() - t)
print(json.dumps({"fresh_s": fresh[1:], "forked_s": forked[1:], "fork_server_start_s": forked[0] - min(forked[1:])}))
"""


def conversion(runs: int = 3) -> None:
    import subprocess

    python = llamacpp_python()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([str(python), "-c", CONVERSION, str(DRAFT), str(TARGET), str(runs)], capture_output=True,
                          text=True, env=env, cwd=tempfile.gettempdir())
    if done.returncode:
        print(f"conversion: failed: {done.stderr[-400:]}")
        return
    r = json.loads(done.stdout.strip().splitlines()[-1])
    fresh, forked = statistics.median(r["fresh_s"]), statistics.median(r["forked_s"])
    print(f"conversion of {DRAFT.name} (median of {runs}, after one warm-up each): fresh process {fresh:.2f} s, "
          f"forked from the converter's server {forked:.2f} s: {fresh / forked:.0f}x (the server's own start, paid "
          f"once per engine worker: {r['fork_server_start_s']:.1f} s)")


def real_size(root: Path) -> None:
    draft, target = root / "llama-3.1-8b-specforge-draft", root / "llama-3.1-8b-target"
    params = drafter(draft, hidden=4096, vocab=128256, draft_vocab=32000, heads=32, kv_heads=8, inter=14336,
                     layer_prefix="midlayer", with_embed=False, ids=[2, 16, 29])
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = cfg.pop("eagle_config")["eagle_aux_hidden_state_layer_ids"]
    (draft / "config.json").write_text(json.dumps(cfg))  # llama.cpp reads only the top-level key
    weighted_target(target)
    llamacpp_python()  # its environment made before the measured run
    r = measure_tree([sys.executable, "-m", "contracts.cli", "check", str(draft), "--target", str(target),
                      "--engine", "llamacpp", "--format", "json"],
                     env={**os.environ, "PYTHONPATH": str(REPO)})
    verdicts = {}
    if r["stdout"].strip():
        doc = json.loads(r["stdout"])
        verdicts = {x["contract"]: x["status"] for x in doc["results"]}
    print(f"check --engine llamacpp on a Llama-3.1-8B-sized SpecForge drafter ({params / 1e9:.2f} B parameters) beside "
          f"a target of its shape: {r['wall_s']:.1f} s, peak of the process tree's summed Pss {r['peak_pss_mb']:.0f} MB "
          f"(summed RSS {r['peak_rss_mb']:.0f} MB: the converter's forked children counted whole) (exit {r['exit']}); "
          f"verdicts {verdicts}; largest processes {r['process_peaks_mb']}")
    if r["exit"] not in (0, 1):
        print(r["stderr"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="conversion,real-size")
    p.add_argument("--keep", help="make the sparse checkpoints in DIR and keep them")
    args = p.parse_args()
    only = set(args.only.split(","))
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-llamacpp-"))
    start = time.perf_counter()
    try:
        if "conversion" in only:
            conversion()
        if "real-size" in only:
            real_size(root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"(benchmark wall {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
