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


def tolerance(ref_logits, served_embed_dtype: str | None, trained_embed_dtype: str | None,
              half_attention: bool = False):
    """float32 on both sides: accumulation order only (1e-4 of the logit scale). When the trainer embedded
    with a 16-bit copy of the embedding the engine serves in float32, or when the engine's default attention keeps
    K and V in float16 (llama.cpp's KV cache), add one 16-bit rounding (2^-8)."""
    scale = max(1.0, float(ref_logits.abs().max()))
    tol, why = 1e-4 * scale, "both sides compute in float32 from the same saved weights: accumulation order only"
    if trained_embed_dtype in ("bfloat16", "float16") and served_embed_dtype == "float32":
        tol = 2.0 ** -8 * scale
        why = (f"the trainer embedded with the checkpoint's {trained_embed_dtype} copy of the embedding, the engine "
               f"serves the target's float32 one: one 16-bit rounding (2^-8 of the logit scale)")
    elif half_attention:
        tol = 2.0 ** -8 * scale
        why = ("the engine's default attention keeps K and V in float16 (its KV cache, as a server runs it): one "
               "16-bit rounding (2^-8 of the logit scale)")
    return tol, why


def chain_steps(reset, decode, ids, g, prenorm0, steps: int) -> list:
    """[step k - 1][anchor] -> the engine's logits row of step k of the chain anchored there, as a draft loop steps
    it: step 0's KV for positions 0..anchor (``decode(0, ids, g)`` on the states the target handed over), then one
    token per step at the next position fed the pre-norm state of the step before (PRENORM0: step 0's, per position),
    ground-truth tokens in place of sampled ones. RESET clears the engine's KV cache; DECODE(position, ids, states)
    returns (logits rows, pre-norm rows)."""
    t = len(ids)
    later: list[list] = [[] for _ in range(steps - 1)]
    for anchor in range(t):
        n = min(steps, t - anchor)
        if n < 2:
            continue
        reset()
        decode(0, ids[:anchor + 1], g[:anchor + 1])
        fed = prenorm0[anchor:anchor + 1]
        for k in range(1, n):
            row, fed = decode(anchor + k, ids[anchor + k:anchor + k + 1], fed)
            later[k - 1].append(row[0])
    return later


class Replay:
    """The part of a forward-parity replay every engine shares: the reference read, the checkpoint opened, the
    observation begun with the trainer's logits and its map (``d2t`` as the trainers define it: target id = draft id
    + d2t[draft id]); an adapter wires the draft its engine's way, runs it, and hands its logits to ``compare``."""

    def __init__(self, engine: dict, engine_dir, reference_path):
        import torch

        from contracts.checkpoint import Checkpoint
        from contracts.observations import ForwardObservation

        self.tensors, meta = read_reference(reference_path)
        self.ids = self.tensors["input_ids"]
        self.hidden = self.tensors["hidden_states"].float()
        self.ref_logits = self.tensors["logits"].float()
        self.chain = reference_chain(self.tensors)
        self.ckpt = Checkpoint.open(engine_dir)
        self.draft_vocab = self.ref_logits.shape[-1]
        self.obs = ForwardObservation(engine=engine, trainer=meta.get("trainer"), compute_dtype=COMPUTE_DTYPE,
                                      reference_logits=self.ref_logits.tolist())
        d2t_key = next((k for k in self.ckpt.tensors if "d2t" in k), None)
        d2t = self.ckpt.load_tensor(d2t_key).long() if d2t_key else torch.zeros(self.draft_vocab, dtype=torch.long)
        self.obs.reference_map = (d2t + torch.arange(d2t.shape[0])).tolist()

    def compare(self, engine_logits, served_embed_dtype: str, half_attention: bool = False):
        """The engine's draft-vocab logits against the trainer's, within ``tolerance``: the finished observation."""
        import torch

        obs, ref = self.obs, self.ref_logits
        if engine_logits.shape != ref.shape:
            obs.error = (f"the engine's draft logits have shape {list(engine_logits.shape)}, the trainer's "
                         f"{list(ref.shape)}")
            return obs
        diff = (engine_logits - ref).abs()
        obs.max_abs_diff = float(diff.max()) if torch.isfinite(diff).all() else float("inf")
        embed = self.ckpt.tensors.get("embed_tokens.weight") or self.ckpt.tensors.get("model.embed_tokens.weight")
        obs.tolerance, obs.tolerance_why = tolerance(ref, served_embed_dtype, embed.dtype if embed is not None else None,
                                                     half_attention)
        return obs
