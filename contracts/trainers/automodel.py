"""Build the NVIDIA NeMo Automodel (nemo-automodel 0.7.0) EAGLE-3 draft fixtures with the real library, for the tiny
target fixtures/targets/llama-tiny-hd32 (head size 32, so both engines replay their forwards).

The recipe itself trains them: ``TrainEagle3Recipe(cfg).setup()`` and ``run_train_validation_loop()``
(``recipes/llm/train_eagle3.py``: its tokenizer and chat dataset, its draft-vocab selection
``load_or_build_eagle3_token_mapping``, the draft config it assembles, ``LlamaEagle3DraftModel``,
``Eagle3TrainerModule``'s TTT loop, AdamW, and its checkpointer with ``save_consolidated``), on a CPU, with one
substitution: the target is loaded by transformers' ``AutoModelForCausalLM.from_pretrained`` (what the recipe's
``force_hf`` path builds for a Llama) instead of ``NeMoAutoModelForCausalLM.from_pretrained``, which calls
``torch.cuda.current_device()`` unconditionally (``_transformers/auto_model.py``, ``instantiate_infrastructure(...,
device=torch.device("cuda", torch.cuda.current_device()))``: "AssertionError: Torch not compiled with CUDA enabled").
The tiny target has no tokenizer: a word-level one over its 512 ids is made in the scratch copy the recipe reads
(nothing is downloaded), and the chat data realise the common token-frequency table, scaled down.

Each training is exported the ways a user serves it:

  automodel-raw-hd32      ``<checkpoint>/model/consolidated/`` as the checkpointer wrote it (what a user points an
      engine at by mistake): ``model.``-prefixed keys, ``architectures: ["LlamaEagle3DraftModel"]``, the target's
      ``num_hidden_layers``, ``d2t`` (offsets, in the recipe's selection order) and ``t2d`` (a bool mask).
  automodel-sglang-hd32   the same directory after ``serve_sglang.resolve_draft_artifacts(<it>, "EAGLE3")``, which
      rewrites ``architectures`` in place (and writes no token map: the ``eagle_meta.pt`` it looks for is two levels
      up). Pointed at the checkpoint directory or its ``model/``, it returns a directory with no ``config.json``.
  automodel-vllm-hd32     ``serve_vllm.resolve_draft_artifacts(<checkpoint>)``'s ``vllm_export/``: the wrapper prefix
      stripped from every key (``_remap_key_for_vllm``), ``architectures`` rewritten, ``d2t``/``t2d`` kept.
  automodel-explicit31-hd32  ``aux_layer_ids: [1, 4, 6]``, ``fc_norm`` and ``norm_output`` (EAGLE-3.1), the vLLM
      export: the recipe copies the two switches into the draft config, but no aux layer id reaches it.

Automodel's aux id i is the OUTPUT of target layer i (forward hooks on ``layers[i]``, ``HFEagle3TargetModel``), i.e.
transformers' ``hidden_states[i + 1]``; default ``[1, N//2-1, N-4]`` (``default_eagle3_aux_layer_ids``).

Each training gets fixtures/references/<name>.safetensors for ``forward-parity``: the trained draft, in eval mode,
run by ``Eagle3TrainerModule.forward`` (its TTT loop, 3 steps) on the aux hidden states ``HFEagle3TargetModel`` captured
from the target for the reference prompt; ``compute_logits`` of every step is recorded.

    tox -e fixtures-automodel        (python -m contracts.trainers.automodel, PYTHONPATH=repo root)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from contracts.trainers.common import (
    FIXTURES,
    LLAMA_TINY_HD32,
    REFERENCE_STEPS,
    REPO_ROOT,
    SEED,
    TinyTarget,
    chain_logits,
    record_fixture,
    reference_prompt,
    target_reference_inputs,
    token_frequencies,
    write_reference,
)

DRAFTS = FIXTURES / "drafts"
COMMAND = "tox -e fixtures-automodel"
WEIGHTS = ("config.json", "model-00001-of-00001.safetensors", "model.safetensors.index.json")
EXPLICIT_IDS = [1, 4, 6]
DRAFT_VOCAB = 64
SEQ_LENGTH = 32
TTT_STEPS = 3
COUNT_SCALE = 100  # one chat token per this many counts of the common frequency table
ANSWER_TOKENS, PROMPT_TOKENS = 20, 4
AUX_CONVENTION = (
    "0-based decoder-layer index whose OUTPUT is captured (forward hooks on the target's layers[i], "
    "nemo_automodel/components/speculative/eagle/target.py HFEagle3TargetModel), i.e. HF hidden_states[i+1]; "
    "default [1, N//2-1, N-4] (default_eagle3_aux_layer_ids); not written to the draft config"
)
FUNCTIONS_CALLED = [
    "nemo_automodel.recipes.llm.train_eagle3.TrainEagle3Recipe.setup",
    "nemo_automodel.components.datasets.llm.eagle3.build_eagle3_dataloader",
    "nemo_automodel.components.datasets.llm.eagle3.load_or_build_eagle3_token_mapping",
    "nemo_automodel.components.speculative.eagle.target.HFEagle3TargetModel",
    "nemo_automodel.components.speculative.eagle.draft_llama.LlamaEagle3DraftModel",
    "nemo_automodel.components.speculative.eagle.draft_llama.LlamaEagle3DraftModel.set_vocab_mapping",
    "nemo_automodel.components.speculative.eagle.core.Eagle3TrainerModule.forward",
    "nemo_automodel.recipes.llm.train_eagle3.TrainEagle3Recipe.run_train_validation_loop",
    "nemo_automodel.recipes.llm.train_eagle3.TrainEagle3Recipe.save_checkpoint",
]
TARGET_SUBSTITUTION = (
    "the target is loaded by transformers.AutoModelForCausalLM.from_pretrained instead of "
    "NeMoAutoModelForCausalLM.from_pretrained, which calls torch.cuda.current_device() unconditionally "
    "(nemo_automodel/_transformers/auto_model.py: AssertionError: Torch not compiled with CUDA enabled)"
)
TRAININGS = {
    "default": {},
    "explicit31": {"aux_layer_ids": EXPLICIT_IDS, "fc_norm": True, "norm_output": True},
}
EXPORTS = {  # fixture name -> (training, export path)
    "automodel-raw-hd32": ("default", "raw"),
    "automodel-sglang-hd32": ("default", "sglang"),
    "automodel-vllm-hd32": ("default", "vllm"),
    "automodel-explicit31-hd32": ("explicit31", "vllm"),
}


# --- the inputs the recipe reads -------------------------------------------------------------------------------

def write_tokenizer(directory: Path, vocab_size: int) -> None:
    """A word-level tokenizer over the target's ids (token ``t<i>`` is id i; ``<s>``/``</s>`` are the target
    config's bos/eos ids, ``<pad>`` id 0), with a chat template that marks the assistant's turns for the loss."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    config = json.loads((directory / "config.json").read_text())
    bos, eos = int(config.get("bos_token_id") or 1), int(config.get("eos_token_id") or 2)
    names = {0: "<pad>", bos: "<s>", eos: "</s>", 3: "user", 4: "assistant"}
    vocab = {names.get(i, f"t{i}"): i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<pad>")
    fast.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' %}<s> assistant {% generation %}{{ m['content'] }} "
        "</s>{% endgeneration %} {% else %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<s> assistant {% endif %}")
    fast.save_pretrained(str(directory))


def write_chats(path: Path, vocab_size: int) -> int:
    """Chat rows whose assistant tokens realise the common token-frequency table (each id count // COUNT_SCALE times,
    in a seeded order); the user turns are seeded too. Returns the number of rows."""
    rng = random.Random(SEED)
    words = [i for i, c in sorted(token_frequencies(vocab_size).items()) if i > 4 for _ in range(c // COUNT_SCALE)]
    rng.shuffle(words)
    rows = []
    for start in range(0, len(words), ANSWER_TOKENS):
        answer = " ".join(f"t{i}" for i in words[start:start + ANSWER_TOKENS])
        prompt = " ".join(f"t{rng.randrange(5, vocab_size)}" for _ in range(PROMPT_TOKENS))
        rows.append({"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def recipe_config(root: Path, target: str, output: str, **overrides) -> Path:
    """The recipe's YAML: gloo on one process, the scratch target and chats, a draft vocab of 64, TTT 3 steps, one
    epoch, unshuffled, the final checkpoint consolidated (its default)."""
    import yaml

    recipe_args = {"target_model_name_or_path": target, "train_data_path": "chats.jsonl", "val_data_path": None,
                   "seq_length": SEQ_LENGTH, "micro_batch_size": 2, "ttt_steps": TTT_STEPS, "num_epochs": 1,
                   "output_dir": output, "draft_vocab_size": DRAFT_VOCAB, "train_shuffle": False, "num_workers": 0,
                   "log_every_steps": 1000, **overrides}
    cfg = {"dist_env": {"backend": "gloo"}, "recipe_args": recipe_args, "optimizer": {"lr": 1.0e-3}}
    path = root / f"{Path(output).name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=True))
    return path


class TransformersTarget:
    """Stands for ``NeMoAutoModelForCausalLM`` in the recipe's module (see TARGET_SUBSTITUTION)."""

    @staticmethod
    def from_pretrained(path, *, torch_dtype=None, force_hf=False, trust_remote_code=False, **kwargs):
        import transformers

        return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype,
                                                                 trust_remote_code=trust_remote_code, **kwargs)


def train(root: Path, target_path: str, name: str, **overrides):
    """Run the recipe (cwd ROOT, the target at TARGET_PATH under it) and return it after training; one intra-op
    thread, so a rebuild anywhere writes the same bytes."""
    import torch
    import nemo_automodel.recipes.llm.train_eagle3 as recipe_module
    from nemo_automodel.components.config._arg_parser import parse_args_and_load_config

    for key, value in {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": os.environ.get("MASTER_PORT", "29533")}.items():
        os.environ.setdefault(key, value)
    recipe_module.NeMoAutoModelForCausalLM = TransformersTarget
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    cfg = parse_args_and_load_config(str(recipe_config(root, target_path, f"out-{name}", **overrides)), argv=[])
    recipe = recipe_module.TrainEagle3Recipe(cfg)
    recipe.setup()
    recipe.run_train_validation_loop()
    return recipe


def checkpoint_dir(root: Path, name: str) -> Path:
    """The final checkpoint, by the checkpointer's own ``LATEST`` link."""
    return (root / f"out-{name}" / "checkpoints" / "LATEST").resolve()


def export(checkpoint: Path, how: str, scratch: Path) -> Path:
    """The directory a user serves for HOW (raw / sglang / vllm), made by Automodel's own functions on a copy of
    CHECKPOINT under SCRATCH."""
    work = scratch / how / checkpoint.name
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(checkpoint, work)
    consolidated = work / "model" / "consolidated"
    if how == "raw":
        return consolidated
    if how == "sglang":
        from nemo_automodel.components.speculative import serve_sglang

        for pointed_at in (work, work / "model"):  # what its docstring says it accepts: no config.json there
            served, _ = serve_sglang.resolve_draft_artifacts(str(pointed_at), "EAGLE3")
            if (Path(served) / "config.json").exists():
                raise RuntimeError(f"serve_sglang now resolves {pointed_at} to a servable {served}")
        served, _ = serve_sglang.resolve_draft_artifacts(str(consolidated), "EAGLE3")
        return Path(served)
    from nemo_automodel.components.speculative import serve_vllm

    served, _ = serve_vllm.resolve_draft_artifacts(str(work))
    return Path(served)


def keep(served: Path, directory: Path) -> None:
    """Copy the files the engines read (config and weights; not our scratch tokenizer) into DIRECTORY."""
    written = sorted(p.name for p in served.iterdir() if p.is_file())
    missing = [f for f in WEIGHTS if f not in written]
    if missing:
        raise SystemExit(f"{served} lacks {missing} (has {written})")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for file in WEIGHTS:
        shutil.copyfile(served / file, directory / file)


# --- the trainer's own forward, for forward-parity --------------------------------------------------------------

def reference(recipe, name: str, target: TinyTarget, ver: str, path: Path | None = None) -> dict:
    """Step 0..K-1 logits of ``Eagle3TrainerModule.forward`` (eval mode) on the reference prompt, with the aux hidden
    states ``HFEagle3TargetModel.generate_batch`` captured."""
    import torch
    import transformers

    trainer, wrapper = recipe.trainer_module, recipe.target_wrapper
    draft = trainer.draft_model
    prompt = torch.tensor(reference_prompt(target.vocab_size), dtype=torch.long)[None]
    ones = torch.ones_like(prompt)
    captured = []
    original = draft.compute_logits

    def compute_logits(hidden_states):
        logits = original(hidden_states)
        captured.append(logits.detach().clone())
        return logits

    trainer.eval()
    draft.compute_logits = compute_logits
    try:
        with torch.no_grad():
            batch = wrapper.generate_batch(input_ids=prompt, attention_mask=ones, loss_mask=ones)
            trainer(**batch.to_trainer_inputs())
    finally:
        del draft.compute_logits
    ids = list(wrapper.aux_layer_ids)
    inputs, meta = target_reference_inputs([i + 1 for i in ids], target)
    t = inputs["input_ids"].shape[0]
    aux = batch.aux_hidden_states[0, :t].float()
    if not torch.allclose(aux, inputs["hidden_states"], atol=1e-5):
        raise RuntimeError(f"{name}: Automodel's captured aux hidden states are not hidden_states"
                           f"{[i + 1 for i in ids]}")
    if batch.input_ids[0, :t].tolist() != inputs["input_ids"].tolist():
        raise RuntimeError(f"{name}: Automodel pairs other tokens with the aux hidden states than the reference")
    inputs["hidden_states"] = aux.contiguous()  # the trainer's own capture, bit for bit
    if len(captured) != TTT_STEPS:
        raise RuntimeError(f"{name}: Eagle3TrainerModule ran {len(captured)} TTT steps, expected {TTT_STEPS}")
    steps = min(REFERENCE_STEPS, TTT_STEPS)
    metadata = {
        **meta,
        "fixture": name,
        "trainer": "automodel",
        "version": ver,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "functions_called": json.dumps([
            "nemo_automodel.components.speculative.eagle.target.HFEagle3TargetModel.generate_batch",
            "nemo_automodel.components.speculative.eagle.core.Eagle3TrainerModule.forward",
            "nemo_automodel.components.speculative.eagle.draft_llama.LlamaEagle3DraftModel.project_hidden_states",
            "nemo_automodel.components.speculative.eagle.draft_llama.LlamaEagle3DraftModel.forward",
            "nemo_automodel.components.speculative.eagle.draft_llama.LlamaEagle3DraftModel.compute_logits",
        ]),
        "forward_call": ("Eagle3TrainerModule.forward(**HFEagle3TargetModel.generate_batch(prompt[None], ones, "
                         "ones).to_trainer_inputs()) under torch.no_grad in eval mode (its TTT loop, ttt_steps "
                         f"{TTT_STEPS}; step k shifts input_ids left by k and keeps each chain on its anchor row); "
                         "hidden_states = the aux hidden states generate_batch captured (rows 0..T-1); logits = "
                         "compute_logits per TTT step, shape [T, draft_vocab]"),
        "attn_implementation": "eager",
        "dtype": "float32",
        "weights": "the trained draft the recipe's checkpointer saved (float32 in memory and on disk)",
        "embed_tokens": f"the draft's model.embed_tokens.weight: copied from the target's ({target.path}) by "
                        "copy_embeddings_from_target and frozen",
        "aux_layer_ids": json.dumps(ids),
    }
    per_step = [c[0, :t] for c in captured[:steps]]
    return write_reference(name, inputs, per_step[0], metadata, path, step_logits=chain_logits(per_step))


# --- the fixtures -----------------------------------------------------------------------------------------------

def scratch_target(root: Path, target: TinyTarget) -> str:
    """A copy of the target under ROOT (config and weights) with the tokenizer it lacks; the path the recipe is given,
    relative to ROOT (the bundled target's repo-relative path, so the configs it writes name no local path; a
    build-tiny target: ``target``). The target's own directory is never written."""
    path = target.path if not Path(target.path).is_absolute() else "target"
    directory = root / path
    directory.mkdir(parents=True)
    for file in ("config.json", "model.safetensors"):
        shutil.copyfile(target.directory / file, directory / file)
    write_tokenizer(directory, target.vocab_size)
    return path


def build_all(root: Path, target: TinyTarget = LLAMA_TINY_HD32, trainings: dict = TRAININGS) -> dict[str, dict]:
    """Train each of TRAININGS under ROOT and return {training: {"recipe", "checkpoint", "details"}}."""
    target_path = scratch_target(root, target)
    rows = write_chats(root / "chats.jsonl", target.vocab_size)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        out = {}
        for name, overrides in trainings.items():
            recipe = train(root, target_path, name, **overrides)
            selected = recipe.trainer_module.selected_token_ids.tolist()
            out[name] = {"recipe": recipe, "checkpoint": checkpoint_dir(root, name), "details": dict(
                selected_target_ids=selected,
                aux_layer_ids=list(recipe.target_wrapper.aux_layer_ids),
                aux_layer_convention=AUX_CONVENTION,
                functions_called=FUNCTIONS_CALLED,
                recipe_args={k: v for k, v in sorted(recipe.cfg.recipe_args.to_dict().items())
                             if k not in ("target_model_name_or_path", "train_data_path", "output_dir")},
                substitution=TARGET_SUBSTITUTION,
                training=(f"the recipe's loop: one epoch of {rows} chat rows (the common token-frequency table, "
                          f"one token per {COUNT_SCALE} counts), micro batch 2, AdamW lr 1e-3, warmup-cosine"),
                dtype="float32",
                target=target.name,
            )}
        return out
    finally:
        os.chdir(cwd)


def build_tiny(scratch: Path, target: TinyTarget, draft: Path, reference_path: Path | None) -> dict:
    """``build-tiny --trainer automodel``: the recipe with its defaults (``automodel-vllm-hd32``'s training) with the
    installed release, exported by its ``serve_vllm`` (its release's export for vLLM; the bundled twin), into DRAFT,
    and ``Eagle3TrainerModule``'s reference forward."""
    built = build_all(scratch, target, {"default": TRAININGS["default"]})["default"]
    keep(export(built["checkpoint"], "vllm", scratch / "exports"), draft)
    details = {**built["details"], "export": "vllm"}
    if reference_path is not None:
        details["reference"] = reference(built["recipe"], "tiny", target, version("nemo-automodel"), reference_path)
        details["reference"]["trained_hidden_states"] = [i + 1 for i in details["aux_layer_ids"]]
    return details


def main() -> None:
    os.chdir(REPO_ROOT)
    ver = version("nemo-automodel")
    with tempfile.TemporaryDirectory(prefix="automodel-fixtures-") as tmp:
        root = Path(tmp)
        trainings = build_all(root)
        for name, (training, how) in EXPORTS.items():
            built = trainings[training]
            keep(export(built["checkpoint"], how, root / "exports" / training), DRAFTS / name)
            details = {**built["details"], "export": how}
            details["reference"] = reference(built["recipe"], name, LLAMA_TINY_HD32, ver)
            entry = record_fixture(name, DRAFTS / name, trainer="automodel", trainer_version=ver, command=COMMAND,
                                   **details)
            print(f"{name}: {entry['path']} {json.dumps(entry['files'])}", file=sys.stderr)


if __name__ == "__main__":
    main()
