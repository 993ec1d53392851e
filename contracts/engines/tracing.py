"""Engine-neutral pieces of load tracing: what any adapter needs to watch an engine's own ``load_weights``.

Contract served: ``key-naming`` / ``tensor-shapes``. Neither SGLang's nor vLLM's EAGLE-3 ``load_weights``
reports what it skipped (both return None), so the adapters observe it from the outside: every float parameter
holds a NaN sentinel before loading (still NaN after = never written); on the ``meta`` device, used for
real-size drafts so memory stays bounded, there are no values, and the elements each loader call copies are
counted instead (``CopyCounter``); only small tensors (``d2t``, ``t2d``, norms) are then read whole.
"""

from __future__ import annotations

import os

from contracts.checkpoint import Checkpoint
from contracts.input_bounds import VOCABULARY_MAPS

# larger drafts are traced on the meta device (bounded memory); EAGLE3_CONTRACTS_META_ABOVE_ELEMENTS sets another bound
# (0: every draft, how the tests hold the meta path to the CPU path's verdicts on an engine in its own environment)
META_ABOVE_ELEMENTS = 50_000_000
READ_WHOLE_ELEMENTS = 1 << 20  # tensors up to this size are read whole even on meta (d2t, t2d, norms)


class CopyCounter:
    """Counts the elements of every ``Tensor.copy_`` destination while active (the loaders' writes)."""

    def __enter__(self):
        import torch

        self.elements = 0
        self._original = torch.Tensor.copy_
        counter = self

        def copy_(dst, src, *args, **kwargs):
            counter.elements += dst.numel()
            return counter._original(dst, src, *args, **kwargs)

        torch.Tensor.copy_ = copy_
        return self

    def __exit__(self, *exc):
        import torch

        torch.Tensor.copy_ = self._original
        return False


def fill_sentinel(model) -> None:
    """NaN in every float parameter: a value still NaN after loading was never written."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and not p.is_meta:
                p.fill_(float("nan"))


def unwritten_fraction(p, meta_written: dict | None = None, name: str | None = None) -> float:
    """The share of a float parameter the checkpoint did not write (NaN sentinel, or counted copies on meta)."""
    import torch

    if not p.is_floating_point() or p.numel() == 0:
        return 0.0
    if p.is_meta:
        return max(0.0, 1.0 - (meta_written or {}).get(name, 0) / p.numel())
    rows = p.detach().reshape(p.shape[0], -1) if p.dim() else p.detach().reshape(1, 1)
    step = max(1, (1 << 24) // max(1, rows.shape[1]))  # ~16M elements a chunk: no full-size bool/float copy
    nan = sum(int(torch.isnan(rows[i:i + step]).sum()) for i in range(0, rows.shape[0], step))
    return nan / p.numel()


def checkpoint_elements(ckpt: Checkpoint) -> int:
    return sum(t.numel for t in ckpt.tensors.values())


def configured_elements(ckpt: Checkpoint) -> int:
    """What the engine's draft class allocates from the config, whatever the checkpoint holds: the target-vocab
    embedding and the draft-vocab head (a SpecForge export holds neither embedding nor a full head, yet the engine
    builds both), the fusion layer over the aux states and each decoder layer (attention, MLP)."""
    return config_elements(ckpt.config)


def config_elements(cfg: dict) -> int:
    """``configured_elements`` of a draft config."""
    layer = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else cfg

    def size(key, default=0):
        value = layer.get(key, cfg.get(key))
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    h = size("hidden_size")
    vocab, draft_vocab = size("vocab_size"), size("draft_vocab_size", size("vocab_size"))
    heads = size("num_attention_heads", 1)
    head_dim = size("head_dim", h // heads if heads else 0)
    kv = size("num_key_value_heads", heads)
    attention = 2 * h * (heads + 2 * kv) * head_dim + heads * head_dim * h  # q/k/v over 2H inputs, o
    per_layer = attention + 3 * h * size("intermediate_size", 4 * h)
    fc = 3 * size("target_hidden_size", h) * h
    return (vocab + draft_vocab) * h + fc + size("num_hidden_layers", 1) * per_layer


def choose_device(ckpt: Checkpoint) -> str:
    """CPU (exact NaN-sentinel tracing) for small drafts, ``meta`` (no weights in memory) for real-size ones: sized
    by the larger of what the checkpoint holds and what the engine builds from its config (a 40 M-parameter draft
    whose config asks for a 151936 x 1024 embedding peaked at 5.4 GB when only the checkpoint was counted)."""
    return "meta" if is_real_size(ckpt) else "cpu"


def is_real_size(ckpt: Checkpoint) -> bool:
    """Whether building or loading this draft on CPU could pass the suite's memory bound (``META_ABOVE_ELEMENTS``)."""
    return max(checkpoint_elements(ckpt), configured_elements(ckpt)) > meta_above()


def meta_above() -> int:
    return int(os.environ.get("EAGLE3_CONTRACTS_META_ABOVE_ELEMENTS") or META_ABOVE_ELEMENTS)


def iter_for_device(ckpt: Checkpoint, device: str):
    """The checkpoint's tensors as the loader will see them: real ones, or on ``meta`` shape-only stand-ins
    for the large ones (small tensors such as norms, and d2t and t2d at any length, are always read whole)."""
    import torch

    if device != "meta":
        yield from ckpt.iter_tensors()
        return
    for name, info in ckpt.tensors.items():
        # a vocabulary map whole at any length its bound allows (64 MB at most): SGLang computes d2t + arange(len)
        # on it, which a meta stand-in turned into a loader error of ours
        if info.numel <= READ_WHOLE_ELEMENTS or name.split(".")[-1] in VOCABULARY_MAPS:
            yield name, ckpt.load_tensor(name)
        else:
            yield name, torch.empty(info.shape, dtype=getattr(torch, info.dtype), device="meta")


def init_random(model, seed: int = 0) -> None:
    """Seeded small random weights for a model built without a checkpoint (norm weights at 1): the tiny targets
    and drafts every adapter builds when a checkpoint holds no weights for them."""
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
