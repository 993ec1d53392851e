"""Which decoder-layer parameters of a draft the engine's own forward reads.

Contract served: ``key-naming`` on drafts with more than one decoder layer. The engines build every layer alike
but read different parts of the layers above 0: vLLM's ``llama_eagle3.LlamaDecoderLayer`` builds ``hidden_norm``
in every layer and reads only ``input_layernorm`` above layer 0, SGLang's reads ``hidden_norm`` there and never
``input_layernorm``. A parameter the forward never reads is harmless when unwritten, and a trained tensor loaded
into one is silently unused. Observed, not ruled: a forward hook on every module of the loaded draft, one
engine forward, and a parameter counts as read when the module that owns it ran.
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


def mark_reads(params, model, forward) -> str | None:
    """Sets ``ParamState.read`` on the decoder-layer parameters from one engine forward; returns why not, if not."""
    ran, why = modules_run(model, forward)
    if ran is None:
        return why
    read = layer_params_read(model, ran)
    for p in params:
        if p.name in read:
            p.read = read[p.name]
    return None
