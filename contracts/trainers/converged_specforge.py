"""fixtures/converged/specforge: an EAGLE-3 draft of the converged tiny target (``contracts.trainers.converged``)
trained to convergence by SpecForge 0.2.0's own training entry point, ``specforge train`` (``specforge.cli.main``), and
exported by its own ``export_to_sglang`` (``specforge export --to sglang``, as the bundled ``specforge-hd32`` was).

What runs, all SpecForge's own code, in one process (its single-process worker plan): ``cli.main(["train", "-c", CFG])``
-> ``cli._train`` (``set_seed``, ``init_distributed``: gloo on a CPU) -> ``build_training_run`` (offline data source,
eagle3 strategy): ``build_model_bundle`` (the draft generated from the target's config, the target's frozen embedding,
``OnlineEagle3Model``, the offline ``TargetHead``), ``_ensure_offline_vocab_mapping``
(``count_effective_feature_tokens`` over the feature files' loss-masked ids, i.e. the corpus token frequencies, then
``process_token_dict_to_mappings``), ``build_offline_runtime`` -> ``Trainer.fit`` (``FeatureDataLoader``,
``FSDPTrainingBackend`` (DDP under NO_SHARD, below), ``BF16Optimizer``, per step
``Eagle3TrainStrategy.forward_loss`` -> ``OnlineEagle3Model.forward``, the held-out ``Evaluator`` every
``EVAL_INTERVAL`` steps and ``CheckpointManager``'s best-checkpoint tracking on ``eval/simulated_acc_len``). The
checkpoint it marks best is exported by ``specforge.export.to_sglang.export_to_sglang``.

The data is what SpecForge's offline capture writes (``specforge_hidden_states_v1``: one ``.ckpt`` per sequence with
``input_ids``, ``loss_mask``, ``hidden_state`` = the target's final normed state, ``aux_hidden_state`` = the states at
its capture ids), computed by the target in transformers: capture id k is HF ``hidden_states[k + 1]`` (see
``contracts.trainers.specforge.AUX_CONVENTION``). Train: ``Language().corpus(1200, 96, SEED + 1)`` (the speculators
draft's corpus); held out: ``Language().corpus(EVAL_SEQUENCES, 96, SEED + 2)``.

What a CPU needs, and nothing else differs from SpecForge's defaults but the schedule (epochs, batch, lr):
  * ``training.attention_backend: sdpa`` (the default flex_attention is a GPU kernel path), no loader workers;
  * ``training.fsdp_sharding: NO_SHARD``: torch's FSDP refuses a CPU-only machine ("FSDP needs a non-CPU accelerator
    device"); NO_SHARD is SpecForge's replicated recipe (its backend wraps the model in DDP over gloo), and one process
    has nothing to shard. The draft is then trained in ``model.torch_dtype`` (bfloat16, the default) with
    ``BF16Optimizer``'s float32 master weights, where FSDP would have cast the same bfloat16 compute;
  * SpecForge's per-step loss ``LogSoftmaxLoss`` is a Triton kernel: ``shims.specforge_loss_on_cpu`` puts SpecForge's
    own torch reference of it, ``specforge.core.loss._compute_loss``, in its place (same math, see the shim);
  * ``TargetHead.load_weights`` reads only sharded checkpoints (it needs ``*.index.json``); the target is one file, so
    the run reads it through a scratch view of the target directory (its two files linked, plus the index a sharded
    save would write naming that one file). Nothing of the view reaches the export.

Its reference forward (``fixtures/references/converged-specforge.safetensors``, ``contracts.trainers.specforge.reference``:
SpecForge's training-step forward with the export warm-started into it) lets ``forward-parity`` judge it.

Run: ``tox -e fixtures-converged-specforge``. Deterministic: seeded, two intra-op threads, no loader workers.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import sys
import time
from pathlib import Path

from contracts.trainers.common import DRAFT_VOCAB, REPO_ROOT, SEED, TinyTarget, record_fixture
from contracts.trainers.converged import CONVERGED, DRAFT_SEQUENCES, ROLE, SEQUENCE, TARGET, THREADS, build_one
from contracts.trainers.language import Language

NAME = "converged-specforge"
COMMAND = "python -m contracts.trainers.converged_specforge"
RUN_ID = "converged"
EVAL_SEQUENCES = 120
EPOCHS = 3
BATCH = 8
LEARNING_RATE = 3e-3
EVAL_INTERVAL = 75  # optimizer steps (an epoch is DRAFT_SEQUENCES / BATCH = 150)
LOG_INTERVAL = 25
FEATURE_BATCH = 100  # sequences per target forward while writing the features

FUNCTIONS_CALLED = [
    "specforge.cli.main (train -c CONFIG)",
    "specforge.cli._train",
    "specforge.distributed.init_distributed",
    "specforge.application.build_application_run",
    "specforge.training.assembly.build_training_run",
    "specforge.training.assembly.build_model_bundle",
    "specforge.algorithms.model_providers.build_eagle3_draft",
    "specforge.algorithms.model_providers.build_eagle3_model",
    "specforge.modeling.target.target_head.TargetHead.from_pretrained",
    "specforge.training.assembly._ensure_offline_vocab_mapping",
    "specforge.training.vocab_mapping.count_effective_feature_tokens",
    "specforge.data.preprocessing.process_token_dict_to_mappings",
    "specforge.launch.build_offline_runtime",
    "specforge.training.trainer.Trainer.fit",
    "specforge.training.strategies.base.Eagle3TrainStrategy.forward_loss",
    "specforge.algorithms.eagle3.model.OnlineEagle3Model.forward",
    "specforge.core.loss._compute_loss (in place of the Triton LogSoftmaxLoss: shims.specforge_loss_on_cpu)",
    "specforge.optimizer.BF16Optimizer",
    "specforge.eval.evaluator.Evaluator.run",
    "specforge.training.checkpoint.CheckpointManager (best on eval/simulated_acc_len)",
    "specforge.export.to_sglang.export_to_sglang",
]


def _target_view(view: Path) -> Path:
    """The target directory as ``TargetHead.load_weights`` reads it: the same two files (linked) and the index a
    sharded save writes, here naming the one file for every tensor."""
    from safetensors import safe_open

    view.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (view / name).symlink_to(TARGET.directory.resolve() / name)
    with safe_open(str(TARGET.directory / "model.safetensors"), framework="pt") as f:
        keys = sorted(f.keys())
    size = (TARGET.directory / "model.safetensors").stat().st_size
    index = {"metadata": {"total_size": size}, "weight_map": {k: "model.safetensors" for k in keys}}
    (view / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return view


def write_features(corpus, capture_ids: list[int], directory: Path) -> None:
    """SpecForge's offline feature files for ``corpus``: per sequence ``input_ids`` [T], ``loss_mask`` [T],
    ``hidden_state`` [1, T, H] (the target's last state after its norm: what SGLang hands the LM head) and
    ``aux_hidden_state`` [1, T, 3H] (capture id k = HF ``hidden_states[k + 1]``), computed in float32 and stored in
    bfloat16: the dtype SpecForge's trainer reads them in (its ``TargetHead`` is always bfloat16, as is the draft at
    the default ``model.torch_dtype``), the dtype an SGLang capture of a bfloat16 target writes."""
    import torch
    from transformers import AutoModelForCausalLM

    FEATURE_DTYPE = torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(str(TARGET.directory), dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    directory.mkdir(parents=True)
    with torch.no_grad():
        for start in range(0, len(corpus), FEATURE_BATCH):
            rows = corpus[start:start + FEATURE_BATCH]
            ids = torch.tensor([r[0] for r in rows])
            out = model(ids, output_hidden_states=True)
            aux = torch.cat([out.hidden_states[k + 1] for k in capture_ids], dim=-1)
            last = out.hidden_states[-1]
            for j, (_seq, mask) in enumerate(rows):
                torch.save({"input_ids": ids[j].clone(), "loss_mask": torch.tensor(mask, dtype=torch.long),
                            "hidden_state": last[j:j + 1].to(FEATURE_DTYPE).contiguous(),
                            "aux_hidden_state": aux[j:j + 1].to(FEATURE_DTYPE).contiguous()},
                           directory / f"{start + j:06d}.ckpt")


class _Tee(io.TextIOBase):
    """stdout, also kept: ``specforge train`` reports its metrics by printing ``step N: {...}``."""

    def __init__(self, stream):
        self.stream, self.lines, self._partial = stream, [], ""

    def write(self, text):
        self.stream.write(text)
        self._partial += text
        *done, self._partial = self._partial.split("\n")
        self.lines.extend(done)
        return len(text)

    def flush(self):
        self.stream.flush()


def _logged(lines: list[str]) -> list[tuple[int, dict]]:
    out = []
    for line in lines:
        if line.startswith("step ") and ": {" in line:
            step, _, metrics = line[len("step "):].partition(": ")
            try:
                out.append((int(step), ast.literal_eval(metrics)))
            except (ValueError, SyntaxError):
                continue
    return out


def run_config(scratch: Path, target_view: Path, draft_config: Path | None) -> dict:
    """The ``specforge train`` config (offline, eagle3): SpecForge's defaults except what a CPU needs and the
    schedule."""
    return {
        "model": {"target_model_path": str(target_view), "load_target_embedding": True,
                  **({"draft_model_config": str(draft_config)} if draft_config else {})},
        "data": {"hidden_states_path": str(scratch / "features" / "train"),
                 "eval_hidden_states_path": str(scratch / "features" / "eval"),
                 "max_length": SEQUENCE, "cache_dir": str(scratch / "cache"), "dataloader_num_workers": 0},
        "training": {"strategy": "eagle3", "seed": SEED, "num_epochs": EPOCHS, "batch_size": BATCH,
                     "learning_rate": LEARNING_RATE, "attention_backend": "sdpa", "eval_interval": EVAL_INTERVAL,
                     "log_interval": LOG_INTERVAL, "save_interval": 0, "fsdp_sharding": "NO_SHARD"},
        "tracking": {"report_to": "none"},
        "run_id": RUN_ID,
        "output_dir": str(scratch / "output"),
    }


def _public(config: dict, scratch: Path) -> dict:
    """The config as recorded: scratch paths named ``<scratch>/...``."""
    text = json.dumps(config).replace(str(scratch), "<scratch>")
    return json.loads(text)


def train_specforge(scratch: Path, directory: Path = CONVERGED / "specforge", record=record_fixture,
                    reference_path: Path | None = None) -> dict:
    import torch
    from importlib.metadata import version

    from specforge import cli
    from specforge.algorithms.model_providers import resolve_eagle_capture_layers
    from specforge.application.composition import resolve_run
    from specforge.config import Config
    from specforge.export.to_sglang import export_to_sglang
    from specforge.training.model_loading import resolve_draft_config
    from transformers import AutoConfig

    from contracts.trainers.shims import specforge_loss_on_cpu
    from contracts.trainers.specforge import AUX_CONVENTION, _keep_export, float_dtype, reference

    started = time.perf_counter()
    torch.set_num_threads(THREADS)
    scratch = Path(scratch)
    view = _target_view(scratch / "target")

    # specforge's own draft template for the target (1 layer, target geometry), at the 64-token draft vocabulary.
    run = run_config(scratch, view, None)
    cfg = Config.model_validate(run)
    provider = resolve_run(cfg).algorithm.providers.model
    template = resolve_draft_config(cfg, provider=provider.draft_config).to_dict()
    template["draft_vocab_size"] = DRAFT_VOCAB
    draft_config_path = scratch / "draft_config.json"
    draft_config_path.write_text(json.dumps(template, indent=2, sort_keys=True) + "\n")
    run = run_config(scratch, view, draft_config_path)
    cfg = Config.model_validate(run)
    capture_ids = resolve_eagle_capture_layers(cfg, resolve_draft_config(cfg, provider=provider.draft_config),
                                               AutoConfig.from_pretrained(str(view)))

    language = Language()
    corpus = language.corpus(DRAFT_SEQUENCES, SEQUENCE, seed=SEED + 1)
    held_out = language.corpus(EVAL_SEQUENCES, SEQUENCE, seed=SEED + 2)
    write_features(corpus, capture_ids, scratch / "features" / "train")
    write_features(held_out, capture_ids, scratch / "features" / "eval")
    features_s = time.perf_counter() - started
    config_path = scratch / "train.json"
    config_path.write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")

    tee = _Tee(sys.stdout)
    train_started = time.perf_counter()
    with specforge_loss_on_cpu(), contextlib.redirect_stdout(tee):
        code = cli.main(["train", "-c", str(config_path)])
    train_s = time.perf_counter() - train_started
    if code:
        raise RuntimeError(f"specforge train exited {code}")
    logged = _logged(tee.lines)
    evals = [(step, m) for step, m in logged if "eval/avg_acc" in m]
    trains = [(step, m) for step, m in logged if "eval/avg_acc" not in m]
    if not evals or not trains:
        raise RuntimeError("specforge train reported no training or held-out metrics")

    output = Path(run["output_dir"])
    best = json.loads((output / f"{RUN_ID}.best_meta.json").read_text())
    best_dir = output / f"{RUN_ID}-best"
    export_dir = scratch / "export"
    export_to_sglang(str(best_dir), str(draft_config_path), str(export_dir))
    _keep_export({"export_dir": export_dir}, directory, str(scratch))
    text = (directory / "config.json").read_text()
    if str(scratch) in text or str(REPO_ROOT) in text:
        raise RuntimeError(f"{directory}/config.json contains a local path")

    from safetensors.torch import load_file

    saved = load_file(str(directory / "model.safetensors"))
    selected = (torch.arange(saved["d2t"].shape[0]) + saved["d2t"]).tolist()
    if selected != torch.nonzero(saved["t2d"]).flatten().tolist():
        raise RuntimeError("specforge's d2t and t2d disagree")
    spoken = sorted(t for t, n in language.frequencies(corpus).items() if n)
    if not set(spoken) <= set(selected):
        raise RuntimeError(f"the draft vocabulary misses spoken ids {sorted(set(spoken) - set(selected))}")

    # its own training step's forward on the reference prompt (forward-parity), the export warm-started into it;
    # the target as TargetHead reads it, named in the reference by its repository path
    view_target = TinyTarget(TARGET.name, view, TARGET.geometry, stored_as=TARGET.path)
    ref = reference(scratch, draft_config_path, list(capture_ids), NAME, view_target, out_dir=directory,
                    path=reference_path)

    best_step = int(best["step"])
    best_eval = dict(next(m for step, m in evals if step == best_step))
    last_step, last_eval = evals[-1]
    final_train = trains[-1][1]
    rounded = lambda m: {k: ([round(x, 4) for x in v] if isinstance(v, list) else round(v, 4))  # noqa: E731
                         for k, v in sorted(m.items()) if not k.startswith("perf/")}
    print(f"features {features_s:.1f}s, specforge train {train_s:.1f}s", file=sys.stderr)
    return record(
        NAME, directory, trainer="specforge", trainer_version=version("specforge"), command=COMMAND,
        target=TARGET.name, role=ROLE, dtype=float_dtype(directory / "model.safetensors"),
        export="specforge.export.to_sglang.export_to_sglang", selected_target_ids=selected,
        aux_layer_ids=list(capture_ids), aux_layer_convention=AUX_CONVENTION, load_target_embedding=True,
        functions_called=FUNCTIONS_CALLED,
        training={
            "entry": "specforge.cli.main(['train', '-c', CONFIG])",
            "config": _public(run, scratch),
            "draft_config": {k: template[k] for k in ("draft_vocab_size", "num_hidden_layers", "hidden_size")},
            "shims": ["contracts.trainers.shims.specforge_loss_on_cpu"],
            "target_view": "TargetHead reads sharded checkpoints only: the target's two files linked in a scratch "
                           "directory with a model.safetensors.index.json naming the one file",
            "language": "contracts.trainers.language",
            "sequences": DRAFT_SEQUENCES, "held_out_sequences": EVAL_SEQUENCES, "sequence": SEQUENCE,
            "corpus_seeds": {"train": SEED + 1, "held_out": SEED + 2},
            "optimizer_steps": trains[-1][0] if trains else None,
            "final_train": rounded({k: v for k, v in final_train.items() if k in (
                "loss", "acc", "acc_0", "acc_1", "acc_2", "ploss_0", "acceptance_rate", "lr")}),
            "held_out_curve": [{"step": step, "avg_acc": round(m["eval/avg_acc"], 4),
                                "avg_loss": round(m["eval/avg_loss"], 4),
                                "simulated_acc_len": round(m["eval/simulated_acc_len"], 4)} for step, m in evals],
            "held_out_best": {"step": best_step, **rounded(best_eval)},
            "held_out_last_step": last_step,
            "held_out_plateau": {
                "last_avg_acc": round(last_eval["eval/avg_acc"], 4),
                "previous_avg_acc": round(evals[-2][1]["eval/avg_acc"], 4) if len(evals) > 1 else None},
            "exported": f"the checkpoint CheckpointManager marked best (step {best_step}, "
                        f"{best['metric']} {round(best['score'], 4)})",
        },
        reference=ref)


def main() -> int:
    return build_one(NAME, train_specforge)


if __name__ == "__main__":
    sys.exit(main())
