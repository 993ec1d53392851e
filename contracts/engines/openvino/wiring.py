"""Which embedding and head OpenVINO GenAI's draft computes with, and their values.

Contract served: ``embed-head``. The draft IR holds the exporter's module: its own ``embed_tokens`` (random where the
checkpoint has none: the load report's MISSING) and ``lm_head``. When GenAI builds the pair, ``share_vocabulary``
(``eagle3_model_transforms.cpp``) rewires the draft's embedding Gather to a copy of the target's whenever it finds
both embeddings (by size or by name), whatever the draft holds, and logs "Copying embedding weights from main to draft
model" (2026.0.0.0: "Sharing embedding weights between main and draft models"); where it finds none it leaves
the draft's own. Which one happened is read from that log of a pair built here;
the values are the IRs' constants (the exporter's float32), fingerprinted the way every adapter fingerprints them.
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts.checkpoint import text_config
from contracts.engines.openvino.aux_capture import default_layers
from contracts.engines.openvino.export import export_target, full_size, ir_constants
from contracts.engines.openvino.ir_run import D2T, EMBED
from contracts.engines.openvino.pipeline import build, served_layers, trained_ids
from contracts.engines.openvino.version import engine
from contracts.fingerprint import chunk_rows_for, fingerprint
from contracts.observations_wiring import HeldTensor, WiringObservation

WIRING = "LLMPipeline (continuous batching, Eagle3DecodingImpl): share_vocabulary copies the target's embedding"
HEAD = "self.model.lm_head.weight"


def _held(param: str, values, written: bool, same_as: str | None) -> HeldTensor:
    import torch

    if values is None:
        return HeldTensor(param=param, shape=[], dtype="float32", same_object_as=None, replaced=False,
                          unwritten_fraction=1.0)
    shape = list(values.shape)
    step = chunk_rows_for(shape)
    data = torch.from_numpy(values.astype("float32"))
    chunks = (data[a:a + step] for a in range(0, shape[0], step))
    return HeldTensor(param=param.removeprefix("self."), shape=shape, dtype="float32", same_object_as=same_as,
                      replaced=same_as is not None, unwritten_fraction=0.0 if written else 1.0,
                      written_by=[same_as.removeprefix("target:")] if same_as else
                      [param.removeprefix("self.model.")] if written else [],
                      fingerprint=fingerprint(chunks, "float32", step))


def observe_embed_head(engine_dir, target_dir, runner=None) -> WiringObservation:
    target_ir = export_target(target_dir)  # (the target's refusal first: it costs nothing of the draft)
    made = full_size(engine_dir)
    target = text_config(json.loads((Path(target_dir) / "config.json").read_text()))
    pair = build(target_ir, made.ir, served_layers(engine_dir, made.ir))
    if pair.pipeline is None:  # refused for want of layer ids: the embedding does not depend on them
        ids = trained_ids(engine_dir, target_dir)[0] or default_layers(int(target["num_hidden_layers"]))
        pair = build(target_ir, made.ir, ids)
    copied, error = pair.embedding_copied, pair.refusal
    del pair
    draft, served_target = ir_constants(made.ir), ir_constants(target_ir)
    embed = _held(EMBED, served_target.get(EMBED), True, "target:model.embed_tokens.weight") if copied else \
        _held(EMBED, draft.get(EMBED), "model.embed_tokens.weight" not in made.missing, None)
    head = _held(HEAD, draft.get(HEAD), "model.lm_head.weight" not in made.missing, None)
    config = made.config
    d2t = draft.get(D2T)
    return WiringObservation(
        engine=engine(), wiring=WIRING, calls=["share_vocabulary"] if copied else [], load_lm_head_from_target=False,
        tied=False, error=error,
        draft={"hidden_size": config.get("hidden_size"), "target_hidden_size": config.get("target_hidden_size"),
               "has_target_hidden_size": "target_hidden_size" in json.loads(
                   (Path(engine_dir) / "config.json").read_text()),
               "vocab_size": config.get("vocab_size"), "draft_vocab_size": config.get("draft_vocab_size")},
        target={"class": "OpenVINO GenAI target IR", "dtype": "float32", "hidden_size": target.get("hidden_size"),
                "vocab_size": target.get("vocab_size"), "tie_word_embeddings": target.get("tie_word_embeddings"),
                "has_weights": any(Path(target_dir).glob("*.safetensors")), "loaded": {}},
        embed=embed, head=head, hot_token_id_len=None if d2t is None else int(d2t.size))
