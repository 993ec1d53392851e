"""One extend-mode forward of an SGLang model on a CPU: SGLang's own KV pools, its torch-native attention
backend and its ``ForwardBatch``, inside its forward context — the pieces the scheduler normally assembles.

Serves ``hidden-width`` (the target's aux capture and whether the draft's ``fc`` runs) and later
``forward-parity``. Measured on 0.5.23: a tiny Llama target's logits match transformers' to 6e-8.
"""

from __future__ import annotations

import types

PAGE = 1


def _pools(num_layers: int, kv_heads: int, head_dim: int, dtype, tokens: int, v_head_dim: int | None = None):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    req = ReqToTokenPool(size=1, max_context_len=tokens + 8, device="cpu", enable_memory_saver=False)
    kv = MHATokenToKVPool(size=tokens + 8, page_size=PAGE, dtype=dtype, head_num=kv_heads, head_dim=head_dim,
                          layer_num=num_layers, device="cpu", enable_memory_saver=False, enable_alt_stream=False,
                          v_head_dim=v_head_dim)
    return req, kv


def extend_forward(model, hf_config, dtype, input_ids, *, spec_hidden_states=None):
    """Run ``model`` on one request of ``input_ids`` (prefill/extend), capturing hidden states in full.

    ``spec_hidden_states`` feeds a draft model the target's hidden states, as the EAGLE worker does.
    Returns SGLang's ``LogitsProcessorOutput``.
    """
    import torch
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    n = int(input_ids.shape[0])
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    req, kv = _pools(int(text.num_hidden_layers), int(kv_heads), int(head_dim), dtype, n)
    backend = TorchNativeAttnBackend(types.SimpleNamespace(device="cpu", req_to_token_pool=req, token_to_kv_pool=kv))
    locs = torch.arange(PAGE, PAGE + n, dtype=torch.int64)
    req.req_to_token[0, :n] = locs.to(req.req_to_token.dtype)
    seq = torch.tensor([n], dtype=torch.int32)
    batch = ForwardBatch(forward_mode=ForwardMode.EXTEND, batch_size=1, input_ids=input_ids,
                         req_pool_indices=torch.tensor([0]), seq_lens=seq, seq_lens_cpu=seq.clone(),
                         out_cache_loc=locs, seq_lens_sum=n, positions=torch.arange(n))
    batch.extend_prefix_lens = torch.tensor([0], dtype=torch.int32)
    batch.extend_prefix_lens_cpu = [0]
    batch.extend_seq_lens = seq.clone()
    batch.extend_seq_lens_cpu = [n]
    batch.extend_num_tokens = n
    batch.capture_hidden_mode = CaptureHiddenMode.FULL
    batch.attn_backend = backend
    if spec_hidden_states is not None:
        # The EAGLE worker hands the draft the target's (aux) hidden states through spec_info.hidden_states.
        batch.spec_info = types.SimpleNamespace(hidden_states=spec_hidden_states)
    backend.init_forward_metadata(batch)
    with torch.no_grad(), forward_context(ForwardContext(attn_backend=backend)):
        return model(input_ids, batch.positions, batch)


def init_random(model, seed: int = 0) -> None:
    """Seeded small random weights for a model built without a checkpoint (norm weights at 1)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.is_floating_point():
                continue
            if p.dim() == 1 and "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_((torch.randn(p.shape, generator=gen) * 0.02).to(p.dtype))
