"""What one more engine release costs: its environment's build time and disk, made with uv (one shared cache, hard
links) against pip, each from the recipe derived from the release's own metadata (contracts.environments.recipes).

For two releases A and B (default SGLang 0.5.6 and 0.5.7), each mode in its own empty environments root:

  pip       pip (with pip's own wheel cache as this machine has it: warm), A then B
  uv-cold   uv with an empty cache: A (every wheel fetched and unpacked once)
  uv-warm   the same root and cache: B (files hard-linked from the cache)

Per build: wall seconds (the whole ``environment_for``: recipe derivation, installs, the import-closure probe that
runs the adapter's steps; and the install part alone), the environment's own size (du) and what the root grew by
(du counts a hard-linked file once). Prints the ratios of one run (the machine is shared and noisy: compare within
a run only).

    python benchmarks/bench_environments.py [--releases 0.5.6,0.5.7] [--engine sglang] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def du_mb(path: Path) -> int:
    done = subprocess.run(["du", "-s", "--block-size=1M", str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def build(root: Path, engine: str, version: str, installer: str) -> dict:
    """Make ``engine==version`` in ``root`` in a fresh process; its time, size and the root's growth."""
    root.mkdir(parents=True, exist_ok=True)
    before = du_mb(root)
    env = {**os.environ, "EAGLE3_CONTRACTS_ENVS": str(root), "EAGLE3_CONTRACTS_INSTALLER": installer}
    code = ("import sys; from contracts.engine_spec import EngineSpec; "
            "from contracts.environments.engines import environment_for; "
            f"print(environment_for(EngineSpec({engine!r}, {version!r})))")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{installer} build of {engine}=={version} failed: {done.stderr.strip()[-500:]}")
    python = Path(done.stdout.strip().splitlines()[-1])
    report = json.loads((python.parent.parent / "build.json").read_text())
    probe = json.loads((python.parent.parent / "probe.json").read_text())
    return {"release": f"{engine}=={version}", "installer": installer, "wall_s": round(wall, 1),
            "install_s": report.get("install_s"), "closure_s": report.get("closure_s"),
            "env_mb": du_mb(python.parent.parent), "root_growth_mb": du_mb(root) - before,
            "probe": "ok" if probe.get("ok") else probe}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", default="sglang")
    p.add_argument("--releases", default="0.5.6,0.5.7", help="two releases: A,B")
    p.add_argument("--keep", help="build under this directory and keep it (default: a temporary one, removed)")
    args = p.parse_args(argv)
    a, b = [v.strip() for v in args.releases.split(",")]
    scratch = Path(args.keep or tempfile.mkdtemp(prefix="eagle3-contracts-bench-envs-"))
    try:
        rows = [build(scratch / "pip", args.engine, a, "pip"), build(scratch / "pip", args.engine, b, "pip"),
                build(scratch / "uv", args.engine, a, "uv"), build(scratch / "uv", args.engine, b, "uv")]
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    labels = ["pip (A)", "pip (B)", "uv-cold (A)", "uv-warm (B)"]
    print("| build | release | wall s | install s | closure probe s | env MB (du) | root grew MB | probe |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r in zip(labels, rows):
        print(f"| {label} | {r['release']} | {r['wall_s']} | {r['install_s']} | {r['closure_s']} | {r['env_mb']} | "
              f"{r['root_growth_mb']} | {r['probe']} |")
    pip_b, cold, warm = rows[1], rows[2], rows[3]
    print(f"\none more release: uv-warm vs pip  install time {pip_b['install_s'] / max(warm['install_s'], 0.1):.1f}x "
          f"less, disk {pip_b['root_growth_mb'] / max(warm['root_growth_mb'], 1):.0f}x less "
          f"({warm['root_growth_mb']} MB vs {pip_b['root_growth_mb']} MB)")
    print(f"first release: uv-cold vs pip  install time {rows[0]['install_s'] / max(cold['install_s'], 0.1):.1f}x, "
          f"root {cold['root_growth_mb']} MB (cache included) vs {rows[0]['root_growth_mb']} MB")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
