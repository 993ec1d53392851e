"""One extend-mode forward of an SGLang model on a CPU: SGLang's own KV pools, its torch-native attention
backend and its ``ForwardBatch``, inside its forward context — the pieces the scheduler normally assembles.

Serves ``hidden-width`` (the target's aux capture and whether the draft's ``fc`` runs) and later
``forward-parity``. Measured on 0.5.23: a tiny Llama target's logits match transformers' to 6e-8.
"""

from __future__ import annotations

import types

from contracts.engines.sglang.compat import attention_context, supported

PAGE = 1


def _pools(text, dtype, tokens: int):
    """SGLang's request pool and the KV pool its model runner would choose for this config: the latent
    (MLA) pool for multi-head latent attention (``kv_lora_rank`` set, as DeepSeek-V2/V3 and Kimi), else MHA."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool, ReqToTokenPool

    req = ReqToTokenPool(size=1, max_context_len=tokens + 8, device="cpu", enable_memory_saver=False)
    layers = int(text.num_hidden_layers)
    if getattr(text, "kv_lora_rank", None):
        kv = MLATokenToKVPool(size=tokens + 8, page_size=PAGE, dtype=dtype, kv_lora_rank=int(text.kv_lora_rank),
                              qk_rope_head_dim=int(text.qk_rope_head_dim), layer_num=layers, device="cpu",
                              enable_memory_saver=False)
        return req, kv
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    kv = MHATokenToKVPool(size=tokens + 8, page_size=PAGE, dtype=dtype, head_num=int(kv_heads),
                          head_dim=int(head_dim), layer_num=layers, device="cpu", enable_memory_saver=False,
                          **supported(MHATokenToKVPool, enable_alt_stream=False, v_head_dim=None))
    return req, kv


def uses_latent_attention(hf_config) -> bool:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): the KV pool holds the compressed latent."""
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    return bool(getattr(text, "kv_lora_rank", None))


def _one_request(hf_config, dtype, n: int):
    """SGLang's pools and torch-native attention backend for one request of ``n`` tokens (as ``.req``,
    ``.kv``, ``.backend``), and its KV slots."""
    import torch
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    req, kv = _pools(text, dtype, n)
    runner = types.SimpleNamespace(device="cpu", req_to_token_pool=req, token_to_kv_pool=kv)
    backend = TorchNativeAttnBackend(runner)
    locs = torch.arange(PAGE, PAGE + n, dtype=torch.int64)
    req.req_to_token[0, :n] = locs.to(req.req_to_token.dtype)
    return types.SimpleNamespace(backend=backend, req=req, kv=kv), locs


def _run(model, attn, batch, input_ids):
    import torch
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    batch.capture_hidden_mode = CaptureHiddenMode.FULL
    batch.attn_backend = attn.backend
    # the pools the backend writes K/V into: 0.5.9's torch-native backend reads them from the batch
    batch.req_to_token_pool, batch.token_to_kv_pool = attn.req, attn.kv
    attn.backend.init_forward_metadata(batch)
    with torch.no_grad(), attention_context(attn.backend):
        return model(input_ids, batch.positions, batch)


def _extend_batch(input_ids, locs, spec_hidden_states=None):
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    n = int(input_ids.shape[0])
    seq = torch.tensor([n], dtype=torch.int32)
    batch = ForwardBatch(forward_mode=ForwardMode.EXTEND, batch_size=1, input_ids=input_ids,
                         req_pool_indices=torch.tensor([0]), seq_lens=seq, seq_lens_cpu=seq.clone(),
                         out_cache_loc=locs[:n], seq_lens_sum=n, positions=torch.arange(n))
    batch.extend_prefix_lens = torch.tensor([0], dtype=torch.int32)
    batch.extend_prefix_lens_cpu = [0]
    batch.extend_seq_lens = seq.clone()
    batch.extend_seq_lens_cpu = [n]
    batch.extend_num_tokens = n
    if spec_hidden_states is not None:
        # The EAGLE worker hands the draft the target's (aux) hidden states through spec_info.hidden_states.
        batch.spec_info = types.SimpleNamespace(hidden_states=spec_hidden_states)
    return batch


def _decode_batch(token_id, locs, position: int, spec_hidden_states=None):
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    seq = torch.tensor([position + 1], dtype=torch.int32)
    batch = ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=1, input_ids=token_id,
                         req_pool_indices=torch.tensor([0]), seq_lens=seq, seq_lens_cpu=seq.clone(),
                         out_cache_loc=locs[position:position + 1], seq_lens_sum=position + 1,
                         positions=torch.tensor([position]))
    if spec_hidden_states is not None:
        batch.spec_info = types.SimpleNamespace(hidden_states=spec_hidden_states)
    return batch


def extend_forward(model, hf_config, dtype, input_ids, *, spec_hidden_states=None):
    """Run ``model`` on one request of ``input_ids`` (prefill/extend), capturing hidden states in full.

    ``spec_hidden_states`` feeds a draft model the target's hidden states, as the EAGLE worker does.
    Returns SGLang's ``LogitsProcessorOutput``.
    """
    attn, locs = _one_request(hf_config, dtype, int(input_ids.shape[0]))
    return _run(model, attn, _extend_batch(input_ids, locs, spec_hidden_states), input_ids)


def draft_chain(model, hf_config, dtype, input_ids, aux_hidden, anchor: int, steps: int) -> list:
    """The draft's steps 0..steps-1 of the chain anchored at ``anchor``, on one KV cache, as SGLang's EAGLE draft
    worker runs them: step 0 extends over ``input_ids[:anchor+1]`` with the target's aux hidden states; each later
    step k is one decode-mode forward at position anchor+k that embeds ``input_ids[anchor+k]`` (the token the chain
    drafted, given as the ground truth a trainer feeds) with what the previous step's ``LogitsProcessorOutput``
    carries in ``hidden_states`` (the worker's ``spec_info.hidden_states`` for the next step: the model decides
    which state that is, e.g. ``norm_output``). Returns each step's draft-vocab logits row."""
    n = anchor + 1
    attn, locs = _one_request(hf_config, dtype, anchor + steps)
    out = _run(model, attn, _extend_batch(input_ids[:n], locs, aux_hidden[:n]), input_ids[:n])
    rows = [out.next_token_logits[-1].float()]
    for k in range(1, steps):
        position = anchor + k
        token = input_ids[position:position + 1]
        out = _run(model, attn, _decode_batch(token, locs, position, out.hidden_states[-1:]), token)
        rows.append(out.next_token_logits[-1].float())
    return rows


def decode_forward(model, hf_config, dtype, input_ids):
    """Run ``model`` over ``input_ids`` one token per step in decode mode (the KV cache growing as in serving),
    capturing hidden states in full; returns SGLang's ``LogitsProcessorOutput`` of the last step with
    ``hidden_states`` and ``next_token_logits`` of every step stacked in token order.

    Why it exists: SGLang dispatches a fresh prefill of a latent-attention (MLA) model to its MHA form, which
    hands K/V to the backend as given; the torch-native backend (the one that runs on a CPU) always reads K/V
    back from the KV pool, which for MLA holds the latent, so that form fails (measured on 0.5.23:
    ``Expected size for first two dimensions of batch2 tensor to be: [4, 24] but got: [4, 40]``). Decode
    steps take SGLang's absorbed MLA form, which reads exactly that latent.
    """
    import torch

    n = int(input_ids.shape[0])
    attn, locs = _one_request(hf_config, dtype, n)
    hidden, logits, out = [], [], None
    for i in range(n):
        ids = input_ids[i:i + 1]
        out = _run(model, attn, _decode_batch(ids, locs, i), ids)
        hidden.append(out.hidden_states)
        logits.append(out.next_token_logits)
    out.hidden_states = None if hidden[0] is None else torch.cat(hidden)
    out.next_token_logits = torch.cat(logits)
    return out


def target_forward(model, hf_config, dtype, input_ids):
    """A target's forward over ``input_ids`` on a CPU: one extend, or decode steps for latent attention."""
    if uses_latent_attention(hf_config):
        return decode_forward(model, hf_config, dtype, input_ids)
    return extend_forward(model, hf_config, dtype, input_ids)
