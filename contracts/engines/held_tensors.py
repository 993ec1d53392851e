"""What a draft holds after an engine's embed/head wiring, recorded the same way for every engine adapter.

Contract served: ``embed-head``. The wiring swaps parameter objects (SGLang's ``set_embed`` /
``set_embed_and_head``, vLLM's proposer sharing the target's ``embed_tokens`` / ``lm_head``); whether the draft
ends up with its trained tensors, the target's, or never-written ones is read from parameter identity, the NaN
sentinel of the load and chunked checksums of the held values.
"""

from __future__ import annotations

import os

from contracts.engines.tracing import unwritten_fraction
from contracts.fingerprint import chunk_rows_for, fingerprint, tensor_chunks
from contracts.observations_wiring import HeldTensor


# A target whose embedding and head together exceed this are loaded on ``meta`` by the wiring observations (a
# Llama-3.1-8B target's two bfloat16 tensors are 2 GB; loading them into the engine's own target model peaked at
# 9.6 GB on SGLang, 9.9 GB on vLLM): its tensors become stand-ins, their values read from the files
META_VOCAB_BYTES = 512 << 20


def meta_vocab_bytes() -> int:
    """``META_VOCAB_BYTES``, or ``EAGLE3_CONTRACTS_META_VOCAB_MB`` where set (0: every target with weights)."""
    return int(float(os.environ.get("EAGLE3_CONTRACTS_META_VOCAB_MB", META_VOCAB_BYTES / (1 << 20))) * (1 << 20))


def vocab_on_meta(ckpt, keys) -> bool:
    """Whether the target's vocabulary tensors KEYS (in checkpoint CKPT) pass ``meta_vocab_bytes``."""
    return sum(ckpt.tensors[k].nbytes for k in keys) > meta_vocab_bytes()


def load_on_meta(tracer, ckpt, keys, fates) -> tuple[str | None, dict]:
    """The target's own ``load_weights`` of KEYS traced on ``meta`` (TRACER: the engine's load tracer of the target,
    its vocabulary parameters still on ``meta``; the copy regions its weight loaders write are counted, no values).
    Returns (the load's error, target parameter -> (file, key) for each parameter it wrote whole from one file
    tensor: the values it would hold)."""
    import torch

    error = tracer.load(((k, torch.empty(ckpt.tensors[k].shape, dtype=getattr(torch, ckpt.tensors[k].dtype),
                                         device="meta")) for k in keys), fates)
    return error, {c.param: (ckpt.path / ckpt.tensors[k].file, k) for k, fate in fates.items() for c in fate.calls
                   if c.error is None and tracer.meta_written.get(c.param, 0) >= ckpt.tensors[k].numel}


def _holds(module, param) -> bool:
    """MODULE's weight is PARAM itself (not a copy)."""
    return getattr(module, "weight", None) is param


def materialise(model, param, lazily: bool = False) -> None:
    """Give one meta parameter real CPU storage holding the NaN sentinel, keeping the engine's attributes on it
    (``lazily``: a ``stand_in`` instead, for a tensor no file will be loaded into)."""
    import torch

    for module in model.modules():
        if _holds(module, param) and param.is_meta:
            if lazily:
                module.weight = stand_in(param)
                continue
            real = torch.nn.Parameter(torch.full(param.shape, float("nan"), dtype=param.dtype),
                                      requires_grad=param.requires_grad)
            real.__dict__.update(param.__dict__)  # weight_loader, input_dim, output_dim (set_weight_attrs)
            module.weight = real


def stand_in(param, value: float = float("nan")):
    """A parameter of PARAM's shape, dtype and engine attributes that reads as the NaN sentinel everywhere, held
    in one element (stride 0): what a vocabulary tensor nothing gives values to (a target given as its config
    alone, a draft built on ``meta``) needs for an engine's wiring to read it (``.cpu()``, ``torch.equal``,
    shapes, an embedding lookup) without a full-size allocation (1 GB per tensor at a Llama-3.1-8B vocabulary).
    It is never written to: a load into it raises, so only tensors no file is loaded into get one. VALUE: another
    constant, where a wiring compares tensors by value and the stand-ins must compare as the real ones do
    (``vllm.wiring``: equal constants for equal file tensors)."""
    import torch

    values = torch.full((), value, dtype=param.dtype).expand(param.shape)
    real = torch.nn.Parameter(values, requires_grad=False)
    real.__dict__.update(param.__dict__)
    return real


def owner_rows(models, param) -> int:
    """Rows that hold vocabulary entries (vocab-parallel weights are padded, e.g. to a multiple of 64)."""
    for model in models:
        for module in model.modules():
            if _holds(module, param):
                return int(getattr(module, "org_vocab_size", param.shape[0]))
    return int(param.shape[0])


def held(name, param, own, names, written, models, from_file: dict | None = None) -> HeldTensor:
    """The record of one vocabulary tensor the draft holds (``own``: the parameter it was built and loaded with;
    ``names``: id -> "target:<param>" of the target's parameters; ``written``: id -> file keys that wrote it;
    ``from_file``: id -> (file, key) for a storage-free parameter the engine's loader wrote whole from that file
    tensor, traced on ``meta``: its values are that tensor's, cast to the parameter's dtype, streamed from the
    file)."""
    from contracts.fingerprint import file_chunks

    dtype = str(param.dtype).removeprefix("torch.")
    values = not param.is_meta
    fp = None
    if from_file and id(param) in from_file:
        path, key = from_file[id(param)]
        rows = min(owner_rows(models, param), param.shape[0])
        step = chunk_rows_for(param.shape)
        return HeldTensor(param=name, shape=list(param.shape), dtype=dtype,
                          same_object_as=None if param is own else names.get(id(param)), replaced=param is not own,
                          unwritten_fraction=0.0, written_by=written.get(id(param), []),
                          fingerprint=fingerprint(file_chunks(path, key, step, rows), dtype, step))
    if values:
        rows = min(owner_rows(models, param), param.shape[0])
        step = chunk_rows_for(param.shape)
        fp = fingerprint(tensor_chunks(param, step, rows), dtype, step)
    same = names.get(id(param))
    return HeldTensor(param=name, shape=list(param.shape), dtype=dtype,
                      same_object_as=None if param is own else same, replaced=param is not own,
                      unwritten_fraction=unwritten_fraction(param) if values else None,
                      written_by=written.get(id(param), []), fingerprint=fp)
