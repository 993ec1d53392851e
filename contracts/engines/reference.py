"""A trainer's reference forward (``fixtures/references/*.safetensors``: token ids, aux hidden states, the
trainer's own step-0 logits and, where it ran more, its later TTT steps) and the tolerance a replay through an
engine is held to (``forward-parity``).
Engine-neutral: every adapter replays the same file and is judged by the same rule."""

from __future__ import annotations

COMPUTE_DTYPE = "float32"


def read_reference(path) -> tuple[dict, dict]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})


def reference_chain(tensors: dict) -> list | None:
    """The trainer's later draft steps from a multi-step reference: [step k - 1][anchor][draft vocab] for
    k = 1..K-1 over the anchors 0..T-1-k (the rows with a ground-truth token); None for a step-0-only reference."""
    steps = tensors.get("step_logits")
    if steps is None or steps.shape[0] < 2:
        return None
    t = steps.shape[1]
    return [steps[k, :t - k].float().tolist() for k in range(1, steps.shape[0])]


def tolerance(ref_logits, served_embed_dtype: str | None, trained_embed_dtype: str | None):
    """float32 on both sides: accumulation order only (1e-4 of the logit scale). When the trainer embedded
    with a 16-bit copy of the embedding the engine serves in float32, add that copy's rounding (2^-8)."""
    scale = max(1.0, float(ref_logits.abs().max()))
    tol, why = 1e-4 * scale, "both sides compute in float32 from the same saved weights: accumulation order only"
    if trained_embed_dtype in ("bfloat16", "float16") and served_embed_dtype == "float32":
        tol = 2.0 ** -8 * scale
        why = (f"the trainer embedded with the checkpoint's {trained_embed_dtype} copy of the embedding, the engine "
               f"serves the target's float32 one: one 16-bit rounding (2^-8 of the logit scale)")
    return tol, why
