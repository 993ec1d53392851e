"""The converged fixtures: a tiny Llama target that has learned the synthetic language
(``contracts.trainers.language``) and, for each trainer, a draft trained to convergence on it by that trainer's own
training loop. What ``accept`` measures: the bundled one-step drafts of a random target are accepted 0 times in 378
whatever their contracts say, so they cannot show that a failing contract collapses acceptance and an all-pass does not.

  fixtures/converged/target        the llama-tiny-hd32 geometry (head size 32: vLLM's CPU attention serves it),
                                   trained by a plain transformers loop (AdamW, one-cycle schedule) to the language's
                                   entropy; saved by ``save_pretrained``.
  fixtures/converged/speculators   speculators' own ``speculators train`` (``speculators.train.cli.main``: its vocab
                                   mapping, model build, data loader and ``Trainer``) on the target's hidden states,
                                   with its trainer's reference forward (fixtures/references/converged-speculators).

    python -m contracts.trainers.converged target speculators      (run by `tox -e fixtures-converged`)

Reproducible: seeded, two intra-op threads fixed (float32 reductions on a CPU depend on the thread count), the corpus
from the standard library.
"""

from __future__ import annotations

import sys
from pathlib import Path

from contracts.trainers.common import FIXTURES, REPO_ROOT, SEED, TARGET_HD32_GEOMETRY, TinyTarget, record_fixture
from contracts.trainers.language import Language

CONVERGED = FIXTURES / "converged"
ROLE = "converged"  # the manifest's mark: measured by `accept` and the acceptance study, not a bundled example
TARGET = TinyTarget("target-converged", CONVERGED / "target", TARGET_HD32_GEOMETRY)
THREADS = 2
SEQUENCE = 96
TARGET_STEPS = 800
TARGET_BATCH = 16
TARGET_LR = 3e-3


def train_target(directory: Path = TARGET.directory) -> dict:
    """The tiny Llama trained on the language until its loss is the language's entropy (about 0.41 nats a token)."""
    import random

    import torch
    import transformers

    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(**TARGET.geometry, head_dim=32, dtype="float32")
    config.architectures = ["LlamaForCausalLM"]
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    language, rng = Language(), random.Random(SEED)
    optimizer = torch.optim.AdamW(model.parameters(), lr=TARGET_LR)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=TARGET_LR, total_steps=TARGET_STEPS,
                                                   pct_start=0.1)
    losses = []
    for _ in range(TARGET_STEPS):
        rows = [language.sequence(SEQUENCE, rng) for _ in range(TARGET_BATCH)]
        ids = torch.tensor([r[0] for r in rows])
        labels = ids.masked_fill(torch.tensor([r[1] for r in rows]) == 0, -100)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    (directory / "generation_config.json").unlink(missing_ok=True)
    return record_fixture(
        TARGET.name, directory, trainer="transformers", trainer_version=transformers.__version__,
        command="python -m contracts.trainers.converged target", architecture="LlamaForCausalLM", role="target",
        training={"language": "contracts.trainers.language", "steps": TARGET_STEPS, "batch": TARGET_BATCH,
                  "sequence": SEQUENCE, "optimizer": "AdamW, one-cycle", "lr": TARGET_LR,
                  "final_loss_mean_last_50": round(sum(losses[-50:]) / 50, 4)},
    )


# --- speculators: its own `speculators train` (cli.main -> Trainer) on hidden states the target generates ----------
DRAFT_SEQUENCES = 1200
SPECULATORS_EPOCHS = 6
SPECULATORS_LR = 3e-3


def target_hidden_states(corpus, layer_ids: list[int], directory: Path = TARGET.directory):
    """What vLLM's hidden-state capture writes for speculators (``hs_connectors``' file format), computed by the target
    in transformers: per sequence ``hidden_states`` [T, len(layer_ids) + 1, H] (id k = HF ``hidden_states[k]``, the
    input of layer k; last: the final layer's output before the model's norm) and ``token_ids``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    captured: dict = {}
    model.model.norm.register_forward_hook(lambda _m, args, _o: captured.__setitem__("last", args[0]))
    with torch.no_grad():
        for ids, _ in corpus:
            x = torch.tensor([ids])
            out = model(x, output_hidden_states=True)
            states = [out.hidden_states[k][0] for k in layer_ids] + [captured["last"][0]]
            yield {"hidden_states": torch.stack(states, dim=1).contiguous(), "token_ids": x[0].clone()}


def train_speculators(scratch: Path, directory: Path = CONVERGED / "speculators", record=record_fixture,
                      reference_path: Path | None = None) -> dict:
    """speculators' own training entry point (``speculators.train.cli.main``: vocab mapping from the corpus' token
    frequencies, ``build_draft_model``, its data loader and ``Trainer``) on the target's hidden states, its defaults
    except what a CPU and a small corpus need (sdpa attention, float32, the eager loss: its fused one is
    Triton; no loader workers, epochs, lr). ``record``: what receives the fixture's entry (the manifest; a pre-merge
    build keeps it to itself); ``reference_path``: where its reference forward goes (default fixtures/references/)."""
    import json
    from importlib.metadata import version

    import torch
    from datasets import Dataset
    from safetensors.torch import save_file
    from speculators.train import cli
    from speculators.train.config import TrainConfig

    from contracts.trainers.shims import speculators_trainer_on_cpu
    from contracts.trainers.speculators import AUX_CONVENTION, _check_no_local_paths, _copy_kept, reference

    torch.set_num_threads(THREADS)
    language = Language()
    corpus = language.corpus(DRAFT_SEQUENCES, SEQUENCE, seed=SEED + 1)
    data, save = scratch / "data", scratch / "ckpt"
    (data / "hidden_states").mkdir(parents=True)
    Dataset.from_dict({"input_ids": [ids for ids, _ in corpus], "loss_mask": [m for _, m in corpus],
                       "seq_len": [len(ids) for ids, _ in corpus]}).with_format("torch").save_to_disk(str(data))
    torch.save(language.frequencies(corpus), data / "token_freq.pt")
    layer_ids = [2, 4, 5]  # speculators' default for an 8-layer verifier (resolve_target_layer_ids), checked below
    for i, payload in enumerate(target_hidden_states(corpus, layer_ids)):
        save_file(payload, str(data / "hidden_states" / f"hs_{i}.safetensors"))
    argv = ["--verifier-name-or-path", TARGET.path, "--data-path", str(data), "--save-path", str(save),
            "--draft-vocab-size", "64", "--seed", str(SEED), "--mask-token-id", "0",
            "--draft-attn-impl", "sdpa", "--hidden-states-dtype", "float32", "--num-workers", "0",
            "--on-missing", "raise", "--loss-implementation", "eager", "--epochs", str(SPECULATORS_EPOCHS), "--lr", str(SPECULATORS_LR),
            "--total-seq-len", str(SEQUENCE * 16), "--log-dir", str(scratch / "logs")]
    cfg = TrainConfig.resolve(argv)
    with speculators_trainer_on_cpu():
        cli.main(cfg)
    last = max((p for p in save.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    config = json.loads((last / "config.json").read_text())
    if config.get("eagle_aux_hidden_state_layer_ids") != layer_ids:
        raise RuntimeError(f"speculators trained on layers {config.get('eagle_aux_hidden_state_layer_ids')}, the "
                           f"hidden states were captured at {layer_ids}")
    validation = json.loads((last / "val_metrics.json").read_text())  # the trainer's own held-out metrics
    dropped = _copy_kept(last, directory)
    _check_no_local_paths(directory, str(scratch))
    from safetensors.torch import load_file

    saved = load_file(str(directory / "model.safetensors"))
    selected = (torch.arange(saved["d2t"].shape[0]) + saved["d2t"]).tolist()
    if selected != torch.nonzero(saved["t2d"]).flatten().tolist():
        raise RuntimeError("speculators' d2t and t2d disagree")
    name = "converged-speculators"
    ref = reference(name, version("speculators"), TARGET, directory, reference_path)
    ref.pop("trained_hidden_states")
    return record(
        name, directory, trainer="speculators", trainer_version=version("speculators"),
        command="python -m contracts.trainers.converged speculators", target=TARGET.name, role=ROLE,
        dtype="bfloat16", selected_target_ids=selected, aux_layer_ids=layer_ids, aux_layer_convention=AUX_CONVENTION,
        reference=ref,
        training={"entry": "speculators.train.cli.main", "argv": [a if not a.startswith(str(scratch)) else
                                                                  "<scratch>" for a in argv],
                  "sequences": DRAFT_SEQUENCES, "epochs_saved": last.name, "dropped": dropped,
                  "validation": {k: round(v, 4) for k, v in validation.items()}})


def build_one(name: str, train) -> int:
    """``python -m contracts.trainers.converged_<trainer>``: ``train(scratch)`` from the repository root (the target
    is named repo-relative in what the trainers save) in a scratch directory removed afterwards."""
    import os
    import tempfile

    os.chdir(REPO_ROOT)
    with tempfile.TemporaryDirectory(prefix=f"eagle3-contracts-{name}-") as scratch:
        entry = train(Path(scratch))
    print(f"{name} written to {entry['path']}: {sorted(entry['files'])}", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    import os
    import tempfile

    os.chdir(REPO_ROOT)  # the target is named repo-relative in the drafts' configs

    what = argv or ["target"]
    for name in what:
        with tempfile.TemporaryDirectory(prefix="eagle3-contracts-converged-") as scratch:
            if name == "target":
                entry = train_target()
            elif name == "speculators":
                entry = train_speculators(Path(scratch))
            else:
                raise SystemExit(f"unknown converged fixture {name!r} (target, speculators)")
        print(f"{name} written to {entry['path']}: {sorted(entry['files'])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
