"""A trainer's reference forward (``fixtures/references/*.safetensors``: token ids, aux hidden states and the
trainer's own step-0 logits) and the tolerance a replay through an engine is held to (``forward-parity``).
Engine-neutral: every adapter replays the same file and is judged by the same rule."""

from __future__ import annotations

COMPUTE_DTYPE = "float32"


def read_reference(path) -> tuple[dict, dict]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})


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
