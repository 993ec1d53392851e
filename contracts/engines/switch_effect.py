"""What flipping one draft-config switch does to the engine's draft step, and from which step on.

Contract served: ``config``. Some switches change the step-0 logits (``norm_before_residual``, ``fc_norm``); others
only change the hidden state the engine feeds into the next draft step (``norm_output``: the normed or the pre-norm
state), so their effect begins at step 1, where a step-0 forward comparison cannot see it. Both outputs are the
engine's own: its logits and the state its draft forward returns for the next step.
"""

from __future__ import annotations


def switch_effect(value: bool, base: tuple, flipped: tuple) -> dict:
    """The record of one flipped switch from the engine's (step-0 outputs, fed-back state) before and after (torch
    tensors or numpy arrays)."""
    at_step_0 = max(float(abs(a - b).max()) for a, b in zip(flipped[0], base[0]))
    fed_back = float(abs(flipped[1] - base[1]).max())
    change = max(at_step_0, fed_back)
    return {"value": value, "honoured": change > 0.0, "max_abs_change_when_flipped": change,
            "first_acts_at_step": 0 if at_step_0 > 0.0 else 1 if fed_back > 0.0 else None,
            "step_0_change": at_step_0, "fed_back_state_change": fed_back}


PROBE_WINDOW = 2  # shorter than a probe's tokens: an engine that applies the draft's window changes its output


def window_effect(window: dict, base: tuple, shrunk: tuple) -> dict:
    """Whether the engine applies the draft's attention window: its outputs with the window shrunk to
    ``PROBE_WINDOW`` against the saved one (longer than the probe's tokens, so the same as full attention)."""
    at_step_0 = max(float(abs(a - b).max()) for a, b in zip(shrunk[0], base[0]))
    change = max(at_step_0, float(abs(shrunk[1] - base[1]).max()))
    return {**window, "applied": change > 0.0, "probe_window": PROBE_WINDOW, "max_abs_change_when_shrunk": change}


def rope_comparison(rotary, expected, theta, scaling) -> dict:
    """The rope the engine applies (ROTARY, its draft's rotary embedding) against EXPECTED, the one the engine's own
    ``get_rope`` builds from the trainer's rope settings (THETA, SCALING): their cos/sin caches compared at the
    precision the engine stores them in (a 16-bit cache rounds to ~4e-3). Prevents a draft served with the llama3
    schedule of a YaRN-trained draft (or the reverse) passing unnoticed."""
    import torch

    applied = {"class": type(rotary).__name__, "base": getattr(rotary, "base", None)}
    trained = {"rope_theta": theta, "rope_scaling": scaling}
    a = rotary.cos_sin_cache
    b = expected.cos_sin_cache.to(a.dtype)
    n = min(a.shape[0], b.shape[0])
    atol = 1e-5 if a.dtype == torch.float32 else 1e-2
    same = a.shape[1:] == b.shape[1:] and bool(torch.allclose(a[:n].float(), b[:n].float(), atol=atol))
    return {"applied": applied, "trained": trained, "trained_class": type(expected).__name__, "same": same}
