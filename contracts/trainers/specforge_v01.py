"""``build-tiny --trainer specforge`` for SpecForge's first release (0.1.0, August 2025): no run assembly, no
checkpoint manager, no exporter yet. Its training scripts (``scripts/train_eagle3_offline.py`` at the release)
do, in order: ``AutoDraftModelConfig.from_file`` on a hand-written draft config, ``AutoEagle3DraftModel.from_config``,
``load_embedding`` from the target and ``freeze_embedding``, ``generate_vocab_mapping_file`` (token counts ->
``process_token_dict_to_mappings`` -> ``torch.save({"d2t", "t2d"})``) and ``load_vocab_mapping``, the
``OfflineEagle3Model(target_head, draft_model, length)`` wrapper, then ``draft_model.save_pretrained(dir,
state_dict=every "draft_model." key of the wrapper's state dict)``: the embedding and both vocab buffers stay in
the checkpoint. This module calls those same functions (no training step) and records what it called.

Deliberate differences from a real run, none of which reaches the saved bytes:
  * 0.1.0's ``load_embedding`` and ``TargetHead.load_weights`` read only sharded targets (``*.index.json``); the tiny
    target has one file, so both are handed a scratch view of it (links to its files plus a one-shard index);
  * the token counts are common.token_frequencies() instead of counts over a tokenized dataset.

The reference: the same draft's step 0 under ``OfflineEagle3Model.forward`` (the offline trainer's forward, as
``train_eagle3_offline.py`` calls it) on the target's hidden states at ``hidden_states[2, N//2, N-3]`` (0.1.0's
online capture: ``1 + offset``, ``N//2 - 1 + offset``, ``N - 4 + offset``, which is SGLang's default for Llama), the
draft's lm_head output recorded by a hook that stops the step there.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from contracts.trainers.common import (
    DRAFT_VOCAB,
    SEED,
    TinyTarget,
    TrainerAPIChanged,
    repo_relative,
    require_parameters,
    target_reference_inputs,
    token_frequencies,
    write_reference,
)

TTT_LENGTH = 7
FUNCTIONS_CALLED = [
    "accelerate.utils.set_seed",
    "specforge.modeling.auto.AutoDraftModelConfig.from_file",
    "specforge.modeling.auto.AutoEagle3DraftModel.from_config",
    "specforge.modeling.draft.base.Eagle3DraftModel.load_embedding",
    "specforge.modeling.draft.base.Eagle3DraftModel.freeze_embedding",
    "specforge.data.preprocessing.process_token_dict_to_mappings",
    "specforge.modeling.draft.base.Eagle3DraftModel.load_vocab_mapping",
    "specforge.modeling.target.target_head.TargetHead.load_weights",
    "specforge.core.eagle3.OfflineEagle3Model",
    "transformers.PreTrainedModel.save_pretrained(state_dict=draft_model.* keys)",
]
# The layout train_eagle3_offline.py's draft configs have (configs/llama3-8B-eagle3.json at the release), with the
# target's geometry: one decoder layer, the target's vocab, a reduced draft vocab.
CONFIG_KEYS = ("hidden_act", "hidden_size", "intermediate_size", "max_position_embeddings", "num_attention_heads",
               "num_key_value_heads", "rms_norm_eps", "vocab_size", "bos_token_id", "eos_token_id", "pad_token_id",
               "rope_theta")


def draft_config(target: TinyTarget) -> dict:
    target_config = json.loads((target.directory / "config.json").read_text())
    config = {k: target_config[k] for k in CONFIG_KEYS if target_config.get(k) is not None}
    config.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
                  tie_word_embeddings=False, torch_dtype="float32", use_cache=True, draft_vocab_size=DRAFT_VOCAB)
    return config


def sharded_view(target: TinyTarget, scratch: Path) -> Path:
    """A directory of links to the target's files plus a one-shard ``model.safetensors.index.json`` (what 0.1.0's
    loaders glob for); the target itself is never written."""
    from safetensors import safe_open

    view = scratch / "target-view"
    view.mkdir(parents=True, exist_ok=True)
    for f in target.directory.iterdir():
        if not (view / f.name).exists():
            os.symlink(f.resolve(), view / f.name)
    if not list(view.glob("*.index.json")):
        with safe_open(str(target.directory / "model.safetensors"), framework="pt") as f:
            weight_map = {k: "model.safetensors" for k in f.keys()}
        (view / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return view


def build_tiny(scratch: Path, target: TinyTarget, draft: Path, reference_path: Path | None) -> dict:
    import torch
    from accelerate.utils import set_seed

    try:
        from specforge import AutoDraftModelConfig, AutoEagle3DraftModel, OfflineEagle3Model
        from specforge.data.preprocessing import process_token_dict_to_mappings
        from specforge.modeling.target.target_head import TargetHead
    except ImportError as e:
        raise TrainerAPIChanged(f"no specforge.export and not 0.1.0's layout either: {e}") from None
    require_parameters(OfflineEagle3Model.__init__, "OfflineEagle3Model", "target_head", "draft_model", "length")
    require_parameters(OfflineEagle3Model.forward, "OfflineEagle3Model.forward", "input_ids", "attention_mask",
                       "loss_mask", "target", "hidden_states", "position_ids")
    require_parameters(process_token_dict_to_mappings, "process_token_dict_to_mappings", "token_dict",
                       "draft_vocab_size", "target_vocab_size")

    scratch.mkdir(parents=True, exist_ok=True)
    config_path = scratch / "draft_config.json"
    config_path.write_text(json.dumps(draft_config(target), indent=2, sort_keys=True) + "\n")
    view = sharded_view(target, scratch)

    set_seed(SEED)
    config = AutoDraftModelConfig.from_file(str(config_path))
    draft_model = AutoEagle3DraftModel.from_config(config)
    draft_model.load_embedding(str(view), embedding_key="model.embed_tokens.weight")
    draft_model.freeze_embedding()
    d2t, t2d = process_token_dict_to_mappings(Counter(token_frequencies(target.vocab_size)), DRAFT_VOCAB,
                                              target.vocab_size)
    mapping = scratch / "vocab_mapping.pt"
    torch.save({"d2t": d2t, "t2d": t2d}, mapping)  # generate_vocab_mapping_file's file, then its loader
    draft_model.load_vocab_mapping(str(mapping))
    target_head = TargetHead(str(view))
    target_head.load_weights(model_path=str(view), lm_head_key="lm_head.weight")
    target_head.freeze_weights()
    model = OfflineEagle3Model(target_head=target_head, draft_model=draft_model, length=TTT_LENGTH)
    state = {k.replace("draft_model.", ""): v for k, v in model.state_dict().items() if "draft_model." in k}
    draft_model.save_pretrained(str(draft), state_dict=state)

    selected = [i + int(off) for i, off in enumerate(draft_model.d2t.tolist())]
    n = target.geometry["num_hidden_layers"]
    hidden = [2, n // 2, n - 3]  # 0.1.0's online capture (see the module docstring)
    details: dict = dict(export="transformers.PreTrainedModel.save_pretrained (0.1.0 has no exporter)",
                   selected_target_ids=selected, aux_layer_ids=None,
                   aux_layer_convention="none saved: 0.1.0 writes no eagle_config; it trains on hidden_states"
                                        "[1+1, N//2-1+1, N-4+1], SGLang's default capture for Llama",
                   dtype="float32", functions_called=FUNCTIONS_CALLED, load_target_embedding=True,
                   target_view="a scratch sharded view of the target (0.1.0 reads *.index.json only)")
    if reference_path is not None:
        details["reference"] = _reference(model, draft_model, hidden, target, draft, reference_path)
        details["reference"]["trained_hidden_states"] = hidden
    return details


class _Step0Done(Exception):
    pass


def _reference(model, draft_model, hidden: list[int], target: TinyTarget, draft: Path, path: Path) -> dict:
    """Step 0 of ``OfflineEagle3Model.forward`` (input_ids, attention_mask, loss_mask, hidden_states = the three
    captured ones; ``target``, the teacher only the loss reads, zeros), logits from a hook on the draft's lm_head."""
    import torch
    import transformers

    inputs, meta = target_reference_inputs(hidden, target)
    t = inputs["input_ids"].shape[0]
    final = torch.zeros(1, t, target.geometry["hidden_size"])  # the teacher's hidden state: read by the loss only
    captured = []

    def step0(_module, _inputs, output):
        captured.append(output.detach().clone())
        raise _Step0Done

    hook = draft_model.lm_head.register_forward_hook(step0)
    model.eval()
    try:
        with torch.no_grad():
            model(input_ids=inputs["input_ids"][None], attention_mask=torch.ones(1, t, dtype=torch.long),
                  loss_mask=torch.ones(1, t, 1), target=final, hidden_states=inputs["hidden_states"][None],
                  position_ids=inputs["positions"][None])
        raise RuntimeError("specforge 0.1.0's OfflineEagle3Model.forward never reached lm_head")
    except _Step0Done:
        pass
    finally:
        hook.remove()
    metadata = {
        **meta, "fixture": "build-tiny", "trainer": "specforge", "version": version("specforge"),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "functions_called": json.dumps(["specforge.core.eagle3.OfflineEagle3Model.forward",
                                        "torch.nn.Module.register_forward_hook(lm_head)"]),
        "forward_call": ("OfflineEagle3Model.forward(input_ids=[1,T], attention_mask=ones, loss_mask=ones, "
                         "target=zeros [1,T,H] (the loss's teacher, never reached), hidden_states=[1,T,3H], "
                         "position_ids=positions[None]) under torch.no_grad; logits = lm_head output at step 0"),
        "attn_implementation": "specforge 0.1.0's LlamaAttention (cache_hidden, explicit matmul)",
        "dtype": "float32",
        "weights": f"{repo_relative(draft)}/model.safetensors (float32, as saved)",
        "embed_tokens": "the target's model.embed_tokens.weight (load_embedding), saved in the checkpoint",
        "aux_layer_ids": json.dumps(None),
        "ttt_length": str(TTT_LENGTH),
    }
    return write_reference("build-tiny", inputs, captured[0][0], metadata, path)
