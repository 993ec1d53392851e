"""Scaled-down target configs (config.json only, no weights) for the architectures ``hidden-width`` is
checked against: each is the model's published config with the same ``architectures``, ``model_type`` and
structure (MoE layout, MLA ranks, layer types, the multimodal wrapper), at tiny widths and a small vocab,
so SGLang's own class for that architecture can be built and run on a CPU. The layer count is the real one
where that is cheap, else 8 (enough that the default aux layers ``[2, N//2, N-3]`` are distinct).

Dropped from every published config: ``auto_map`` (remote code is never run), ``quantization_config``
(fp8 / mxfp4 / int4 kernels are GPU-only; the capture hook does not depend on the weight format),
tokenizer-only ids kept as published where they fit the tiny vocab.

Run once (deterministic): ``python -m contracts.trainers.target_configs``.
"""

from __future__ import annotations

import json

from contracts.trainers.common import FIXTURES, record_fixture

TARGETS = FIXTURES / "targets"
VOCAB = 512

# --- Qwen/Qwen3-8B ----------------------------------------------------------------------------------------
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
    "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 40960,
    "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 36,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "vocab_size": VOCAB,
}

# --- Qwen/Qwen3-30B-A3B -----------------------------------------------------------------------------------
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "decoder_sparse_step": 1, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 32,
    "norm_topk_prob": True, "num_attention_heads": 4, "num_experts": 8, "num_experts_per_tok": 2,
    "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": False, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
    "vocab_size": VOCAB,
}

# --- deepseek-ai/DeepSeek-V3 (MLA with q_lora_rank, 3 dense layers then MoE, sigmoid router, yarn rope) ----
DEEPSEEK_V3_TEXT = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
    "kv_lora_rank": 32, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 32, "moe_layer_freq": 1, "n_group": 2, "n_routed_experts": 8,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 4, "num_experts_per_tok": 2,
    "num_hidden_layers": 8, "num_key_value_heads": 4, "num_nextn_predict_layers": 1, "pretraining_tp": 1,
    "q_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
    "use_cache": True, "v_head_dim": 16, "vocab_size": VOCAB,
}

# --- moonshotai/Kimi-K2.5 (a MoonViT vision tower + projector around a DeepSeek-V3 text model) -------------
KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
    "ignore_index": -100, "media_placeholder_token_id": VOCAB - 3, "pad_token_id": VOCAB - 1,
    "use_unified_vision_chunk": False, "video_placeholder": "<|kimi_k25_video_placeholder|>",
    "tie_word_embeddings": False,
    "text_config": {
        **DEEPSEEK_V3_TEXT, "model_type": "kimi_k2", "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
        "num_attention_heads": 4, "num_key_value_heads": 4, "routed_scaling_factor": 2.827, "bos_token_id": VOCAB - 8,
        "eos_token_id": VOCAB - 7, "pad_token_id": VOCAB - 1, "max_position_embeddings": 262144,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 50000.0,
    },
    "vision_config": {
        "patch_size": 14, "init_pos_emb_height": 8, "init_pos_emb_width": 8, "init_pos_emb_time": 4,
        "pos_emb_type": "divided_fixed", "num_attention_heads": 2, "num_hidden_layers": 1, "hidden_size": 32,
        "intermediate_size": 64, "merge_kernel_size": [2, 2], "video_attn_type": "spatial_temporal",
        "merge_type": "sd2_tpool", "mm_projector_type": "patchmerger", "mm_hidden_size": 32,
        "projector_hidden_act": "gelu", "projector_ln_eps": 1e-05, "text_hidden_size": 64,
        # the vt_* names too: SGLang's MoonViT tower reads the plain names, its projector reads vt_hidden_size
        "vt_hidden_size": 32, "vt_intermediate_size": 64, "vt_num_attention_heads": 2, "vt_num_hidden_layers": 1,
    },
}

# --- openai/gpt-oss-20b (alternating sliding/full attention, attention sinks, 4-of-32 experts, yarn) -------
GPT_OSS_LAYERS = 24
GPT_OSS = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 2, "experts_per_token": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
    "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 64,
    "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(GPT_OSS_LAYERS)],
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 4,
    "num_experts_per_tok": 2, "num_hidden_layers": GPT_OSS_LAYERS, "num_key_value_heads": 2,
    "num_local_experts": 4, "output_router_logits": False, "pad_token_id": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "use_cache": True, "vocab_size": VOCAB,
}

# --- mistralai/Mixtral-8x7B-v0.1 (no set_eagle3_layers_to_capture in SGLang 0.5.23) ------------------------
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 4,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 2, "num_local_experts": 8,
    "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "vocab_size": VOCAB,
}

CONFIGS: dict[str, tuple[str, dict]] = {
    "qwen3-tiny-config": ("Qwen/Qwen3-8B", QWEN3),
    "qwen3-moe-tiny-config": ("Qwen/Qwen3-30B-A3B", QWEN3_MOE),
    "deepseek-v3-tiny-config": ("deepseek-ai/DeepSeek-V3", DEEPSEEK_V3_TEXT),
    "kimi-k25-tiny-config": ("moonshotai/Kimi-K2.5", KIMI_K25),
    "gpt-oss-tiny-config": ("openai/gpt-oss-20b", GPT_OSS),
    "mixtral-tiny-config": ("mistralai/Mixtral-8x7B-v0.1", MIXTRAL),
}


def main() -> None:
    for name, (model, cfg) in CONFIGS.items():
        directory = TARGETS / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        record_fixture(f"target-{name}", directory, trainer="hand-written", trainer_version="-",
                       command="python -m contracts.trainers.target_configs",
                       source=f"scaled-down from the published config of {model}",
                       architecture=cfg["architectures"][0], role="target")


if __name__ == "__main__":
    main()
