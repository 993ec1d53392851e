"""Which embedding and head llama.cpp's EAGLE-3 draft computes with, and their values.

Contract served: ``embed-head``. llama.cpp wires nothing after loading: its decoder graph
(``llama_model_eagle3::graph<false>``) takes the draft's own ``token_embd`` / ``output`` when the GGUF has them, else
the target model's through the draft context's ``ctx_other`` (the speculative setup sets it to the target's
context). Which of the two the draft has is the converter's decision (``embed_tokens.weight`` / ``lm_head.weight``
mapped, or absent). The values held are the GGUFs' (the converter's f32), fingerprinted the way every adapter
fingerprints what its draft holds; ``d2t`` sizes the head (llama.cpp's loader creates ``output`` with as many rows
as ``d2t`` has entries, the target's vocabulary without one).
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts.checkpoint import Checkpoint, text_config
from contracts.engines.llamacpp.loader import GGUF_DTYPES, row_major
from contracts.engines.llamacpp.pair import pair
from contracts.engines.llamacpp.version import engine
from contracts.fingerprint import chunk_rows_for, file_fingerprint, fingerprint
from contracts.observations_wiring import HeldTensor, WiringObservation

WIRING = "llama_model_eagle3 decoder graph: its own tok_embd / output, else ctx_other's (the target's)"
ROLES = {"embed": "token_embd.weight", "head": "output.weight"}


def _rows(gguf_path: Path, name: str):
    """A GGUF tensor as (its row-major shape, its type, a function giving rows [a, b) as a float32 numpy array), read
    from the file's memory map at the offset the GGUF gives it: a Llama-3.1-8B-sized embedding is never whole in
    memory, and this worker never imports torch for it."""
    import numpy as np

    from contracts.engines.llamacpp.converter import read_gguf

    written = read_gguf(gguf_path)
    if name not in written["tensors"]:
        return None, None, None
    shape, kind = row_major(written["tensors"][name]["shape"]), written["tensors"][name]["type"]
    stored = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}[kind]  # gguf-py hands bfloat16 over as bytes
    data = np.memmap(gguf_path, dtype=stored, mode="r", offset=written["data_offsets"][name], shape=tuple(shape))

    def rows(a: int, b: int):
        part = data[a:b]
        if kind == "BF16":
            part = (part.astype(np.uint32) << 16).view(np.float32)
        return np.array(part, dtype=np.float32)  # a copy: the map is read-only

    return shape, kind, rows


def _held(role: str, made, own: bool) -> HeldTensor:
    name = ROLES[role]
    source = made.draft if own else made.target
    shape, kind, rows = _rows(Path(source["gguf"]), name)
    if shape is None:
        return HeldTensor(param=name, shape=[], dtype="float32", same_object_as=None, replaced=False,
                          unwritten_fraction=1.0)
    written_by = [k for k, names in source.get("tensors", {}).items() if name in names]
    dtype = GGUF_DTYPES.get(kind, "float32")
    if made.scale is not None and written_by:  # a scaled copy's GGUF: the values are the real tensor's, verbatim
        real = Checkpoint.open(made.draft_dir) if own else Checkpoint.open_target(made.target_dir, require_weights=True)
        info = real.tensors[written_by[0]]
        shape = list(info.shape)
        step = chunk_rows_for(shape)
        held = file_fingerprint(real.path / info.file, written_by[0], {"dtype": dtype, "rows": None, "chunk_rows": step})
    else:
        step = chunk_rows_for(shape)
        held = fingerprint((rows(a, min(a + step, shape[0])) for a in range(0, shape[0], step)), dtype, step)
    return HeldTensor(param=name, shape=shape, dtype=dtype,
                      same_object_as=None if own else f"target:{written_by[0] if written_by else name}",
                      replaced=not own, unwritten_fraction=0.0, written_by=written_by, fingerprint=held)


def observe_embed_head(engine_dir, target_dir, runner=None) -> WiringObservation:
    made = pair(engine_dir, target_dir)
    made.require_graph()
    gguf = made.draft["tensors_gguf"]
    own_embed, own_head = ROLES["embed"] in gguf, ROLES["head"] in gguf
    target = text_config(json.loads((Path(target_dir) / "config.json").read_text()))
    meta, d2t = made.draft.get("metadata", {}), made.draft.get("d2t")
    hidden = meta.get("eagle3.embedding_length")
    target_hidden = meta.get("eagle3.target_hidden_size")
    draft_config = json.loads((Path(engine_dir) / "config.json").read_text())
    calls = [] if own_embed and own_head else ["ctx_other"]
    return WiringObservation(
        engine=engine(), wiring=WIRING, calls=calls, load_lm_head_from_target=not own_head, tied=False,
        draft={"hidden_size": hidden, "target_hidden_size": target_hidden,
               "has_target_hidden_size": "target_hidden_size" in text_config(draft_config),
               "vocab_size": target.get("vocab_size"),
               # what the draft declares (llama.cpp has no such setting: its head has d2t's length of rows, else the
               # target vocabulary's)
               "draft_vocab_size": text_config(draft_config).get("draft_vocab_size") or
               (len(d2t) if d2t is not None else None)},
        target={"class": "llama.cpp target model", "dtype": "float32", "hidden_size": target.get("hidden_size"),
                "vocab_size": target.get("vocab_size"), "tie_word_embeddings": target.get("tie_word_embeddings"),
                "has_weights": True, "loaded": {}},
        embed=_held("embed", made, own_embed), head=_held("head", made, own_head),
        hot_token_id_len=len(d2t) if d2t is not None else None)
