"""The draft IR run the way GenAI runs it, on a CPU in float32: the exporter's IR with the target's embedding in
place of its own where GenAI's ``share_vocabulary`` puts it there, and the draft's pre-norm state (the output of its
``midlayer``, which GenAI adds as an output with ``transform_hidden_state(draft, {-1})`` and feeds the next step) read
beside its logits. OpenVINO's own runtime computes every value; the graph edits are the two GenAI makes."""

from __future__ import annotations

from pathlib import Path

EMBED = "self.model.embed_tokens.weight"
# the residual add closing the draft's layer: GenAI's tap for the state it feeds the next step
PRENORM = "__module.model.midlayer/aten::add/Add_1"


class DraftIR:
    def __init__(self, ir: Path, target_embedding=None):
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(ir / "openvino_model.xml"))
        ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
        if target_embedding is not None and EMBED in ops:
            shared = ov.op.Constant(target_embedding.astype("float32"))
            for consumer in list(ops[EMBED].output(0).get_target_inputs()):
                consumer.replace_source_output(shared.output(0))
        outputs = [model.output("logits")]
        if PRENORM in ops:
            model.add_outputs([ops[PRENORM].output(0)])
            outputs.append(model.outputs[-1])
        self.compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        self.request = self.compiled.create_infer_request()
        self.has_prenorm = len(outputs) == 2

    def step(self, ids, hidden, start: int = 0):
        """Logits [T, draft vocab] and the pre-norm state [T, H] for tokens IDS at positions START.. with the
        target's concatenated states HIDDEN [T, 3H] (or the previous step's pre-norm state, [T, H]), over the KV
        cache the earlier calls since ``reset`` wrote."""
        import numpy as np

        t = len(ids)
        feed = {"input_ids": np.asarray(ids, dtype=np.int64).reshape(1, t),
                "hidden_states": np.asarray(hidden, dtype=np.float32).reshape(1, t, -1),
                "attention_mask": np.ones((1, start + t), dtype=np.int64),
                "position_ids": np.arange(start, start + t, dtype=np.int64).reshape(1, t),
                "beam_idx": np.zeros(1, dtype=np.int32)}
        out = self.request.infer(feed)
        logits = out[self.compiled.output("logits")][0]
        prenorm = out[self.compiled.outputs[-1]][0] if self.has_prenorm else None
        return logits, prenorm

    def reset(self):
        self.request.reset_state()
