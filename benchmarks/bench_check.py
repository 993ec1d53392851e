"""How `eagle3-contracts check` scales to real drafters, against the naive way, and what its start-up costs.

Makes sparse safetensors files of real shapes (no disk cost: only the small tensors hold bytes) for a
Kimi-K2.5-sized drafter (hidden 7168, target vocab 163840, draft vocab 32000, fc 21504 -> 7168, ~2.1 B
parameters, 4.3 GB in bf16, speculators' key layout with embed_tokens), the same drafter in SpecForge's export
layout (``midlayer.*``, no embed_tokens, ~0.96 B parameters) and a Llama-3.1-8B-sized one (hidden 4096, vocab
128256, SpecForge's layout), each with a config-only target of its real shape. Then measures, each in a fresh
process:

  engines    every engine's whole check of the Llama-3.1-8B-sized drafter (against a config-only target and against
             one holding its embedding, head and first layer), of the Kimi-K2.5-sized drafter and of the two hostile
             configs (a 2,000,000-token vocabulary, a 1 GiB sparse d2t): the peaks of the process tree's summed Pss
             and summed RSS, one table
  start-up   a one-contract check of a tiny bundled draft against `import sglang.srt.models.llama_eagle3` in
             the same environment (median of 3, interleaved; with the torchvision stand-in the import needs here)
  peaks      every contract alone (`--only ID`) on the Kimi-sized SpecForge-layout drafter: peak RSS and wall
             time, with the Kimi-K2.5 target (a tiny copy of its class runs) and on the fallback paths: a
             target config the engine cannot run as a tiny copy, and a target class without the aux hook
  small      a Qwen3-0.6B-shaped draft (40 M parameters) on SGLang and vLLM, every contract alone: peak RSS
             of the largest process and of the process tree, which must stay within 1 GB
  ours       eagle3-contracts check DRAFT --target TARGET   (every contract that applies)
  ours-load  the same with --only key-naming,tensor-shapes,d2t-semantics
  naive      load every tensor, build SGLang's draft model on CPU, call its load_weights
  startup    importing SGLang, making its CPU context and loading its model registry (paid by both)
  work       both ways in one process after that start-up, each timed directly
  hub        `check hf:ORG/NAME --target hf:ORG/NAME` against the loopback stand-in of the Hub (tests/hub_standin.py):
             the bytes fetched for each bundled draft, and for the Llama-3.1-8B-sized drafter as speculators publishes
             one (1.9 GB, with its embedding) on each engine, beside what a download of the drafter fetches; the
             peaks of the process tree's summed Pss and RSS
  vllm       `check --engine vllm` (vLLM 0.32.0's CPU build, in its own environment: a worker process) on the
             Kimi-sized drafter against the naive way there (vLLM's draft class built on CPU by its own loader
             utilities, every tensor loaded, its load_weights): wall time and the peak of the summed RSS of the
             whole process tree (the check and its engine worker), sampled every 20 ms

and prints the ratios of one run (the machines are shared and noisy: compare within a run only).

    tox -e bench            (or: python benchmarks/bench_check.py [--keep DIR] [--only startup,peaks,naive,vllm])
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAFETENSORS_DTYPE = {"bfloat16": ("BF16", 2), "int64": ("I64", 8), "bool": ("BOOL", 1)}


def write_sparse_safetensors(path: Path, tensors: dict[str, tuple[list[int], str]], small: dict[str, bytes]):
    """A valid safetensors file whose large tensors are holes (read back as zeros) and small ones real bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (shape, dtype) in tensors.items():
        tag, size = SAFETENSORS_DTYPE[dtype]
        n = size
        for d in shape:
            n *= d
        header[name] = {"dtype": tag, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        base = 8 + len(raw)
        for name, data in small.items():
            f.seek(base + header[name]["data_offsets"][0])
            f.write(data)
        f.truncate(base + offset)


def drafter(directory: Path, *, hidden, vocab, draft_vocab, heads, kv_heads, inter, layer_prefix, with_embed, ids,
            head_dim=None):
    import torch

    directory.mkdir(parents=True)
    head_dim = head_dim or hidden // heads
    layer = {
        "self_attn.q_proj.weight": [heads * head_dim, 2 * hidden],
        "self_attn.k_proj.weight": [kv_heads * head_dim, 2 * hidden],
        "self_attn.v_proj.weight": [kv_heads * head_dim, 2 * hidden],
        "self_attn.o_proj.weight": [hidden, heads * head_dim],
        "mlp.gate_proj.weight": [inter, hidden], "mlp.up_proj.weight": [inter, hidden],
        "mlp.down_proj.weight": [hidden, inter],
        "input_layernorm.weight": [hidden], "post_attention_layernorm.weight": [hidden],
        "hidden_norm.weight": [hidden],
    }
    tensors = {f"{layer_prefix}.{k}": (v, "bfloat16") for k, v in layer.items()}
    tensors.update({"fc.weight": ([hidden, 3 * hidden], "bfloat16"), "norm.weight": ([hidden], "bfloat16"),
                    "lm_head.weight": ([draft_vocab, hidden], "bfloat16"),
                    "d2t": ([draft_vocab], "int64"), "t2d": ([vocab], "bool")})
    if with_embed:
        tensors["embed_tokens.weight"] = ([vocab, hidden], "bfloat16")
    selected = torch.arange(draft_vocab) * 2  # a valid selection: every other target id
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[selected] = True
    ones = torch.ones(hidden, dtype=torch.bfloat16)
    small = {"d2t": (selected - torch.arange(draft_vocab)).numpy().tobytes(), "t2d": t2d.numpy().tobytes()}
    for name in tensors:
        if name.endswith("norm.weight"):
            small[name] = ones.view(torch.int16).numpy().tobytes()
    write_sparse_safetensors(directory / "model.safetensors", tensors, small)
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": inter, "num_hidden_layers": 1, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "head_dim": head_dim, "vocab_size": vocab,
              "draft_vocab_size": draft_vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
              "rope_theta": 50000.0, "hidden_act": "silu", "tie_word_embeddings": False, "dtype": "bfloat16",
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}
    (directory / "config.json").write_text(json.dumps(config))
    return sum(_numel(shape) for shape, _ in tensors.values())


def weighted_target(directory: Path, *, hidden=4096, vocab=128256, heads=32, kv_heads=8, inter=14336) -> None:
    """A Llama-3.1-8B-shaped target whose file holds what llama.cpp converts of it: its vocabulary tensors and its
    first layer (zeros, sparse; norms ones); its config says 32 layers."""
    import torch

    directory.mkdir(parents=True)
    head_dim = hidden // heads
    layer = {"self_attn.q_proj.weight": [heads * head_dim, hidden], "self_attn.k_proj.weight": [kv_heads * head_dim,
             hidden], "self_attn.v_proj.weight": [kv_heads * head_dim, hidden],
             "self_attn.o_proj.weight": [hidden, heads * head_dim], "mlp.gate_proj.weight": [inter, hidden],
             "mlp.up_proj.weight": [inter, hidden], "mlp.down_proj.weight": [hidden, inter],
             "input_layernorm.weight": [hidden], "post_attention_layernorm.weight": [hidden]}
    tensors = {f"model.layers.0.{k}": (v, "bfloat16") for k, v in layer.items()}
    tensors.update({"model.embed_tokens.weight": ([vocab, hidden], "bfloat16"),
                    "lm_head.weight": ([vocab, hidden], "bfloat16"), "model.norm.weight": ([hidden], "bfloat16")})
    ones = torch.ones(hidden, dtype=torch.bfloat16).view(torch.int16).numpy().tobytes()
    write_sparse_safetensors(directory / "model.safetensors", tensors,
                             {k: ones for k in tensors if k.endswith("norm.weight")})
    config = json.loads((Path(__file__).resolve().parents[1] / "fixtures/targets/llama-tiny/config.json").read_text())
    config.update(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=32, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, head_dim=head_dim, vocab_size=vocab, max_position_embeddings=131072,
                  dtype="bfloat16")
    (directory / "config.json").write_text(json.dumps(config))


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def targets(root: Path, repo: Path) -> dict[str, Path]:
    kimi = json.loads((repo / "fixtures/targets/kimi-k25-tiny-config/config.json").read_text())
    text = kimi["text_config"]
    text.update(hidden_size=7168, vocab_size=163840, num_hidden_layers=61, num_attention_heads=64,
                intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=384, kv_lora_rank=512,
                q_lora_rank=1536, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
    if "vocab_size" in kimi:
        kimi["vocab_size"] = 163840
    llama = json.loads((repo / "fixtures/targets/llama-tiny/config.json").read_text())
    llama.update(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=131072,
                 rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                                  "rope_theta": 500000.0}, dtype="bfloat16")
    # fallback paths of hidden-width: a config SGLang cannot build as a tiny copy (a Gemma-3 multimodal class over
    # a text-only config: no vision tower config), and a class without set_eagle3_layers_to_capture (Mixtral)
    unbuildable = dict(kimi, architectures=["Gemma3ForConditionalGeneration"], model_type="gemma3")
    no_hook = json.loads((repo / "fixtures/targets/mixtral-tiny-config/config.json").read_text())
    no_hook.update(hidden_size=7168, intermediate_size=18432, num_hidden_layers=61, num_attention_heads=64,
                   num_key_value_heads=8, vocab_size=163840)
    out = {}
    for name, cfg in (("kimi-k25-target", kimi), ("llama-3.1-8b-target", llama),
                      ("unbuildable-target", unbuildable), ("no-hook-target", no_hook)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(cfg))
        out[name] = root / name
    return out


NAIVE = """
import sys
from contracts.engines.sglang.context import ensure_context
from contracts.engines.sglang.loader import build_model, model_config
from pathlib import Path
ensure_context()
from safetensors.torch import load_file
tensors = load_file(sys.argv[1] + "/model.safetensors")
model = build_model(model_config(Path(sys.argv[1])))
model.load_weights(tensors.items())
"""
# Both ways in one process after the shared start-up, timed directly: the work each does on the checkpoint.
WORK = """
import json, sys, time
from pathlib import Path
from contracts.engines.sglang.context import ensure_context
from contracts.engines.sglang.loader import build_model, model_config
ensure_context()
from sglang.srt.models.registry import ModelRegistry
ModelRegistry.resolve_model_cls(['LlamaForCausalLMEagle3'])
from contracts.subject import Subject
start = time.perf_counter()
subject = Subject('bench', sys.argv[1], sys.argv[2])
statuses = [r.status for r in subject.run()]
subject.close()
ours = time.perf_counter() - start
from safetensors.torch import load_file
start = time.perf_counter()
tensors = load_file(sys.argv[1] + '/model.safetensors')
model = build_model(model_config(Path(sys.argv[1])))
model.load_weights(tensors.items())
naive = time.perf_counter() - start
print(json.dumps({'ours_s': round(ours, 2), 'naive_s': round(naive, 2), 'statuses': statuses}))
"""

# The fixed cost both ways pay before touching a checkpoint: import SGLang, make its CPU context, and load its
# model registry (its first lookup imports every model module; the naive way's model build needs it too).
STARTUP = ("from contracts.engines.sglang.context import ensure_context; ensure_context(); "
           "from sglang.srt.models.registry import ModelRegistry; "
           "ModelRegistry.resolve_model_cls(['LlamaForCausalLMEagle3'])")


def measure(argv: list[str]) -> dict:
    """Wall time and peak RSS of one fresh process (its own rusage, not its siblings')."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read().decode()
    err = proc.stderr.read().decode()
    code = os.waitstatus_to_exitcode(status)
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "exit": code,
            "stdout": out, "stderr": err[-400:]}


CONTRACTS = ("key-naming", "tensor-shapes", "d2t-semantics", "hidden-width", "embed-head", "config", "forward-parity")
# the torchvision stand-in (contracts.engines.sglang.shims) is what lets SGLang be imported here at all
IMPORT_ENGINE = "from contracts.engines.sglang import shims; shims.install(); import sglang.srt.models.llama_eagle3"


def startup_ratio(py: str, repo: Path, runs: int = 3) -> dict:
    """A one-contract check of a tiny draft both ways a user runs it, each a fresh process: the installed
    ``eagle3-contracts`` console script, and ``tox -e check -- ...`` as the README gives it (tox's own start and
    setup included), against importing SGLang's EAGLE-3 model module in the same environment (medians,
    interleaved)."""
    args = ["check", str(repo / "fixtures/drafts/specforge"), "--only", "key-naming"]
    check = [str(Path(py).parent / "eagle3-contracts"), *args]
    tox = shutil.which("tox")
    # the README's way, from outside any tox environment (tox's variables and this environment's PATH left out)
    tox_env = {k: v for k, v in os.environ.items() if not k.startswith("TOX_") and k != "VIRTUAL_ENV"}
    tox_env["PATH"] = os.pathsep.join(p for p in tox_env.get("PATH", "").split(os.pathsep)
                                      if not p.startswith(str(Path(py).parent)))
    via_tox = [tox, "-q", "-c", str(repo / "tox.ini"), "-e", "check", "--", *args] if tox else None
    measure(check)  # the first check of a release computes and caches its registry map: not a start-up
    if via_tox:
        subprocess.run(via_tox, env=tox_env, capture_output=True)  # the first makes the tox environment
    base, ours, toxed = [], [], []
    for _ in range(runs):
        base.append(measure([py, "-c", IMPORT_ENGINE])["wall_s"])
        ours.append(measure(check)["wall_s"])
        if via_tox:
            t = time.perf_counter()
            subprocess.run(via_tox, env=tox_env, capture_output=True, check=True)
            toxed.append(round(time.perf_counter() - t, 2))
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    out = {"import_s": base, "check_s": ours, "ratio": round(med(ours) / med(base), 2),
           "import_median_s": med(base), "check_median_s": med(ours), "profile": import_profile(py, check)}
    if toxed:
        out.update(tox_s=toxed, tox_median_s=med(toxed), tox_ratio=round(med(toxed) / med(base), 2))
    return out


def import_profile(py: str, check: list[str], top: int = 8) -> list[tuple[str, float]]:
    """Where the check's start-up goes: import time by package (``python -X importtime``: each module's own time,
    summed over its top-level package), the largest first, seconds each."""
    done = subprocess.run([py, "-X", "importtime", "-m", "contracts.cli", *check[1:]], capture_output=True, text=True)
    totals: dict[str, float] = {}
    for line in done.stderr.splitlines():
        parts = line[len("import time:"):].split("|") if line.startswith("import time:") else []
        if len(parts) == 3 and parts[0].strip().isdigit():
            name = parts[2].strip().split(".")[0]
            totals[name] = totals.get(name, 0.0) + int(parts[0]) / 1e6
    return [(name, round(sec, 2)) for name, sec in sorted(totals.items(), key=lambda r: -r[1])[:top]]


def contract_peaks(py: str, draft: Path, targets: dict[str, Path]) -> list[tuple]:
    rows = []
    for label, target in targets.items():
        for cid in CONTRACTS:
            m = measure([py, "-m", "contracts.cli", "check", str(draft), "--target", str(target), "--only", cid,
                         "--format", "json"])
            status = json.loads(m["stdout"])["results"][0]["status"] if m["exit"] in (0, 1) else f"exit {m['exit']}"
            rows.append((label, cid, status, m["wall_s"], m["peak_rss_mb"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", help="write the sparse checkpoints here and keep them")
    parser.add_argument("--only", default="engines,startup,small,peaks,naive,hub,vllm",
                        help="sections to run (engines, startup, small, peaks, naive, hub, vllm)")
    parser.add_argument("--engines", default="sglang,vllm==0.32.0,llamacpp,openvino",
                        help="the engines of the `engines` table")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    repo = Path(__file__).resolve().parents[1]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="eagle3-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    try:
        if "startup" in sections:
            s = startup_ratio(py, repo)
            print(f"start-up: one-contract check of a tiny draft {s['check_median_s']} s (runs {s['check_s']}) / "
                  f"`import sglang.srt.models.llama_eagle3` {s['import_median_s']} s (runs {s['import_s']}) = "
                  f"{s['ratio']}x (median of 3)")
            if "tox_ratio" in s:
                print(f"start-up through `tox -e check -- check ...`: {s['tox_median_s']} s (runs {s['tox_s']}) = "
                      f"{s['tox_ratio']}x the import (median of 3)")
            print("import profile of the check (each module's own import time, summed by package): " +
                  ", ".join(f"{name} {sec:.2f} s" for name, sec in s["profile"]) + "\n")
        tg = targets(root, repo)
        if "engines" in sections:
            engine_table(py, root, repo, tg, args.engines.split(","))
        if "small" in sections:
            qwen3_small_draft(py, root)
        if "peaks" in sections:
            draft = root / "kimi-specforge-drafter"
            params = drafter(draft, hidden=7168, vocab=163840, draft_vocab=32000, heads=56, kv_heads=8, inter=18432,
                             layer_prefix="midlayer", with_embed=False, ids=[1, 29, 57])
            rows = contract_peaks(py, draft, {
                "Kimi-K2.5 (tiny copy of its class runs)": tg["kimi-k25-target"],
                "fallback: a tiny copy the engine cannot run (Gemma-3 multimodal class over this config)": tg["unbuildable-target"],
                "fallback: target class without the aux hook (Mixtral)": tg["no-hook-target"]})
            print(f"peak RSS per contract, Kimi-sized drafter in SpecForge's layout ({params / 1e9:.2f} B parameters):")
            print("| target | contract | verdict | wall | peak RSS |\n|---|---|---|---|---|")
            for label, cid, status, wall, rss in rows:
                print(f"| {label} | {cid} | {status} | {wall} s | {rss:.0f} MB |")
            worst = max(rows, key=lambda r: r[4])
            print(f"\nhighest peak: {worst[4]:.0f} MB ({worst[1]}, {worst[0]}); "
                  f"{'every contract under 1 GB' if worst[4] < 1024 else 'OVER 1 GB'}\n")
        if "naive" in sections:
            naive_comparison(py, root, tg)
        if "hub" in sections:
            hub_reads(py, root, repo, tg, args.engines.split(","))
        if "vllm" in sections:
            vllm_comparison(py, root, tg)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def hostile_cases(root: Path, repo: Path) -> dict[str, tuple[Path, Path]]:
    """The two hostile configs: a tiny draft whose config asks for a 2,000,000-token vocabulary, and one whose
    ``d2t`` is a 1 GiB tensor (sparse on disk) beside its real tensors."""
    import torch
    from safetensors.torch import load_file

    source, target = repo / "fixtures/drafts/specforge", repo / "fixtures/targets/llama-tiny"
    vocab = root / "hostile-vocab-2m"
    shutil.copytree(source, vocab)
    cfg = json.loads((vocab / "config.json").read_text())
    cfg["vocab_size"] = 2_000_000
    (vocab / "config.json").write_text(json.dumps(cfg))
    d2t = root / "hostile-d2t-1gib"
    d2t.mkdir()
    shutil.copy(source / "config.json", d2t / "config.json")
    real = load_file(str(source / "model.safetensors"))
    tensors = {k: (list(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in real.items() if k != "d2t"}
    tensors["d2t"] = ([1 << 27], "int64")
    write_sparse_safetensors(d2t / "model.safetensors", tensors, {
        k: v.contiguous().view(torch.int16 if v.dtype == torch.bfloat16 else v.dtype).numpy().tobytes()
        for k, v in real.items() if k != "d2t"})
    return {"hostile: vocab_size 2,000,000 (tiny draft)": (vocab, target),
            "hostile: 1 GiB sparse d2t beside real tensors": (d2t, target)}


def engine_table(py: str, root: Path, repo: Path, tg: dict, engines: list[str]) -> None:
    """Every engine's whole check (all contracts) on real-size drafters and hostile configs, each a fresh process
    tree: wall time, the peaks of the tree's summed Pss and summed RSS, the largest process, the verdicts."""
    llama = root / "engines-llama-3.1-8b-drafter"
    drafter(llama, hidden=4096, vocab=128256, draft_vocab=32000, heads=32, kv_heads=8, inter=14336,
            layer_prefix="midlayer", with_embed=False, ids=[1, 15, 28])
    weighted = root / "engines-llama-3.1-8b-weighted-target"
    weighted_target(weighted)
    kimi = root / "engines-kimi-drafter"
    drafter(kimi, hidden=7168, vocab=163840, draft_vocab=32000, heads=56, kv_heads=8, inter=18432,
            layer_prefix="midlayer", with_embed=False, ids=[1, 29, 57])
    cases = {"Llama-3.1-8B-sized SpecForge drafter, config-only target": (llama, tg["llama-3.1-8b-target"]),
             "Llama-3.1-8B-sized SpecForge drafter, target with its embedding, head and first layer": (llama, weighted),
             "Kimi-K2.5-sized SpecForge drafter, config-only target": (kimi, tg["kimi-k25-target"]),
             **hostile_cases(root, repo)}
    print("every engine's check (all contracts), each a fresh process tree sampled every 20 ms:")
    print("| drafter | engine | wall | summed Pss | summed RSS | largest process | exit | verdicts |\n"
          "|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for label, (draft, target) in cases.items():
        for engine in engines:
            m = measure_tree([py, "-m", "contracts.cli", "check", str(draft), "--target", str(target), "--engine",
                              engine, "--format", "json"])
            said = (m["stderr"].strip() or m["stdout"].strip() or "-").splitlines()[-1][:160]
            try:
                counts: dict = {}
                for r in json.loads(m["stdout"])["results"]:
                    counts[r["status"]] = counts.get(r["status"], 0) + 1
                verdicts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            except (ValueError, KeyError, TypeError):  # no report: the one line it ended with
                verdicts = said
            worst = max(worst, m["peak_pss_mb"])
            print(f"| {label} | {engine} | {m['wall_s']} s | {m['peak_pss_mb']:.0f} MB | {m['peak_rss_mb']:.0f} MB | "
                  f"{max(m['process_peaks_mb'].values(), default=0)} MB | {m['exit']} | {verdicts} |", flush=True)
    print(f"\nhighest summed Pss: {worst:.0f} MB ({'every check under 1 GB' if worst < 1024 else 'OVER 1 GB'})\n")


def naive_comparison(py: str, root: Path, tg: dict) -> None:
    cases = {
        "kimi-k2.5-sized": (drafter(root / "kimi-drafter", hidden=7168, vocab=163840, draft_vocab=32000, heads=56,
                                    kv_heads=8, inter=18432, layer_prefix="layers.0", with_embed=True,
                                    ids=[1, 29, 57]), root / "kimi-drafter", tg["kimi-k25-target"]),
        "llama-3.1-8b-sized": (drafter(root / "llama-drafter", hidden=4096, vocab=128256, draft_vocab=32000,
                                       heads=32, kv_heads=8, inter=14336, layer_prefix="midlayer",
                                       with_embed=False, ids=[1, 15, 28]), root / "llama-drafter",
                               tg["llama-3.1-8b-target"]),
    }
    startup = measure([py, "-c", STARTUP])
    print(f"startup (import SGLang, CPU context, model registry): {startup['wall_s']} s, "
          f"{startup['peak_rss_mb']} MB")
    rows = []
    for name, (params, draft, target) in cases.items():
        ours = measure([py, "-m", "contracts.cli", "check", str(draft), "--target", str(target), "--format", "json"])
        load = measure([py, "-m", "contracts.cli", "check", str(draft), "--target", str(target), "--format", "json",
                        "--only", "key-naming,tensor-shapes,d2t-semantics"])
        naive = measure([py, "-c", NAIVE, str(draft)])
        work = json.loads(measure([py, "-c", WORK, str(draft), str(target)])["stdout"])
        verdicts = {r["contract"]: r["status"] for r in json.loads(ours["stdout"])["results"]} if ours["exit"] in (0, 1) \
            else ours["stderr"]
        rows.append((name, params, ours, load, naive, verdicts, work))
    print()
    print("| drafter | parameters | naive: wall / peak RSS | check, all contracts: wall / peak RSS | ratio (naive/ours) "
          "| work after the shared start-up: naive / check | ratio | check, load contracts: wall / peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for name, params, ours, load, naive, _, work in rows:
        def cell(m):
            return f"{m['wall_s']} s / {m['peak_rss_mb']:.0f} MB"

        def ratio(m):
            return f"{naive['wall_s'] / m['wall_s']:.1f}× time, {naive['peak_rss_mb'] / m['peak_rss_mb']:.1f}× memory"  # noqa: B023  (called within this iteration)

        print(f"| {name} | {params / 1e9:.2f} B | {cell(naive)} | {cell(ours)} | {ratio(ours)} | "
              f"{work['naive_s']} s / {work['ours_s']} s | {work['naive_s'] / work['ours_s']:.1f}× | {cell(load)} |")
    print()
    for name, _, _ours, _, naive, verdicts, _ in rows:
        print(f"{name}: verdicts {verdicts}; naive exit {naive['exit']}"
              + (f" ({naive['stderr'].strip().splitlines()[-1]})" if naive["exit"] else ""))


# The naive way on vLLM, run in its environment: build its draft class on CPU as its loader does, load every tensor.
NAIVE_VLLM = """
import sys
from pathlib import Path
from contracts.engines.vllm.context import current, draft_configs, ensure_context
ensure_context()
from contracts.engines.vllm.loader import build_draft
from safetensors.torch import load_file
configs = draft_configs(Path(sys.argv[1]), Path(sys.argv[2]))
model = build_draft(configs, device="cpu")
tensors = load_file(sys.argv[1] + "/model.safetensors")
with current(configs.vc):
    model.load_weights(tensors.items())
"""


def _tree_rss_kb(pid: int, peaks: dict | None = None) -> tuple[int, int]:
    """Summed VmRSS and summed Pss of ``pid`` and every descendant (from /proc); PEAKS gets each process's own VmHWM
    (its peak RSS so far, kept by the kernel), keyed by pid with its command line. RSS counts a page shared by
    several processes (a forked child's copy-on-write pages, a file two processes map) in each of them; Pss divides
    it among them, so the summed Pss is what the machine gives the tree."""
    total, pss, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{p}/status").read_text().splitlines())
            total += int(fields["VmRSS"].split()[0])
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
            pss += next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))
            if peaks is not None:
                argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
                peaks[p] = (max(peaks.get(p, (0,))[0], int(fields["VmHWM"].split()[0])),
                            b" ".join(argv[:4]).decode(errors="replace"))
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, KeyError, ValueError, StopIteration):
            continue
    return total, pss


def measure_tree(argv: list[str], env: dict | None = None) -> dict:
    """Wall time, the peaks of the process tree's summed RSS and summed Pss (sampled every 20 ms) and each
    process's own peak (its VmHWM), for a command that starts workers."""
    start = time.perf_counter()
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
    peak, peak_pss, peaks = 0, 0, {}
    while proc.poll() is None:
        rss, pss = _tree_rss_kb(proc.pid, peaks)
        peak, peak_pss = max(peak, rss), max(peak_pss, pss)
        time.sleep(0.02)
    wall = time.perf_counter() - start
    out.seek(0), err.seek(0)
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(peak / 1024, 1), "peak_pss_mb": round(peak_pss / 1024, 1),
            "exit": proc.returncode,
            "process_peaks_mb": {cmd: round(kb / 1024) for kb, cmd in peaks.values() if kb > 50 * 1024},
            "stdout": out.read().decode(), "stderr": err.read().decode()[-400:]}


def hub_reads(py: str, root: Path, repo: Path, tg: dict, engines: list[str]) -> None:
    """Drafters judged where they are published: the loopback stand-in serves the bundled drafts and a 1.9 GB drafter;
    the bytes each check fetched (its report, and what left the server) against the drafter's size."""
    sys.path.insert(0, str(repo / "tests"))
    from hub_standin import HubStandIn

    llama = root / "hub-llama-3.1-8b-drafter"
    drafter(llama, hidden=4096, vocab=128256, draft_vocab=32000, heads=32, kv_heads=8, inter=14336,
            layer_prefix="layers.0", with_embed=True, ids=[1, 15, 28])
    bundled = sorted(p for p in (repo / "fixtures" / "drafts").iterdir() if (p / "config.json").is_file())
    repos = {f"bench/{p.name}": p for p in bundled}
    repos.update({"bench/llama-3.1-8b-drafter": llama, "bench/llama-3.1-8b-target": tg["llama-3.1-8b-target"]})
    with HubStandIn(repos) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_CACHE": str(root / "hf-cache"),
               "EAGLE3_CONTRACTS_HUB_CACHE": str(root / "hub-cache")}
        print("bytes fetched from the loopback Hub, each bundled draft (`check hf:bench/NAME --only key-naming`, "
              "a cold cache):")
        print("| draft | weights | fetched (report) | sent by the server | tensors left unread |\n|---|---|---|---|---|")
        for p in bundled:
            before = hub.served_bytes[f"bench/{p.name}"]
            m = measure_tree([py, "-m", "contracts.cli", "check", f"hf:bench/{p.name}", "--only", "key-naming",
                              "--format", "json"], env)
            try:
                got = json.loads(m["stdout"])["hub"]["draft"]
            except (ValueError, KeyError):
                print(f"| {p.name} | - | - | - | {m['stderr'].strip()[-160:]} |")
                continue
            print(f"| {p.name} | {got['weight_bytes']:,} B | {got['fetched_bytes']:,} B | "
                  f"{hub.served_bytes[f'bench/{p.name}'] - before:,} B | {got['tensors_not_fetched']} |", flush=True)
        print("\nthe Llama-3.1-8B-sized drafter (speculators' layout with its embedding) from the loopback Hub, "
              "every contract, config-only target from the Hub:")
        print("| engine | wall | summed Pss | summed RSS | weights | fetched | share | exit | verdicts |\n"
              "|---|---|---|---|---|---|---|---|---|")
        for engine in engines:
            m = measure_tree([py, "-m", "contracts.cli", "check", "hf:bench/llama-3.1-8b-drafter", "--target",
                              "hf:bench/llama-3.1-8b-target", "--engine", engine, "--format", "json"], env)
            try:
                doc = json.loads(m["stdout"])
                got = doc["hub"]["draft"]
            except (ValueError, KeyError):
                print(f"| {engine} | {m['wall_s']} s | | | | | | {m['exit']} | {m['stderr'].strip()[-160:]} |")
                continue
            counts: dict = {}
            for r in doc["results"]:
                counts[r["status"]] = counts.get(r["status"], 0) + 1
            print(f"| {engine} | {m['wall_s']} s | {m['peak_pss_mb']:.0f} MB | {m['peak_rss_mb']:.0f} MB | "
                  f"{got['weight_bytes'] / 1e9:.2f} GB | {got['fetched_bytes'] / 1e3:.0f} kB | "
                  f"{100 * got['fetched_bytes'] / got['weight_bytes']:.3f} % | {m['exit']} | "
                  f"{', '.join(f'{n} {k}' for k, n in sorted(counts.items()))} |", flush=True)
    print()


def vllm_comparison(py: str, root: Path, tg: dict) -> None:
    """check --engine vllm against the naive way in vLLM's own environment, on the Kimi-sized drafter."""
    from contracts.engine_spec import EngineSpec
    from contracts.environments.engines import environment_for

    draft = root / "kimi-drafter-vllm"
    params = drafter(draft, hidden=7168, vocab=163840, draft_vocab=32000, heads=56, kv_heads=8, inter=18432,
                     layer_prefix="layers.0", with_embed=True, ids=[1, 29, 57])
    target = tg["kimi-k25-target"]
    vpy = str(environment_for(EngineSpec("vllm", "0.32.0")))
    ours = measure_tree([py, "-m", "contracts.cli", "check", str(draft), "--target", str(target), "--engine", "vllm",
                         "--format", "json"])
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    naive = measure_tree([vpy, "-c", NAIVE_VLLM, str(draft), str(target)], env=env)
    verdicts = {r["contract"]: r["status"] for r in json.loads(ours["stdout"])["results"]} if ours["exit"] in (0, 1) \
        else ours["stderr"]
    print(f"vLLM 0.32.0, Kimi-sized drafter ({params / 1e9:.2f} B parameters, speculators' layout), process tree:")
    print("| way | wall | peak RSS (check + engine worker) | exit |\n|---|---|---|---|")
    print(f"| naive: vLLM's draft built on CPU, every tensor through its load_weights | {naive['wall_s']} s | "
          f"{naive['peak_rss_mb']:.0f} MB | {naive['exit']} |")
    print(f"| check --engine vllm, all contracts | {ours['wall_s']} s | {ours['peak_rss_mb']:.0f} MB | {ours['exit']} |")
    print("each process's own peak RSS (VmHWM), check: "
          + "; ".join(f"{cmd}: {mb} MB" for cmd, mb in ours["process_peaks_mb"].items()))
    largest = max(ours["process_peaks_mb"].values(), default=0)
    print(f"ratio (naive/ours): {naive['wall_s'] / ours['wall_s']:.1f}× time, "
          f"{naive['peak_rss_mb'] / max(ours['peak_rss_mb'], 1):.1f}× memory; summed tree "
          f"{'under' if ours['peak_rss_mb'] < 1024 else 'over'} 1 GB, each process "
          f"{'under' if largest < 1024 else 'OVER'} 1 GB; verdicts {verdicts}"
          + (f"; naive: {naive['stderr'].strip().splitlines()[-1]}" if naive["exit"] else ""))
    # embed-head with a config-only real-size target: vLLM's sharing reads the target's embedding and head, which
    # now are storage-free NaN stand-ins (contracts.engines.held_tensors.stand_in) instead of 2 GB of NaN
    llama = root / "llama-drafter-vllm"
    drafter(llama, hidden=4096, vocab=128256, draft_vocab=32000, heads=32, kv_heads=8, inter=14336,
            layer_prefix="midlayer", with_embed=False, ids=[1, 15, 28])
    m = measure_tree([py, "-m", "contracts.cli", "check", str(llama), "--target", str(tg["llama-3.1-8b-target"]),
                      "--engine", "vllm", "--only", "embed-head", "--format", "json"])
    status = json.loads(m["stdout"])["results"][0]["status"] if m["exit"] in (0, 1) else m["stderr"]
    print(f"embed-head, Llama-3.1-8B-sized drafter, config-only target: {m['wall_s']} s, summed tree "
          f"{m['peak_rss_mb']:.0f} MB; each process: "
          + "; ".join(f"{cmd}: {mb} MB" for cmd, mb in m["process_peaks_mb"].items()) + f"; verdict {status}")


def qwen3_small_draft(py: str, root: Path) -> None:
    """A realistic small draft: SpecForge's layout shaped for Qwen3-0.6B (hidden 1024, head_dim 128, 16/8 heads,
    intermediate 3072, target vocab 151936, draft vocab 16384: 40 M parameters in the checkpoint, while the engine
    builds a 151936 x 1024 embedding beside them) against a config-only Qwen3-0.6B target, every contract alone on
    SGLang (in process) and on vLLM 0.32.0 (check + engine worker): each process's own peak RSS and the tree's."""
    draft = root / "qwen3-0.6b-drafter"
    params = drafter(draft, hidden=1024, vocab=151936, draft_vocab=16384, heads=16, kv_heads=8, inter=3072,
                     layer_prefix="midlayer", with_embed=False, ids=[1, 13, 24], head_dim=128)
    target = root / "qwen3-0.6b-target"
    cfg = json.loads((Path(__file__).resolve().parents[1] / "fixtures/targets/qwen3-tiny-config/config.json")
                     .read_text())
    cfg.update(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
               num_key_value_heads=8, head_dim=128, vocab_size=151936)
    target.mkdir()
    (target / "config.json").write_text(json.dumps(cfg))
    print(f"Qwen3-0.6B-shaped draft ({params / 1e6:.1f} M parameters, SpecForge's layout), each contract alone:")
    print("| engine | contract | verdict | wall | peak RSS, largest process | peak RSS, summed tree |\n|---|---|---|---|---|---|")
    worst = 0
    for engine in ("sglang", "vllm==0.32.0"):
        for cid in CONTRACTS:
            m = measure_tree([py, "-m", "contracts.cli", "check", str(draft), "--target", str(target), "--engine",
                              engine, "--only", cid, "--format", "json"])
            status = json.loads(m["stdout"])["results"][0]["status"] if m["exit"] in (0, 1) else m["stderr"]
            largest = max(m["process_peaks_mb"].values(), default=0)
            worst = max(worst, largest)
            print(f"| {engine} | {cid} | {status} | {m['wall_s']} s | {largest} MB | {m['peak_rss_mb']:.0f} MB |")
    print(f"\nlargest single process: {worst} MB: {'every contract within 1 GB' if worst < 1024 else 'OVER 1 GB'}\n")


if __name__ == "__main__":
    main()
