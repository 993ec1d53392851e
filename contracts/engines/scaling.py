"""Scaled-down copies of target and draft configs: the same architecture class, layer count, aux layers and
switches at tiny widths, so an engine's own class can be built and run on a CPU in bounded memory.

Serves ``hidden-width`` (a tiny instance of the target's class captures the aux layers) and ``config`` (a
real-size draft's switches are probed on a scaled copy: whether a switch is honoured is a property of the
engine's code, not of the weights). ``head_dim`` is the one width an engine's CPU path constrains: SGLang's
torch-native attention takes 16, vLLM's CPU attention kernel needs one of 32, 64, 80, ...
"""

from __future__ import annotations

import json

from contracts.checkpoint import text_config

HIDDEN = 64
TINY = {"hidden_size": HIDDEN, "intermediate_size": 128, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
        "v_head_dim": 16, "n_group": 1, "topk_group": 1}
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


def scale_down(cfg: dict, head_dim: int = 16, latent: dict | None = None) -> dict:
    """A copy of a target config with the same architecture and layer count but tiny widths (``latent``: the
    latent-attention widths where an engine's CPU kernel takes only some, e.g. vLLM's CPU MLA: 512 + 64)."""
    cfg = json.loads(json.dumps(cfg))
    text = text_config(cfg)
    heads = text.get("num_attention_heads") or 4
    kv = text.get("num_key_value_heads") or heads
    tiny_heads = HIDDEN // head_dim
    for key, value in {**TINY, **(latent or {}), "num_attention_heads": tiny_heads, "head_dim": head_dim}.items():
        if key in text and text[key] is not None:
            text[key] = value
    text["hidden_size"] = HIDDEN
    text["num_key_value_heads"] = tiny_heads if kv >= heads else max(1, tiny_heads // 2)
    if "q_lora_rank" in text and text["q_lora_rank"] is not None:
        text["q_lora_rank"] = 16
    for key in EXPERT_KEYS:
        if text.get(key):
            text[key] = 4
    if text.get("num_experts_per_tok"):
        text["num_experts_per_tok"] = 2
    if text.get("n_shared_experts"):
        text["n_shared_experts"] = 1
    text["vocab_size"] = min(int(text.get("vocab_size") or 1024), 1024)
    if cfg is not text and "vocab_size" in cfg:
        cfg["vocab_size"] = text["vocab_size"]
    return cfg


def scale_draft(cfg: dict, target_hidden: int, vocab: int, head_dim: int = 16) -> dict:
    """The draft config at the scaled target's width (same number of aux layers, same switches); a nested
    (speculators) config is scaled in its ``transformer_layer_config``."""
    cfg = json.loads(json.dumps(cfg))
    layer = cfg["transformer_layer_config"] if isinstance(cfg.get("transformer_layer_config"), dict) else cfg
    same = cfg.get("target_hidden_size") in (None, layer.get("hidden_size"))
    heads = HIDDEN // head_dim
    layer.update(hidden_size=target_hidden if same else target_hidden // 2, intermediate_size=2 * target_hidden,
                 num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), head_dim=head_dim,
                 vocab_size=vocab)
    if not same:
        cfg["target_hidden_size"] = target_hidden
    if cfg.get("draft_vocab_size"):
        cfg["draft_vocab_size"] = min(int(cfg["draft_vocab_size"]), vocab)
    return cfg


def draft_at_target_vocab(cfg: dict, vocab: int) -> dict:
    """The draft config as the aux capture builds it beside a small target holding its own weights: as saved, except
    a vocabulary that would make the build real-size (``tracing.is_real_size``: a config asking for 2,000,000 rows
    peaked at 1.5 GB) is the target's VOCAB. What the capture observes (the target's hand-over, fc's width, whether
    fc runs) does not depend on the draft's embedding rows; its input ids are the target's."""
    from contracts.engines.tracing import config_elements, meta_above

    if config_elements(cfg) <= meta_above():
        return cfg
    cfg = json.loads(json.dumps(cfg))
    layer = cfg["transformer_layer_config"] if isinstance(cfg.get("transformer_layer_config"), dict) else cfg
    layer["vocab_size"] = vocab
    if isinstance(cfg.get("draft_vocab_size"), int):
        cfg["draft_vocab_size"] = min(cfg["draft_vocab_size"], vocab)
    return cfg


def estimated_elements(cfg: dict) -> int:
    """A generous estimate of a model's parameter count from its config: the text decoder (attention, MLP or
    every expert, embeddings and head) plus each sub-config with a width (vision towers: 12 H^2 per layer). Used
    only to decide whether building a class on CPU is bounded where it cannot be sized on ``meta``."""
    text = text_config(cfg)
    h = int(text.get("hidden_size") or 0)
    layers = int(text.get("num_hidden_layers") or 0)
    inter = int(text.get("moe_intermediate_size") or text.get("intermediate_size") or 4 * h)
    experts = max([int(text.get(k) or 0) for k in EXPERT_KEYS] + [1]) + int(text.get("n_shared_experts") or 0)
    size = layers * (4 * h * h + 3 * h * inter * experts) + 2 * int(text.get("vocab_size") or 0) * h
    for _key, sub in cfg.items():
        if isinstance(sub, dict) and sub is not text and isinstance(sub.get("hidden_size"), int):
            size += 12 * sub["hidden_size"] ** 2 * int(sub.get("num_hidden_layers") or 1)
    return size
