"""``tensor-shapes``: every consumed tensor fits its engine parameter's shape, and the tensors' dtypes agree
with the draft config (the draft's serving dtype against the target's is judged by ``config``).

Prevents a draft that cannot load or loads wrongly: an ``fc`` trained on two aux layers (width 2H) where
the engine builds 3H raises deep inside the server's weight loading; an integer tensor cast into float
weights loads without a word; a checkpoint whose weights are not in the dtype its config declares was
changed on conversion (speculators' converter writes fp32 from bf16 input). Shape verdicts are the
engine's own: its weight loaders' assertions, caught and recorded by the adapter.
"""

from __future__ import annotations

from contracts.checks.evidence import nothing_built
from contracts.registry import FAIL, PASS, WARN, Result, SubjectView, contract

FLOAT_DTYPES = {"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}


def _declared_dtype(config: dict | None) -> str | None:
    if not config:
        return None
    value = config.get("dtype") or config.get("torch_dtype")
    if value is None and isinstance(config.get("transformer_layer_config"), dict):
        layer = config["transformer_layer_config"]
        value = layer.get("dtype") or layer.get("torch_dtype")
    if value is None and isinstance(config.get("text_config"), dict):
        value = config["text_config"].get("dtype") or config["text_config"].get("torch_dtype")
    return str(value).removeprefix("torch.") if value else None


def _shape_fix(fate, call, param, obs) -> str:
    if param.name.endswith("fc.weight") and len(fate.shape) == 2 and len(param.shape) == 2 \
            and fate.shape[0] == param.shape[0]:
        cfg = obs.config
        h_in = cfg.get("target_hidden_size") or cfg.get("hidden_size")
        want, have = param.shape[1], fate.shape[1]
        if h_in and have % h_in == 0:
            return (f"fc takes {want // h_in} × {h_in} = {want} inputs in the engine but the checkpoint's fc was "
                    f"trained on {have // h_in} aux layer(s) ({have} = {have // h_in} × {h_in}): list exactly "
                    f"{have // h_in} ids in eagle_config.eagle_aux_hidden_state_layer_ids, or retrain with "
                    f"{want // h_in} aux layers")
        return (f"fc takes {want} inputs in the engine but {have} in the checkpoint: set target_hidden_size "
                f"to the target's hidden size and list the aux layer ids the draft was trained on")
    where = f"shard {call.shard} of {param.name} {param.shape}" if call.shard is not None else f"{param.name} {param.shape}"
    return (f"`{fate.key}` has shape {fate.shape} and does not fit {where}: the config's sizes (hidden_size, "
            f"intermediate_size, heads, head_dim, vocab sizes) must describe the saved tensors")


@contract("tensor-shapes", "every consumed tensor fits its parameter's shape; tensor dtypes agree with the "
                           "draft config")
def check_tensor_shapes(subject: SubjectView) -> Result:
    obs = subject.load
    stopped = nothing_built("tensor-shapes", obs)
    if stopped:
        return stopped
    params = {p.name: p for p in obs.params}
    mismatches, fixes, casts = [], [], []
    for fate in obs.tensors:
        for call in fate.calls:
            param = params.get(call.param)
            if call.error:
                mismatches.append({"tensor": fate.key, "checkpoint_shape": fate.shape, "param": call.param,
                                   "param_shape": param.shape if param else None, "shard": call.shard,
                                   "engine_error": call.error})
                if param:
                    fixes.append(_shape_fix(fate, call, param, obs))
            elif call.written is not None and call.written != fate.numel:
                verb = "padded" if call.written > fate.numel else "truncated"
                mismatches.append({"tensor": fate.key, "checkpoint_shape": fate.shape, "param": call.param,
                                   "param_shape": param.shape if param else None, "shard": call.shard,
                                   "engine_error": None,
                                   "silently": f"{verb}: {fate.numel} values in the checkpoint, {call.written} "
                                               f"written by the engine"})
                if param:
                    fixes.append(_shape_fix(fate, call, param, obs))
            elif param and param.dtype in FLOAT_DTYPES and fate.dtype not in FLOAT_DTYPES:
                casts.append({"tensor": fate.key, "dtype": fate.dtype, "param": call.param, "param_dtype": param.dtype})

    weight_dtypes = sorted({t.dtype for t in obs.tensors if t.reached and t.dtype in FLOAT_DTYPES})
    declared = _declared_dtype(subject.checkpoint.config)
    evidence = {"shape_errors": mismatches, "integer_into_float": casts, "weight_dtypes": weight_dtypes,
                "config_dtype": declared, "engine_model_dtype": obs.model_dtype}
    if obs.observed_on:
        evidence["observed_on"] = obs.observed_on

    warnings = []
    if declared and weight_dtypes and weight_dtypes != [declared]:
        warnings.append(f"weights are {'/'.join(weight_dtypes)} but config.json declares {declared} "
                        f"(the engine casts them to {obs.model_dtype})")

    if mismatches or casts:
        problems = []
        if mismatches:
            problems.append(f"{len(mismatches)} tensor(s) do not fit their engine parameter: " + ", ".join(
                f"`{m['tensor']}` {m['checkpoint_shape']} → {m['param']} {m['param_shape']}"
                + (f" shard {m['shard']}" if m["shard"] is not None else "")
                + (f" (silently {m['silently']})" if m.get("silently") else "") for m in mismatches))
        if casts:
            problems.append(f"{len(casts)} integer/bool tensor(s) cast into float weights: " + ", ".join(
                f"`{c['tensor']}` ({c['dtype']}) → {c['param']}" for c in casts))
            fixes.append("save weights as floating-point tensors in the dtype config.json declares")
        return Result("tensor-shapes", FAIL, "; ".join(problems + warnings), evidence, "; ".join(fixes))
    if warnings:
        return Result("tensor-shapes", WARN, "; ".join(warnings), evidence,
                      "declare in config.json the dtype the draft was trained and saved in")
    consumed = sum(1 for t in obs.tensors if t.reached)
    return Result("tensor-shapes", PASS, f"all {consumed} consumed tensors fit their parameters; weights "
                  f"{'/'.join(weight_dtypes) or '-'}, engine dtype {obs.model_dtype}", evidence)
