"""The draft IR run the way GenAI runs it, on a CPU: the exporter's IR with the target's embedding in place of its own
where GenAI's ``share_vocabulary`` puts it there, the draft's ``fc`` moved out of it (``move_fc_from_draft_to_main``:
the target computes it on its concatenated states and the draft reads H-wide states, its own pre-norm state from step
1 on), and that pre-norm state (the output of its ``midlayer``, which GenAI adds as an output with
``transform_hidden_state(draft, {-1})``) read beside its logits. OpenVINO's own runtime computes every value; the graph
edits are the ones GenAI makes, found the way GenAI finds them."""

from __future__ import annotations

from pathlib import Path

EMBED = "self.model.embed_tokens.weight"
D2T = "self.model.d2t"
# the residual add closing the draft's layer: GenAI's tap for the state it feeds the next step
PRENORM = "__module.model.midlayer/aten::add/Add_1"
HALF = ("f16", "bf16", "u8", "u4", "i8")  # KV cache element types that round K and V below float32


class DraftIR:
    def __init__(self, ir: Path, target_embedding=None, fc_moved: bool = False):
        import openvino as ov

        self._core = ov.Core()
        model = self._core.read_model(str(ir / "openvino_model.xml"))
        ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
        if target_embedding is not None and EMBED in ops:
            shared = ov.op.Constant(target_embedding.astype("float32"))
            for consumer in list(ops[EMBED].output(0).get_target_inputs()):
                consumer.replace_source_output(shared.output(0))
        self._fc = _move_fc(model) if fc_moved else None
        outputs = [model.output("logits")]
        if PRENORM in ops:
            model.add_outputs([ops[PRENORM].output(0)])
            outputs.append(model.outputs[-1])
        # float32 compute; the KV cache at the plugin's own default precision, as GenAI's pipeline keeps it
        self.compiled = self._core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        self.request = self.compiled.create_infer_request()
        self.has_prenorm = len(outputs) == 2

    @property
    def kv_cache_precision(self) -> str:
        return str(self.compiled.get_property("KV_CACHE_PRECISION").to_string())

    @property
    def half_kv_cache(self) -> bool:
        return self.kv_cache_precision in HALF

    def project(self, hidden):
        """The target's concatenated states [T, 3H] through the draft's ``fc``, as the MatMul GenAI moves into the
        target computes them (OpenVINO's runtime, float32): the H-wide state the draft reads at step 0."""
        import numpy as np
        import openvino as ov

        if self._fc is None:
            raise ValueError("the draft's fc was not moved out of this IR")
        x = ov.op.Parameter(ov.Type.f32, ov.PartialShape([-1, -1, -1]))
        mm = ov.opset13.matmul(x, self._fc, False, True)
        fc = self._core.compile_model(ov.Model([mm], [x]), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        h = np.asarray(hidden, dtype=np.float32)
        return fc(h.reshape(1, *h.shape))[0][0]

    def step(self, ids, hidden, start: int = 0):
        """Logits [T, draft vocab] and the pre-norm state [T, H] for tokens IDS at positions START.. with HIDDEN
        (the target's concatenated states [T, 3H], or, with the fc moved, H-wide states), over the KV cache the
        earlier calls since ``reset`` wrote."""
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


def _move_fc(model):
    """GenAI's ``move_fc_from_draft_to_main`` on the draft's side: the first MatMul reading the ``hidden_states``
    parameter is cut out (its readers read the parameter) and its weight returned."""
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul":
            continue
        src = op.input_value(0).get_node()
        if src.get_type_name() != "Parameter" or "hidden_states" not in src.get_friendly_name():
            continue
        for target in list(op.output(0).get_target_inputs()):
            target.replace_source_output(op.input_value(0))
        model.validate_nodes_and_infer_types()
        return op.input_value(1)
    raise ValueError("no fc MatMul on the draft's hidden_states (GenAI: 'Failed to locate FC weights in eagle3 draft "
                     "model for shifting to main model.')")
