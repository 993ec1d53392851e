"""``key-naming``: every checkpoint tensor reaches an engine parameter (or a side channel such as
``d2t`` → ``hot_token_id``), and every engine parameter is written by the checkpoint or by the engine's
documented sharing with the target.

Prevents the silent drop: SGLang's EAGLE-3 ``load_weights`` skips names it cannot match without a word
(0.5.3 dropped all ``layers.0.*`` tensors of speculators drafts; stray ``layers.1.*`` or
``model.decoder.fc.weight`` vanish the same way), vLLM's drops ``fc.bias`` and ``q_proj.bias`` and never notices
a missing tensor, and the unwritten parameters serve random values. This is the invariant vLLM's default loader
enforces ("Following weights were not initialized from checkpoint"), checked from the outside because neither
engine enforces it for EAGLE-3 drafts (both return None from ``load_weights``). A load the engine aborts (vLLM
raises on a stray ``layers.1.*`` after a partial load) is a failure naming the key it raised on.
"""

from __future__ import annotations

import json

from contracts.checks.evidence import collapse_layers, engine_label
from contracts.config_facts import served_without_aux, trained_without_aux
from contracts.registry import FAIL, PASS, WARN, Result, SubjectView, contract

# Tensors the engine skips on purpose. t2d is the target->draft mask; SGLang and vLLM derive the map from d2t
# alone (``continue`` on any name containing "t2d"); d2t-semantics checks that the two agree.
IGNORED_BY_DESIGN = {"t2d": "target->draft mask; the engine maps draft ids with d2t alone"}


def _fix_for_dropped(key: str, probes, present: set[str], num_layers) -> str:
    renames = [p for p in probes if p.key == key and p.candidate]
    switches = [p for p in probes if p.key == key and p.config_change]
    fixes = []
    for p in renames:
        if p.candidate in present:
            fixes.append(f"`{key}` is a second tensor for {', '.join(p.reached)} (the checkpoint already has "
                         f"`{p.candidate}`): remove it")
        else:
            fixes.append(f"rename `{key}` → `{p.candidate}` (the engine then loads it into {', '.join(p.reached)})")
        break
    for p in switches:
        change = ", ".join(f"{k}: {v!r}" for k, v in p.config_change.items())
        why = ""
        if "num_hidden_layers" in p.config_change:
            why = f" if the trainer really trained that many layers (config says {num_layers})"
        fixes.append(f"or set `{change}` in config.json{why} (the engine then builds and loads {', '.join(p.reached)})")
    if not fixes:
        return f"remove `{key}` if it is not part of the draft; no rename or config switch makes this engine load it"
    text = "; ".join(fixes)
    return text[3:] if text.startswith("or ") else text


def _setting_fix(subject: SubjectView, obs, unwritten) -> str:
    """The one config line that explains every never-written parameter (observed by the engine: rebuilt under it,
    the checkpoint loads whole)."""
    (key, value), = obs.config_fix.items()
    engine = engine_label(obs.engine)
    if key == "num_hidden_layers":
        return (f"set `{key}: {value}` in config.json: the checkpoint holds {value} decoder layer(s) and the config "
                f"says {obs.config.get(key)}{_copied_from_target(subject, key)}; {engine} then builds {value} and "
                f"every tensor and parameter is loaded (observed)")
    return (f"`{key}: {json.dumps(not value)}` makes {engine} build {collapse_layers([p.name for p in unwritten])}, "
            f"which the checkpoint has no tensors for: if the trainer did not use {key}, set `{key}: "
            f"{json.dumps(value)}` (then every tensor and parameter is loaded, observed); if it did, save those tensors")


def _read_instead(unwritten, loaded_unread: list[str]) -> str | None:
    """Where a layer's forward reads a parameter the checkpoint never wrote and never reads one it did write (a
    layer above 0 whose norm the engine and the trainer name differently), says which of each, per layer."""
    from contracts.renames import layer_index

    by_layer: dict[int | None, list[list[str]]] = {}
    for p in unwritten:
        if p.read:
            by_layer.setdefault(layer_index(p.name), [[], []])[0].append(p.name)
    for name in loaded_unread:
        if layer_index(name) in by_layer:
            by_layer[layer_index(name)][1].append(name)
    parts = [f"layer {i} of the engine's draft reads {collapse_layers(read)}, which the checkpoint does not write, "
             f"and never reads {collapse_layers(unread)}, which it does" for i, (read, unread) in sorted(by_layer.items())
             if read and unread]
    return "; ".join(parts) + (": the trainer's layer and the engine's apply different parts there; rename only if "
                               "they compute the same function") if parts else None


def _copied_from_target(subject: SubjectView, key: str) -> str:
    """Says so when the draft's value is the target's (a config copied from the target)."""
    from contracts.checkpoint import text_config

    if subject.target_path is None or not (subject.target_path / "config.json").is_file():
        return ""
    try:
        target = text_config(json.loads((subject.target_path / "config.json").read_text()))
    except ValueError:
        return ""
    return " (as the target's config does)" if target.get(key) == subject.load.config.get(key) else ""


def _checkpoint_name(param: str) -> str:
    return param.removeprefix("model.")


def _fc_not_applied(subject: SubjectView, unwritten) -> str | None:
    """An ``fc`` the engine builds for a draft trained without aux hidden states (no fc saved) is harmless unwritten
    when the engine, wired with the target for this config, hands over one state and never applies it (SGLang's
    ``LlamaModel.forward`` applies fc only when the widths differ): observed in the aux wiring, not assumed."""
    if not any(p.name.endswith("fc.weight") for p in unwritten) or subject.target_path is None:
        return None
    if not trained_without_aux(subject.checkpoint.config, subject.checkpoint.tensors):
        return None
    aux = subject.aux
    if served_without_aux(subject, aux) is None:
        return None
    return (f"the draft was trained without aux hidden states (no fc saved) and {engine_label(aux.engine)} hands it "
            f"one state of {aux.hidden_width}: its forward never applied fc (observed with the target wired)")


@contract("key-naming", "every checkpoint tensor reaches an engine parameter or side channel, and every "
                        "engine parameter is written by the checkpoint or by the engine's sharing with the target")
def check_key_naming(subject: SubjectView) -> Result:
    obs = subject.load
    present = {t.key for t in obs.tensors}
    dropped = [t.key for t in obs.tensors if t.dropped and t.key not in IGNORED_BY_DESIGN]
    ignored = [t.key for t in obs.tensors if t.dropped and t.key in IGNORED_BY_DESIGN]
    side = {t.key: t.side_channel for t in obs.tensors if t.side_channel}
    failed_writers = {c.param for t in obs.tensors for c in t.calls if c.error}
    unwritten, shared, shape_blocked, never_read = [], {}, [], []
    loaded_unread = [p.name for p in obs.params if p.read is False and p.unwritten_fraction == 0.0]
    for p in obs.params:
        if p.unwritten_fraction == 0.0:
            continue
        if p.read is False:  # the engine builds it and its forward never reads it: harmless unwritten
            never_read.append(p.name)
        elif p.shared_from_target:
            shared[p.name] = p.shared_from_target
        elif p.name in failed_writers:
            shape_blocked.append(p.name)
        else:
            unwritten.append(p)
    fc_unread = _fc_not_applied(subject, unwritten)
    if fc_unread:
        never_read += [p.name for p in unwritten if p.name.endswith("fc.weight")]
        unwritten = [p for p in unwritten if not p.name.endswith("fc.weight")]
    renames = {t.key: sorted(set(t.reached)) for t in obs.tensors if t.reached and t.reached != [f"model.{t.key}"]
               and t.reached != [t.key]}

    evidence = {
        "engine_class": obs.draft_class,
        "tensors": len(obs.tensors),
        "dropped": dropped,
        "unwritten_params": {p.name: round(p.unwritten_fraction, 4) for p in unwritten},
        "written_by_target_sharing": shared,
        "side_channels": side,
        "ignored_by_design": {k: IGNORED_BY_DESIGN[k] for k in ignored},
        "renamed_by_engine": renames,
    }
    if shape_blocked:
        evidence["not_written_because_of_shape_errors"] = shape_blocked
    if never_read:
        evidence["never_written_never_read"] = collapse_layers(never_read) + (
            f" (built by {obs.draft_class}, never read by its forward: harmless)")
    if loaded_unread:
        evidence["loaded_but_never_read"] = collapse_layers(loaded_unread) + (
            f" (the checkpoint writes them, {obs.draft_class}'s forward never reads them: the trained values are unused)")
    if fc_unread:
        evidence["fc_not_applied"] = fc_unread
    if obs.reads_not_observed:
        evidence["layer_reads_not_observed"] = obs.reads_not_observed
    elif obs.reads_observed_on and (never_read or loaded_unread):
        evidence["layer_reads_observed_on"] = obs.reads_observed_on
    if obs.load_error:
        evidence["load_error"] = obs.load_error
    if obs.observed_on:
        evidence["observed_on"] = obs.observed_on

    problems, fixes = [], []
    if dropped and obs.load_error:  # the engine stopped loading: what it never reached is not a silent drop
        problems.append(f"{len(dropped)} tensor(s) never reached a parameter because the engine's load_weights "
                        f"raised before loading them: {collapse_layers(dropped)}")
    elif dropped:
        problems.append(f"{len(dropped)} tensor(s) dropped by the engine's loader: {collapse_layers(dropped)}")
        num_layers = obs.config.get("num_hidden_layers")
        fixes += [_fix_for_dropped(k, obs.probes, present, num_layers) for k in dropped]
    if unwritten:
        names = [p.name for p in unwritten]
        problems.append(f"{len(names)} engine parameter(s) never written (they would serve random values): "
                        f"{collapse_layers(names)}")
    renamed_into = {r for p in obs.probes if p.candidate for r in p.reached}
    if unwritten and obs.config_fix and not renamed_into & {p.name for p in unwritten}:
        # one setting explains them all: that is the fix, not a tensor list (not where renames write them)
        fixes.append(_setting_fix(subject, obs, unwritten))
    elif unwritten:
        swapped = _read_instead(unwritten, loaded_unread)
        if swapped:
            fixes.append(swapped)
        for p in unwritten:
            shards = sorted({c.shard for t in obs.tensors for c in t.calls if c.param == p.name and c.shard})
            if shards:
                fixes.append(f"{p.name} is only partly written ({p.unwritten_fraction:.0%} missing; shards loaded: "
                             f"{', '.join(shards)}): save the missing shard tensors")
            else:
                fixes.append(f"save a tensor for {p.name} ({engine_label(obs.engine).split()[0]} reads it as "
                             f"`{_checkpoint_name(p.name)}`)")
    if obs.load_error:
        problems.append(f"the engine's load_weights raised: {obs.load_error}")
        if "raised on " in obs.load_error:  # what was not loaded follows from the raise: one fix, for its cause
            fixes = [f"remove or rename the tensor(s) {engine_label(obs.engine)} raised on (a name no parameter of "
                     f"the draft has): it refuses to load the draft while they are there"]
    duplicated = subject.checkpoint.duplicated_tensors
    if duplicated:  # the file is read as the engines read it (the last entry); a writer that did this is suspect
        evidence["given_twice"] = duplicated
    if problems:
        return Result("key-naming", FAIL, "; ".join(problems), evidence, "; ".join(fixes) or None)
    summary = f"all {len(obs.tensors)} tensors reach {obs.draft_class}"
    if shared:
        summary += f"; {', '.join(shared)} written by the engine's sharing with the target"
    if duplicated:
        return Result("key-naming", WARN, f"{summary}; but the safetensors header gives {', '.join(duplicated[:3])} "
                      f"more than once (the engines read its last entry, as judged here: the writer lost one of them)",
                      evidence, "re-save the checkpoint with one entry per tensor")
    return Result("key-naming", PASS, summary, evidence)
