"""What flipping one draft-config switch does to the engine's draft step, and from which step on.

Contract served: ``config``. Some switches change the step-0 logits (``norm_before_residual``, ``fc_norm``); others
only change the hidden state the engine feeds into the next draft step (``norm_output``: the normed or the pre-norm
state), so their effect begins at step 1, where a step-0 forward comparison cannot see it. Both outputs are the
engine's own: its logits and the state its draft forward returns for the next step.
"""

from __future__ import annotations


def switch_effect(value: bool, base: tuple, flipped: tuple) -> dict:
    """The record of one flipped switch from the engine's (step-0 outputs, fed-back state) before and after."""
    at_step_0 = max(float((a - b).abs().max()) for a, b in zip(flipped[0], base[0]))
    fed_back = float((flipped[1] - base[1]).abs().max())
    change = max(at_step_0, fed_back)
    return {"value": value, "honoured": change > 0.0, "max_abs_change_when_flipped": change,
            "first_acts_at_step": 0 if at_step_0 > 0.0 else 1 if fed_back > 0.0 else None,
            "step_0_change": at_step_0, "fed_back_state_change": fed_back}
