"""What llama.cpp's converter and loader did with every checkpoint tensor.

Contracts served: ``key-naming``, ``tensor-shapes``, ``d2t-semantics``. llama.cpp loads a draft in two steps, both
its own: the converter maps each checkpoint tensor to a GGUF tensor (or keeps ``d2t`` aside and writes it as absolute
target ids, skips ``t2d``, or raises "Can not map tensor", which stops the conversion), and the GGUF loader
(``llama_model_eagle3::load_arch_tensors``) creates every tensor of the draft it builds, refusing a GGUF that lacks one
or holds one of another shape. So a never-written parameter cannot reach a server; what can is a converter that
drops a tensor without a word (``t2d`` by design) or a loader refusal, reported on the tensor it names.
The token embedding and the head a draft lacks are the target's (``ctx_other``: the decoder graph takes them from
the target model).
"""

from __future__ import annotations

import math
import re

from contracts.checkpoint import Checkpoint
from contracts.engines.llamacpp.pair import LOADER_TENSOR, pair
from contracts.engines.llamacpp.version import engine
from contracts.observations import LoadCall, LoadObservation, ParamState, TensorFate

DRAFT_CLASS = "llama_model_eagle3"  # llama.cpp's model class for the GGUF architecture "eagle3"
SHARED = {"token_embd.weight": "ctx_other (the target's token_embd, the decoder graph's fallback)",
          "output.weight": "ctx_other (the target's output head, the decoder graph's fallback)"}
EXPECTED_SHAPE = re.compile(r"expected\s+([\d,\s]+?),\s*got")
GGUF_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32"}


def row_major(shape) -> list[int]:
    """A GGUF shape (fastest dimension first) in the checkpoint's order."""
    return [int(n) for n in reversed(shape)]


def engine_config(draft: dict) -> dict:
    """The draft config llama.cpp built the draft from: the GGUF's metadata, in the checkpoint's key names."""
    meta = draft.get("metadata", {})
    arch = draft.get("architecture")

    def get(name):
        return meta.get(f"{arch}.{name}")

    d2t = draft.get("d2t")
    return {"architectures": [arch], "num_hidden_layers": get("block_count"), "hidden_size": get("embedding_length"),
            "intermediate_size": get("feed_forward_length"), "num_attention_heads": get("attention.head_count"),
            "num_key_value_heads": get("attention.head_count_kv"), "target_hidden_size": get("target_hidden_size"),
            "target_layers": get("target_layers"), "norm_before_residual": bool(get("norm_before_residual")),
            "norm_before_fc": bool(get("norm_before_fc")), "rope_theta": get("rope.freq_base"),
            "rms_norm_eps": get("attention.layer_norm_rms_epsilon"),
            "vocab_size": get("vocab_size"),
            # llama.cpp's n_draft_vocab: d2t's length, else the target's vocabulary (eagle3.cpp: load_arch_tensors)
            "draft_vocab_size": len(d2t) if d2t is not None else get("vocab_size")}


def observe_load(engine_dir, target_dir=None, runner=None) -> LoadObservation:
    made = pair(engine_dir, target_dir)
    ckpt = Checkpoint.open(engine_dir)
    refused_at = made.draft.get("refused_at")
    blamed = _loader_blame(made)
    named = LOADER_TENSOR.search(made.loader_error or "")
    if (made.converter_refusal and not refused_at) or (made.loader_error and not named):
        made.require_graph()  # refused, but at no tensor: the config's finding
    draft = made.draft
    gguf = draft.get("tensors_gguf") or {}
    tensors = []
    for key, info in ckpt.tensors.items():
        names = made.gguf_name_of(key)
        if not names and key.endswith("d2t") and draft.get("d2t") is not None:
            names = ["d2t"]  # kept aside by modify_tensors, written by prepare_tensors as int64 absolute ids
        calls = [LoadCall(param=n, error=blamed.get(n),
                          written=None if blamed.get(n) or n not in gguf else math.prod(gguf[n]["shape"]))
                 for n in names]
        if key == refused_at:  # the tensor the converter raised on (nothing was built: tensor-shapes is not judged)
            calls.append(LoadCall(param="(no GGUF tensor)", error=made.converter_refusal))
        tensors.append(TensorFate(key=key, shape=list(info.shape), dtype=info.dtype, calls=calls,
                                  side_channel="hot_token_id" if names == ["d2t"] else None))
    params = [ParamState(name=n, shape=_expected(blamed.get(n)) or row_major(t["shape"]),
                         dtype=GGUF_DTYPES.get(t["type"], t["type"].lower()), unwritten_fraction=0.0)
              for n, t in gguf.items()]
    if draft["converted"]:
        params += [ParamState(name=n, shape=[], dtype="float32", unwritten_fraction=1.0, shared_from_target=why)
                   for n, why in SHARED.items() if n not in gguf]
    obs = LoadObservation(engine=engine(), draft_class=_draft_class(draft), model_dtype="float32", tensors=tensors,
                          params=params, config=engine_config(draft) if draft["converted"] else {},
                          is_eagle3_draft=draft.get("architecture") == "eagle3" if draft["converted"] else None)
    if made.converter_refusal:  # the conversion stopped at a tensor: no GGUF, nothing built
        obs.load_error = f"llama.cpp's converter raised on {refused_at}: {made.converter_refusal}"
    elif made.loader_error and not blamed:  # e.g. "missing tensor 'blk.0.ffn_norm.weight'": a tensor it builds
        obs.load_error = f"llama.cpp's loader refused the converted draft: {made.loader_error}"
    if made.scale is not None:
        obs.observed_on = f"llama.cpp was given {made.scale.describe()} (a real-size pair)"
    if draft.get("d2t") is not None:
        obs.hot_token_id = [int(x) for x in draft["d2t"]]
        obs.hot_token_id_dtype = "int64"
    return obs


def _draft_class(draft: dict) -> str:
    """The model class llama.cpp builds (or, when the conversion stopped, the one its converter had chosen: its
    EAGLE-3 decisions are logged only once it detects an EAGLE-3 draft)."""
    if draft["converted"]:
        return DRAFT_CLASS if draft.get("architecture") == "eagle3" else f"llama.cpp {draft.get('architecture')} model"
    return DRAFT_CLASS if draft.get("decisions") else "the converter's plain-model class (no EAGLE-3 draft detected)"


def _expected(loader_error: str | None) -> list[int] | None:
    """The shape llama.cpp's loader expected, from its own words ("has wrong shape; expected 128, 64, got ..."), in
    the checkpoint's order."""
    found = EXPECTED_SHAPE.search(loader_error or "")
    return row_major([int(n) for n in found.group(1).replace(" ", "").split(",") if n]) if found else None


def _loader_blame(made) -> dict:
    """GGUF tensor -> the loader's error, when llama.cpp's loader refused the pair naming a tensor of the draft."""
    if not made.loader_error:
        return {}
    found = LOADER_TENSOR.search(made.loader_error)
    if not found or found.group(1) not in (made.draft.get("tensors_gguf") or {}):
        return {}
    return {found.group(1): made.loader_error}
