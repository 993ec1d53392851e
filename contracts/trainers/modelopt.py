"""Build the NVIDIA Model Optimizer (nvidia-modelopt 0.47.0) EAGLE-3 draft fixtures with the real library, for
the tiny target fixtures/targets/llama-tiny-hd32 (head size 32, so both engines replay their forwards):

  fixtures/drafts/modelopt-default-hd32   the library's defaults as a user runs them: `EAGLE3_DEFAULT_CFG` with only
      the draft layer's geometry set to the target's (and `eagle_use_torch_compile=False`: one CPU step would
      otherwise autotune for minutes), `mtsp.convert`, one training step, `export_speculative_decoding`. Default aux
      ids (`sorted({1, N//2-1, N-4})`), the full vocabulary (no d2t), the exporter's own rope and dtype.
  fixtures/drafts/modelopt-explicit-hd32  explicit aux ids [1, 4, 6] and a draft vocabulary of 64 whose d2t is made
      by Model Optimizer's own `calibrate_frequent_vocab` (what its examples' calibrate_draft_vocab.py runs) over
      the common token-frequency table, and loaded by `HFEagleModel.load_draft_vocab_cache`.

What Model Optimizer writes, as these files show: `layers.N.*`, `fc`, `norm`, `lm_head` (the base model's when the
draft has none), `d2t` only for a reduced vocabulary (offsets, in frequency order: draft id i is the i-th most
frequent target id), never `t2d` or `embed_tokens`; a flat `LlamaForCausalLMEagle3` config with an `eagle_config`
holding the aux ids and its own switches; `torch_dtype: bfloat16` over float32 weights; the default rope it trained
with replaced by yarn (factor 32, original 2048). Its aux id i is the OUTPUT of decoder layer i (forward hooks on
`layers[i]`), i.e. transformers' `hidden_states[i + 1]`.

Each draft gets fixtures/references/<name>.safetensors for `forward-parity`: the committed export's training model
(the same convert, the trained eagle module's weights as exported), in eval mode, fed the reference prompt through
`HFEagleModel.forward` (its own base-model forward, aux capture hooks, input pairing and first draft step); the aux
hidden states its hooks captured and the step-0 logits of `_eagle_forward` are recorded.

    tox -e fixtures-modelopt        (python -m contracts.trainers.modelopt, PYTHONPATH=repo root)
"""

from __future__ import annotations

import copy
import json
import os
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
    TrainerAPIChanged,
    chain_logits,
    record_fixture,
    reference_prompt,
    target_reference_inputs,
    token_frequencies,
    write_reference,
)

DRAFTS = FIXTURES / "drafts"
COMMAND = "tox -e fixtures-modelopt"
KEEP = ("config.json", "model.safetensors")
EXPLICIT_IDS = [1, 4, 6]
REDUCED_VOCAB = 64
TRAIN_TOKENS = 32
AUX_CONVENTION = (
    "0-based decoder-layer index whose OUTPUT is captured (forward hooks on the target's layers[i], "
    "modelopt/torch/speculative/plugins/hf_eagle.py), i.e. HF hidden_states[i+1]; default sorted({1, N//2-1, N-4})"
)
FUNCTIONS_CALLED = [
    "transformers.AutoModelForCausalLM.from_pretrained",
    "modelopt.torch.speculative.config.EAGLE3_DEFAULT_CFG",
    "modelopt.torch.speculative.convert",
    "modelopt.torch.speculative.plugins.hf_eagle.HFEagleModel.modify",
    "modelopt.torch.speculative.plugins.hf_eagle.default_eagle_aux_layer_ids",
    "modelopt.torch.speculative.plugins.hf_eagle.HFEagleModel.forward",
    "torch.optim.AdamW.step",
    "modelopt.torch.export.unified_export_hf.export_speculative_decoding",
    "modelopt.torch.export.plugins.hf_spec_export.EagleExporter.export",
]
VOCAB_FUNCTIONS = [
    "modelopt.torch.speculative.utils.calibrate_frequent_vocab",
    "modelopt.torch.speculative.utils.get_conversation_input_ids",
    "modelopt.torch.speculative.plugins.hf_eagle.HFEagleModel.load_draft_vocab_cache",
]


class CalibrationTokenizer:
    """Stands for a tokenizer over the calibration data: the tiny target has no tokenizer, and the calibration
    "conversations" are the common token-frequency table itself, each id `count` times (ascending ids), which is
    what Model Optimizer's `get_conversation_input_ids` hands `calibrate_frequent_vocab` to count."""

    def __init__(self, vocab_size: int = 512):
        self.vocab_size = vocab_size

    def apply_chat_template(self, conversations, **kwargs):
        return [tid for tid, count in sorted(token_frequencies(self.vocab_size).items()) for _ in range(count)]


def _convert(target: TinyTarget, explicit_ids: list[int] | None, draft_vocab: int | None):
    """The target with Model Optimizer's EAGLE-3 module, configured as a user does (library defaults, the draft
    layer's geometry set to the target's)."""
    import torch
    import transformers
    import modelopt.torch.speculative as mtsp
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG

    from modelopt.torch.speculative.config import EagleConfig

    torch.manual_seed(SEED)
    cfg = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    if "eagle_architecture_config" not in cfg:  # 0.29-0.33: EAGLE-3 is Megatron's only, the HF module is EAGLE-1's
        raise TrainerAPIChanged("modelopt.torch.speculative.config.EAGLE3_DEFAULT_CFG has no "
                                "eagle_architecture_config: this release has no Hugging Face EAGLE-3 module")
    model = transformers.AutoModelForCausalLM.from_pretrained(target.path, dtype=torch.float32)
    arch = cfg["eagle_architecture_config"]
    g = model.config
    arch.update(intermediate_size=g.intermediate_size, num_attention_heads=g.num_attention_heads,
                num_key_value_heads=g.num_key_value_heads, head_dim=g.head_dim)
    for key in ("hidden_size", "vocab_size", "max_position_embeddings"):  # templates that carry Llama-8B's (0.39-0.40)
        if key in arch:
            arch[key] = getattr(g, key)
    if "draft_vocab_size" in arch and draft_vocab is None:
        arch["draft_vocab_size"] = g.vocab_size
    if explicit_ids is not None:
        arch["eagle_aux_hidden_state_layer_ids"] = list(explicit_ids)
    if draft_vocab is not None:
        arch["draft_vocab_size"] = draft_vocab
    if "eagle_use_torch_compile" in EagleConfig.model_fields:  # the config forbids keys it does not know
        cfg["eagle_use_torch_compile"] = False  # on a CPU one step would otherwise autotune for minutes
    mtsp.convert(model, [("eagle", cfg)])
    return model, cfg


def load_export(draft_dir: Path, target: TinyTarget):
    """An exported draft loaded back into Model Optimizer's EAGLE-3 module as a user's training run converts it
    (``_convert``: ``EAGLE3_DEFAULT_CFG`` with the export's geometry, aux ids and draft vocabulary; the rope it trains
    with, not the one its export declares), every exported tensor taken and every module tensor written.
    Returns (model, draft vocabulary size)."""
    from contracts.trainers.common import saved_tensors

    draft = json.loads((Path(draft_dir) / "config.json").read_text())
    eagle_config = draft.get("eagle_config") or {}
    vocab = int(target.vocab_size)
    draft_vocab = int(draft.get("draft_vocab_size") or vocab)
    model, _ = _convert(target, eagle_config.get("eagle_aux_hidden_state_layer_ids"),
                        draft_vocab if draft_vocab != vocab else None)
    saved = dict(saved_tensors(draft_dir))
    own = model.eagle_module.state_dict()
    if "lm_head.weight" not in own:  # the export wrote the base model's head, which the model has already
        saved.pop("lm_head.weight", None)
    unknown = sorted(set(saved) - set(own))
    if unknown:
        raise RuntimeError(f"Model Optimizer's EAGLE module has no {unknown[:3]}")
    missing = model.eagle_module.load_state_dict(saved, strict=False).missing_keys
    if missing:
        raise RuntimeError(f"the export lacks {missing[:3]} of Model Optimizer's EAGLE module")
    return model, draft_vocab


def _install_vocab(model, scratch: Path, draft_vocab: int) -> Path:
    from modelopt.torch.speculative.plugins.hf_eagle import HFEagleModel
    from modelopt.torch.speculative.utils import calibrate_frequent_vocab

    path = scratch / "d2t.pt"
    calibrate_frequent_vocab(CalibrationTokenizer(), [], draft_vocab, output_file=str(path))
    HFEagleModel.load_draft_vocab_cache(model, str(path))
    return path


def _train_step(model) -> float:
    """One optimizer step of the eagle module on a seeded batch (the base model is frozen by default)."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, model.config.vocab_size, (1, TRAIN_TOKENS), generator=gen)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    try:
        out = model(input_ids=ids, labels=ids)
    except RuntimeError as e:
        import inspect

        module = inspect.getmodule(type(model).forward)
        if "No viable backend for scaled_dot_product_attention" in str(e) and module is not None and \
                "enable_cp_ttt_patch()" in inspect.getsource(module):
            # 0.43.0: training-mode TTT steps run under sdpa_kernel(SDPBackend.CUDNN_ATTENTION) (its context-parallel
            # patch, on unless eagle_mix_hidden_states), a CUDA-only backend
            raise TrainerAPIChanged("its training forward runs attention under sdpa_kernel(CUDNN_ATTENTION) "
                                    "(enable_cp_ttt_patch): no CPU backend, so no training step on a CPU") from None
        raise
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return float(out.loss)


def _as_installed(functions: list[str]) -> list[str]:
    """The functions called, under the module the installed release defines its HF EAGLE model in (0.45 on:
    plugins.hf_eagle; before: plugins.transformers), without the helpers it does not have."""
    import importlib

    import modelopt.torch.speculative.plugins as plugins

    module = plugins.HFEagleModel.__module__
    here = importlib.import_module(module)
    out = [f.replace("modelopt.torch.speculative.plugins.hf_eagle", module) for f in functions]
    return [f for f in out if not f.endswith(".default_eagle_aux_layer_ids") or hasattr(here, "default_eagle_aux_layer_ids")]


def export(model, export_dir: Path, directory: Path) -> None:
    """``export_speculative_decoding`` of the model, in eval mode, into the scratch folder ``export_dir``; the files
    it must write (and only those) copied into ``directory``, which is replaced; a config naming a local path is
    refused."""
    import modelopt.torch.export.unified_export_hf as unified

    model.eval()
    unified.export_speculative_decoding(model, export_dir=str(export_dir))
    written = sorted(p.name for p in export_dir.iterdir())
    if written != sorted(KEEP):
        raise SystemExit(f"export_speculative_decoding wrote {written}, expected {sorted(KEEP)}")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for file in KEEP:
        shutil.copyfile(export_dir / file, directory / file)
    text = (directory / "config.json").read_text()
    if directory.resolve().is_relative_to(REPO_ROOT) and (str(REPO_ROOT) in text or str(export_dir.parent) in text):
        raise SystemExit(f"{directory}/config.json contains a local path")


def build(scratch: Path, name: str, target: TinyTarget, explicit_ids=None, draft_vocab=None,
          directory: Path | None = None) -> dict:
    import modelopt.torch.export.unified_export_hf as unified

    if not hasattr(unified, "export_speculative_decoding"):  # 0.37-0.42 export through export_hf_checkpoint
        raise TrainerAPIChanged("modelopt.torch.export.unified_export_hf has no export_speculative_decoding (this "
                                "release exports drafts only through export_hf_checkpoint's speculative branch, "
                                "which this builder does not drive)")
    model, cfg = _convert(target, explicit_ids, draft_vocab)
    functions = list(FUNCTIONS_CALLED)
    if draft_vocab is not None:
        _install_vocab(model, scratch, draft_vocab)
        functions[5:5] = VOCAB_FUNCTIONS
    loss = _train_step(model)
    export(model, scratch / f"{name}-export", directory or DRAFTS / name)
    eagle = model.eagle_module
    d2t = eagle.d2t if hasattr(eagle, "d2t") else None
    vocab = model.eagle_config.draft_vocab_size
    selected = (d2t + __import__("torch").arange(len(d2t))).tolist() if d2t is not None else list(range(vocab))
    details = dict(
        selected_target_ids=selected,
        aux_layer_ids=list(model.eagle_config.eagle_aux_hidden_state_layer_ids),
        aux_layer_convention=AUX_CONVENTION,
        functions_called=_as_installed(functions),
        config={k: v for k, v in cfg.items() if k != "eagle_architecture_config"},
        eagle_architecture_overrides=sorted({"intermediate_size", "num_attention_heads", "num_key_value_heads",
                                             "head_dim"} | ({"eagle_aux_hidden_state_layer_ids"} if explicit_ids
                                                            else set()) | ({"draft_vocab_size"} if draft_vocab else set())),
        training=f"one AdamW step (lr 1e-3) of HFEagleModel.forward's loss on {TRAIN_TOKENS} seeded token ids "
                 f"(loss {loss:.4f})",
        dtype="float32",
        target=target.name,
    )
    return {"model": model, "details": details}


def _no_dropout(model, name: str) -> None:
    import torch

    active = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    active += [f"{n}.config.attention_dropout" for n, m in model.named_modules()
               if float(getattr(getattr(m, "config", None), "attention_dropout", 0.0) or 0.0) > 0]
    if active:
        raise RuntimeError(f"{name}: dropout in training mode would make the TTT reference random: {active[:3]}")


def reference(model, name: str, target: TinyTarget, ver: str, path: Path | None = None) -> dict:
    """Step-0 logits of Model Optimizer's own forward of the trained model (its base forward, aux hooks and
    pairing), with the aux hidden states its hooks captured."""
    import torch
    import transformers

    prompt = torch.tensor(reference_prompt(target.vocab_size), dtype=torch.long)
    captured: dict = {"logits": []}
    original_prepare, original_forward = model._prepare_eagle_inputs, model._eagle_forward
    if getattr(model, "eagle_mix_hidden_states", False):
        raise RuntimeError(f"{name}: eagle_mix_hidden_states feeds randomly chosen rows back; no chain to record")
    steps = min(REFERENCE_STEPS, int(getattr(model, "eagle_ttt_steps", 1)))

    def prepare(*args, **kwargs):
        base_outputs = kwargs.get("base_outputs", args[-1] if args else None)
        captured["aux"] = base_outputs.aux_hiddens.detach().clone()
        return original_prepare(*args, **kwargs)

    def forward(*args, **kwargs):
        out = original_forward(*args, **kwargs)
        logits = out[2][0] if isinstance(out[2], (list, tuple)) else out[2]  # 0.43-0.44: a list, draft head first
        captured["logits"].append(logits.detach().clone())
        return out

    model._prepare_eagle_inputs, model._eagle_forward = prepare, forward
    # HFEagleModel.forward runs its TTT steps only in training mode, as it trains; that mode computes the same
    # function here only without dropout
    if steps > 1:
        _no_dropout(model, name)
        # its TTT masks are cached per step, not per length: the training step's (TRAIN_TOKENS long) would be reused
        if isinstance(getattr(model, "_cached_attn_blk_masks", None), dict):
            model._cached_attn_blk_masks.clear()
    model.train(steps > 1)
    try:
        with torch.no_grad():
            model(input_ids=prompt[None])
    finally:
        model.eval()
        del model._prepare_eagle_inputs, model._eagle_forward
    if len(captured["logits"]) < steps:
        raise RuntimeError(f"{name}: modelopt ran {len(captured['logits'])} TTT steps, expected {steps}")
    ids = list(model.eagle_config.eagle_aux_hidden_state_layer_ids)
    inputs, meta = target_reference_inputs([i + 1 for i in ids], target)
    t = inputs["input_ids"].shape[0]
    aux = captured["aux"][0, :t].float()
    if not torch.allclose(aux, inputs["hidden_states"], atol=1e-5):
        raise RuntimeError(f"{name}: modelopt's captured aux hidden states are not hidden_states{[i + 1 for i in ids]}")
    inputs["hidden_states"] = aux.contiguous()  # the trainer's own capture, bit for bit
    metadata = {
        **meta,
        "fixture": name,
        "trainer": "modelopt",
        "version": ver,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "functions_called": json.dumps([
            "modelopt.torch.speculative.plugins.hf_eagle.HFEagleModel.forward",
            "modelopt.torch.speculative.plugins.hf_eagle.HFEagleModel._eagle_base_model_forward",
            "modelopt.torch.speculative.plugins.hf_eagle.HFEagleModel._prepare_eagle_inputs",
            "modelopt.torch.speculative.plugins.hf_eagle.HFEagleModel._eagle_forward",
        ]),
        "forward_call": ("HFEagleModel.forward(input_ids=prompt[None]) under torch.no_grad in training mode (its TTT "
                         f"loop, eagle_ttt_steps; no dropout anywhere, checked); {steps} step(s) kept; "
                         "hidden_states = base_outputs.aux_hiddens its layer hooks captured (rows 0..T-1); logits = "
                         "_eagle_forward's eagle_logits per TTT step: step k writes the chain anchored at i on row "
                         "i+k (its output hidden states roll by one row per step), shape [T, draft_vocab]"),
        "attn_implementation": "sdpa",
        "dtype": "float32",
        "weights": "the trained model that export_speculative_decoding exported (float32 in memory and on disk)",
        "embed_tokens": f"the target's model.embed_tokens.weight ({target.path}): modelopt embeds with the base model's",
        "aux_layer_ids": json.dumps(ids),
    }
    step_logits = chain_logits([c[0, :t] for c in captured["logits"][:steps]], shift_rows=True) if steps > 1 \
        else None
    out = write_reference(name, inputs, captured["logits"][0][0, :t], metadata, path, step_logits=step_logits)
    out["trained_hidden_states"] = [i + 1 for i in ids]
    return out


def build_tiny(scratch: Path, target: TinyTarget, draft: Path, reference_path: Path | None) -> dict:
    """``build-tiny --trainer modelopt``: modelopt-default's build (library defaults, the draft layer's geometry
    set to the target's, one training step, ``export_speculative_decoding``) with the installed release, into
    ``draft``, and its reference forward."""
    built = build(scratch, "tiny", target, directory=draft)
    details = built["details"]
    if reference_path is not None:
        details["reference"] = reference(built["model"], "tiny", target, version("nvidia-modelopt"), reference_path)
    return details


def main() -> None:
    os.chdir(REPO_ROOT)  # the target's path is relative to the repo root
    ver = version("nvidia-modelopt")
    with tempfile.TemporaryDirectory(prefix="modelopt-fixtures-") as tmp:
        scratch = Path(tmp)
        builds: tuple[tuple[str, dict], ...] = (
            ("modelopt-default-hd32", {}),
            ("modelopt-explicit-hd32", {"explicit_ids": EXPLICIT_IDS, "draft_vocab": REDUCED_VOCAB}))
        for name, kwargs in builds:
            built = build(scratch, name, LLAMA_TINY_HD32, **kwargs)
            details = built["details"]
            details["reference"] = reference(built["model"], name, LLAMA_TINY_HD32, ver)
            details["reference"].pop("trained_hidden_states")  # the manifest's convention field says it
            entry = record_fixture(name, DRAFTS / name, trainer="modelopt", trainer_version=ver, command=COMMAND,
                                   **details)
            print(f"{name}: {entry['path']} {json.dumps(entry['files'])}", file=sys.stderr)


if __name__ == "__main__":
    main()
