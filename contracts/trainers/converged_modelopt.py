"""The converged NVIDIA Model Optimizer (nvidia-modelopt 0.47.0) EAGLE-3 draft: Model Optimizer's EAGLE-3 module on
the converged tiny target (``fixtures/converged/target``), trained to a held-out plateau on the synthetic language
(``contracts.trainers.language``) the way Model Optimizer's own EAGLE training example does
(``examples/speculative_decoding/main.py``: ``mtsp.convert`` of the loaded target, the draft vocabulary loaded with
``HFEagleModel.load_draft_vocab_cache``, then a ``transformers.Trainer`` on the converted model, base frozen), and
exported with its ``export_speculative_decoding``:

  fixtures/converged/modelopt   ``EAGLE3_DEFAULT_CFG`` with the draft layer's geometry set to the target's (the same
      ``_convert`` as ``contracts.trainers.modelopt``; default aux ids, ``eagle_use_torch_compile=False``), a draft
      vocabulary of 64 whose ``d2t`` is made by Model Optimizer's ``calibrate_frequent_vocab`` over the training
      corpus' token stream (what ``scripts/calibrate_draft_vocab.py`` feeds it: every token of the data), trained by
      ``transformers.Trainer`` (its example's ``EagleTrainerWithAccLog``: loss and TTT accuracies from
      ``HFEagleModel.forward``) on the CPU, with the loss on the language tokens (``loss_mask``: position i counts when
      token i+1 is a language token, the example's shifted-label convention), until the held-out step-0 accuracy
      stops improving.

Its reference forward (``fixtures/references/converged-modelopt.safetensors``, ``contracts.trainers.modelopt.reference``:
``HFEagleModel.forward`` of the trained model on the reference prompt) lets ``forward-parity`` judge it.

    tox -e fixtures-converged-modelopt        (python -m contracts.trainers.converged_modelopt)

Reproducible: seeded (the Trainer's ``seed`` fixes its shuffling), two intra-op threads fixed (float32 reductions on a
CPU depend on the thread count), the corpus from the standard library. No shim: Model Optimizer 0.47.0's training
forward runs on a CPU (its TTT attention falls back to SDPA's MATH backend where cuDNN is absent).
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

from contracts.trainers import modelopt as modelopt_fixtures
from contracts.trainers.common import REPO_ROOT, SEED, record_fixture
from contracts.trainers.converged import CONVERGED, ROLE, SEQUENCE, TARGET, THREADS, build_one
from contracts.trainers.language import Language

COMMAND = "tox -e fixtures-converged-modelopt"
DRAFT_VOCAB = 64
DRAFT_SEQUENCES = 1200  # the speculators draft's corpus: Language().corpus(1200, 96, seed=SEED + 1)
HELD_OUT_SEQUENCES = 96
HELD_OUT_SEED = SEED + 2
BATCH = 16
LR = 3e-3
WARMUP_STEPS = 40
MAX_EPOCHS = 10
PATIENCE = 2  # epochs without a held-out step-0 accuracy gain of MIN_GAIN: the plateau
MIN_GAIN = 0.002
# modelopt-default's calls, with its draft vocabulary and transformers' Trainer in place of one AdamW step
FUNCTIONS_CALLED = [*modelopt_fixtures.FUNCTIONS_CALLED[:5], *modelopt_fixtures.VOCAB_FUNCTIONS, "transformers.Trainer.train",
                    *(f for f in modelopt_fixtures.FUNCTIONS_CALLED[5:] if f != "torch.optim.AdamW.step")]


class CorpusTokenizer:
    """Stands for the tokenizer ``calibrate_draft_vocab.py`` loads: the target has none, and the "conversations" are
    already token ids, so the chat template is their concatenation (every token of the data, as the script counts)."""

    def apply_chat_template(self, conversations, **kwargs):
        return [tid for ids in conversations for tid in ids]


def _rows(corpus) -> list[dict]:
    """The example's collated features, one per sequence: ``input_ids``, ``attention_mask`` and the ``loss_mask`` of
    its shifted-label convention (position i is trained when its target, token i+1, is a language token)."""
    import torch

    rows = []
    for ids, mask in corpus:
        loss_mask = torch.zeros(len(ids), dtype=torch.long)
        loss_mask[:-1] = torch.tensor(mask[1:])
        rows.append({"input_ids": torch.tensor(ids), "attention_mask": torch.ones(len(ids), dtype=torch.long),
                     "loss_mask": loss_mask})
    return rows


def _collate(features: list[dict]) -> dict:
    import torch

    return {key: torch.stack([f[key] for f in features]) for key in features[0]}


def _held_out(model, rows: list[dict]) -> dict:
    """``HFEagleModel.forward``'s own loss and TTT accuracies on held-out sequences, in training mode (its TTT steps
    run only there; no dropout anywhere, checked) under no_grad, averaged over batches of equal size."""
    import torch

    was_training = model.training
    model.train()
    losses, accs = [], []
    try:
        with torch.no_grad():
            for start in range(0, len(rows), BATCH):
                out = model(**_collate(rows[start:start + BATCH]))
                losses.append(float(out.loss))
                accs.append(out.train_acc[0])
    finally:
        model.train(was_training)
    steps = len(accs[0])
    return {"loss": round(sum(losses) / len(losses), 4),
            "accuracy": [round(sum(a[k] for a in accs) / len(accs), 4) for k in range(steps)]}


def train_modelopt(scratch: Path, directory: Path = CONVERGED / "modelopt", record=record_fixture,
                   reference_path: Path | None = None) -> dict:
    """Model Optimizer's EAGLE-3 module on the converged target, trained by ``transformers.Trainer`` as its example
    does (library defaults except what a CPU and a tiny model need: float32, no torch.compile, lr, warmup, epochs,
    batch), stopped when the held-out step-0 accuracy plateaus, exported by ``export_speculative_decoding``."""
    import torch
    import transformers
    from modelopt.torch.speculative.plugins.hf_eagle import HFEagleModel
    from modelopt.torch.speculative.utils import calibrate_frequent_vocab

    from contracts.trainers.modelopt import AUX_CONVENTION, _as_installed, _convert, _no_dropout, export, reference

    torch.set_num_threads(THREADS)
    os.chdir(REPO_ROOT)  # the target's path is repo-relative
    language = Language()
    corpus = language.corpus(DRAFT_SEQUENCES, SEQUENCE, seed=SEED + 1)
    held_out = _rows(language.corpus(HELD_OUT_SEQUENCES, SEQUENCE, seed=HELD_OUT_SEED))

    model, cfg = _convert(TARGET, None, DRAFT_VOCAB)  # seeds torch with SEED before the eagle module is made
    d2t_path = scratch / "d2t.pt"
    calibrate_frequent_vocab(CorpusTokenizer(), [ids for ids, _ in corpus], DRAFT_VOCAB, output_file=str(d2t_path))
    HFEagleModel.load_draft_vocab_cache(model, str(d2t_path))
    d2t = model.eagle_module.d2t
    selected = (d2t + torch.arange(len(d2t))).tolist()
    missing = sorted(set(language.ids) - set(selected))
    if missing:
        raise RuntimeError(f"calibrate_frequent_vocab left language ids {missing} out of the draft vocabulary")
    _no_dropout(model, "converged-modelopt")

    history: list[dict] = []
    losses: list[float] = []  # the training loss of every step (the Trainer's log averages them)

    class HeldOutPlateau(transformers.TrainerCallback):
        """At each epoch's end: the held-out figures; stop once step-0 accuracy has gained less than MIN_GAIN over
        the best for PATIENCE epochs."""

        def on_epoch_end(self, args, state, control, model=None, **kwargs):
            figures = _held_out(model, held_out)
            history.append({"epoch": round(state.epoch), "step": state.global_step, **figures})
            print(f"held-out after epoch {round(state.epoch)}: {figures}", file=sys.stderr)
            best = max(h["accuracy"][0] for h in history[:-PATIENCE]) if len(history) > PATIENCE else None
            if best is not None and all(h["accuracy"][0] < best + MIN_GAIN for h in history[-PATIENCE:]):
                control.should_training_stop = True

    class EagleTrainerWithAccLog(transformers.Trainer):
        """Model Optimizer's example trainer (``examples/speculative_decoding/eagle_utils.py``): the model's own loss,
        its TTT accuracies kept in the trainer state."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.model_accepts_loss_kwargs = False

        def compute_loss(self, *args, **kwargs):
            if not hasattr(self.state, "training_accs"):
                self.state.training_accs = []
            kwargs.pop("num_items_in_batch", None)
            return_outputs = kwargs.pop("return_outputs", False)
            loss, outputs = super().compute_loss(*args, return_outputs=True, **kwargs)
            if hasattr(outputs, "train_acc"):
                self.state.training_accs.append(outputs.train_acc)
            losses.append(float(loss.detach()))
            return (loss, outputs) if return_outputs else loss

    # the example recipe's (modelopt_recipes/general/speculative_decoding/eagle3.yaml) training section, with a CPU's
    # and a tiny model's changes: use_cpu, no bf16/tf32, lr, warmup, epochs, batch
    args = transformers.TrainingArguments(
        output_dir=str(scratch / "trainer"), use_cpu=True, seed=SEED, data_seed=SEED,
        num_train_epochs=MAX_EPOCHS, per_device_train_batch_size=BATCH, learning_rate=LR, warmup_steps=WARMUP_STEPS,
        lr_scheduler_type="linear", weight_decay=0.0, dataloader_drop_last=True, remove_unused_columns=False,
        save_strategy="no", do_eval=False, logging_steps=25, report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, bf16=False)
    trainer = EagleTrainerWithAccLog(model=model, args=args, train_dataset=_rows(corpus), data_collator=_collate,
                                     callbacks=[HeldOutPlateau()])
    result = trainer.train()
    print(f"trained in {result.metrics['train_runtime']:.1f}s", file=sys.stderr)
    accs = trainer.state.training_accs

    export(model, scratch / "export", directory)
    ref = reference(model, "converged-modelopt", TARGET, version("nvidia-modelopt"), reference_path)
    ref.pop("trained_hidden_states")  # the manifest's convention field says it
    tail = accs[-25:]
    return record(
        "converged-modelopt", directory, trainer="modelopt", trainer_version=version("nvidia-modelopt"),
        command=COMMAND, target=TARGET.name, dtype="float32",
        role=ROLE, selected_target_ids=selected,
        aux_layer_ids=list(model.eagle_config.eagle_aux_hidden_state_layer_ids), aux_layer_convention=AUX_CONVENTION,
        functions_called=_as_installed(FUNCTIONS_CALLED),
        config={k: v for k, v in cfg.items() if k != "eagle_architecture_config"},
        eagle_architecture_overrides=["draft_vocab_size", "head_dim", "intermediate_size", "num_attention_heads",
                                      "num_key_value_heads"],
        training={
            "entry": "transformers.Trainer.train (Model Optimizer's example EagleTrainerWithAccLog) on the converted "
                     "model, base frozen (eagle_freeze_base_model), CPU",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "language": "contracts.trainers.language",
            "sequences": DRAFT_SEQUENCES, "sequence": SEQUENCE, "corpus_seed": SEED + 1,
            "held_out_sequences": HELD_OUT_SEQUENCES, "held_out_seed": HELD_OUT_SEED,
            "loss_mask": "position i trained when token i+1 is a language token",
            "draft_vocab": {"size": DRAFT_VOCAB, "calibration": "calibrate_frequent_vocab over every token of the "
                            "training corpus (CorpusTokenizer), loaded by HFEagleModel.load_draft_vocab_cache"},
            "optimizer": f"Trainer default ({getattr(args.optim, 'value', args.optim)}), linear schedule, "
                         f"warmup {WARMUP_STEPS} steps",
            "lr": LR, "batch": BATCH, "max_epochs": MAX_EPOCHS,
            "stop": f"held-out step-0 accuracy gains < {MIN_GAIN} for {PATIENCE} epochs",
            "epochs": len(history), "steps": trainer.state.global_step,
            "final_loss_mean_last_25": round(sum(losses[-25:]) / len(losses[-25:]), 4),
            "final_train_accuracy_mean_last_25": [round(sum(a[0][k] for a in tail) / len(tail), 4)
                                                   for k in range(len(tail[0][0]))],
            "held_out": history,
        },
        reference=ref)


def main() -> int:
    return build_one("converged-modelopt", train_modelopt)


if __name__ == "__main__":
    sys.exit(main())
