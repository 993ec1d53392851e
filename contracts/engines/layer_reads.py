"""Which decoder-layer parameters of a draft the engine's own forward reads.

Contract served: ``key-naming`` on drafts with more than one decoder layer. The engines build every layer alike
but read different parts of the layers above 0: vLLM's ``llama_eagle3.LlamaDecoderLayer`` builds ``hidden_norm``
in every layer and reads only ``input_layernorm`` above layer 0, SGLang's reads ``hidden_norm`` there and never
``input_layernorm``. A parameter the forward never reads is harmless when unwritten, and a trained tensor loaded
into one is silently unused. Observed, not ruled: a forward hook on every module of the loaded draft, one
engine forward, and a parameter counts as read when the module that owns it ran; one that did not is confirmed by
value (set to NaN, the forward's outputs stay finite).
"""

from __future__ import annotations

from contracts.renames import layer_index


def modules_run(model, forward) -> tuple[set[str] | None, str | None]:
    """Names of the modules whose forward ran during ``forward()``; (None, why) when it could not run."""
    ran: set[str] = set()
    hooks = [m.register_forward_hook(lambda mod, i, o, _n=name: ran.add(_n)) for name, m in model.named_modules()]
    try:
        forward()
    except Exception as e:  # noqa: BLE001  (no reading observed: the verdicts stay on writes alone)
        return None, f"{type(e).__name__}: {str(e)[:200]}"
    finally:
        for h in hooks:
            h.remove()
    return ran, None


def layer_params_read(model, ran: set[str]) -> dict[str, bool]:
    """For each parameter inside a decoder layer: did the module owning it run?"""
    out = {}
    for module_name, module in model.named_modules():
        for pname, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{pname}" if module_name else pname
            if layer_index(full) is not None:
                out[full] = module_name in ran
    return out


def _outputs(out) -> list:
    """The tensors of a forward's result (a tensor, a tuple of them, or an engine output object)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _outputs(o)]
    return [t for t in vars(out).values() if isinstance(t, torch.Tensor)] if hasattr(out, "__dict__") else []


def confirm_unread(model, unread: set[str], forward) -> str | None:
    """A module that never ran is no proof its parameters were never read (an engine may read a weight straight
    from a fused function). Confirmed by value: those parameters set to NaN, every other unwritten one to seeded
    finite values, one more forward: its outputs stay finite only if none of them was read. Returns why not."""
    import torch

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.is_floating_point():
                continue
            if name in unread:
                p.fill_(float("nan"))
            else:
                nan = torch.isnan(p)
                if nan.any():
                    p[nan] = (torch.randn(p.shape, generator=gen) * 0.02).to(p.dtype)[nan]
        try:
            outputs = _outputs(forward())
        except Exception as e:  # noqa: BLE001
            return f"the confirming forward raised {type(e).__name__}: {str(e)[:200]}"
    if not outputs or not all(bool(torch.isfinite(t).all()) for t in outputs if t.is_floating_point()):
        return "a parameter whose module never ran still reached the forward's output: reads not observed"
    return None


def mark_reads(params, model, forward) -> str | None:
    """Sets ``ParamState.read`` on the decoder-layer parameters from one engine forward, the unread ones confirmed
    by value (``confirm_unread``); returns why not, if not. Changes the model's values (call it last)."""
    ran, why = modules_run(model, forward)
    if ran is None:
        return why
    read = layer_params_read(model, ran)
    unread = {name for name, was_read in read.items() if not was_read}
    if unread:
        why = confirm_unread(model, unread, forward)
        if why:
            return why
    for p in params:
        if p.name in read:
            p.read = read[p.name]
    return None
