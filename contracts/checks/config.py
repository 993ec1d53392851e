"""``config``: every draft-config switch that changes the math is honoured by this engine version, the
architecture dispatches to an EAGLE-3 draft class through the engine's registry, sizes agree with the
target, and the rope the engine applies is the one the trainer trained with.

Prevents breaks that leave every name and shape intact: ``norm_before_residual: true`` (speculators'
``train`` default) that SGLang 0.5.23 silently ignores; ``rope_scaling`` lost on conversion; a config the
engine dispatches to a non-draft class; a vocab or hidden size that differs from the target's. Differences
a trainer may intend (shorter context, another rope base, no rope scaling, another serving dtype) are
warnings. "Honoured" is the engine's answer: flipping the switch on the same weights changes its output.
"""

from __future__ import annotations

import json

from contracts.checkpoint import rope_of, text_config
from contracts.checks.evidence import engine_label
from contracts.checkpoint import trained_window
from contracts.config_facts import (draft_only_scaling, ignored_switches, rope_scaled, rope_type, switches_from_step_1,
                                    switches_in, trained_config)
from contracts.refusals import DRAFT_ARCHITECTURE_FIX
from contracts.registry import FAIL, PASS, SKIP, WARN, Result, SubjectView, contract


@contract("config", "every draft-config switch that changes the math is honoured by this engine version, the "
                    "architecture dispatches to an EAGLE-3 draft class, sizes agree with the target; context, rope "
                    "base or serving dtype that differ from the target's are warnings")
def check_config(subject: SubjectView) -> Result:
    from contracts.refusals import EngineRefused, NotADraft

    refusal = None
    try:  # the engine refusing to build the draft is this contract's finding
        subject.load  # noqa: B018
    except NotADraft:  # judged below, from the engine's own dispatch
        pass
    except EngineRefused as e:
        refusal = e
    flat = json.loads((subject.engine_dir / "config.json").read_text())
    original = subject.checkpoint.config
    obs = subject.config_obs
    if refusal is not None and not obs.dispatch_error:
        raise refusal  # dispatched, then refused while building: Subject.run reports it with the fix it asks for
    ev = obs.to_dict()
    ev.pop("engine", None)
    label = engine_label(obs.engine)
    problems, warnings, fixes = [], [], []

    if obs.dispatch_error:
        problems.append(f"{label} cannot dispatch architectures {flat.get('architectures')}: "
                        f"{obs.dispatch_error[:300]}")
        fixes.append(DRAFT_ARCHITECTURE_FIX)
    elif obs.forward_error:
        on = obs.probed_on or "its weights"
        problems.append(f"{label}'s own forward of this draft raises {obs.forward_error} (on {on}): a server would "
                        f"fail the same way on its first draft step")
        fixes.append("make the config describe the draft as trained (its layer count and widths), so that the "
                     "engine can run it")
    elif not obs.is_eagle3_draft:
        problems.append(f"{label} dispatches architectures {obs.architectures} to {obs.draft_class}, a "
                        f"non-draft class: it would serve the checkpoint as a plain model, without fc, d2t or the "
                        f"target's aux hidden states")
        fixes.append(DRAFT_ARCHITECTURE_FIX)
    # (warning, fix) pairs of the config file itself, before the differences from the target
    own = _as_saved(subject, label, ev) + _duplicate_keys(subject, ev)
    warnings += [w for w, _ in own]
    warn_fixes = [f for _, f in own]

    for key, (value, fixed) in ignored_switches(subject, obs).items():
        if value != fixed:
            problems.append(f"{key}: {json.dumps(value)} is ignored by {label}: flipping it on the same weights "
                            f"changes nothing, so the engine computes the {key}: {json.dumps(fixed)} math the draft was "
                            f"not trained with")
            fixes.append(f"retrain with {key}: {json.dumps(fixed)} (or serve with an engine that implements {key})")
        else:
            ev["switches"][key]["note"] = (f"ignored, but the engine always computes the {key}: {json.dumps(fixed)} "
                                           f"math the draft set")

    meanings = _other_meanings(subject, obs, label, ev)
    if meanings:  # one fix for them all: their own, not the generic "confirm these differences"
        fix = ("serve without the key if the engine's default computes the trainer's meaning, or retrain with the "
               "engine's; forward-parity against the trainer's reference (build-tiny) shows which math the engine "
               "computes")
        warnings += meanings
        own += [(text, fix) for text in meanings]
        warn_fixes.append(fix)

    vocab, draft_vocab = flat.get("vocab_size"), flat.get("draft_vocab_size")
    dtypes_differ = False
    if isinstance(vocab, int) and isinstance(draft_vocab, int) and draft_vocab > vocab:
        problems.append(f"draft_vocab_size {draft_vocab} is above vocab_size {vocab}")
        fixes.append("draft_vocab_size must not exceed vocab_size (the target's vocab)")
    if subject.target is not None:
        target = text_config(subject.target.config)
        t_vocab, t_hidden = target.get("vocab_size"), target.get("hidden_size")
        if isinstance(vocab, int) and isinstance(t_vocab, int) and vocab != t_vocab:
            problems.append(f"vocab_size {vocab} differs from the target's {t_vocab}: draft token ids would index "
                            f"another vocabulary")
            fixes.append(f"set vocab_size: {t_vocab} (the target's) and rebuild d2t/t2d over it")
        draft_in = flat.get("target_hidden_size") or flat.get("hidden_size")
        if isinstance(draft_in, int) and isinstance(t_hidden, int) and draft_in != t_hidden:
            problems.append(f"the draft expects target hidden states of width {draft_in} but the target's hidden_size "
                            f"is {t_hidden}")
            fixes.append(f"set target_hidden_size: {t_hidden}")
        t_ctx, ctx = target.get("max_position_embeddings"), flat.get("max_position_embeddings")
        if isinstance(ctx, int) and isinstance(t_ctx, int) and ctx < t_ctx:
            warnings.append(f"the draft's max_position_embeddings {ctx} is shorter than the target's {t_ctx}: "
                            f"drafts past position {ctx} run outside what it was trained on")
        t_theta, t_scaling = rope_of(target)
        d_theta, d_scaling = rope_of(trained_config(original))
        if t_theta and d_theta and float(t_theta) != float(d_theta):
            warnings.append(f"rope base {d_theta} differs from the target's {t_theta}")
        if rope_scaled(t_scaling) and not rope_scaled(d_scaling):
            warnings.append(f"the target uses rope scaling {rope_type(t_scaling)} and the draft none")
        elif rope_scaled(d_scaling) and not rope_scaled(t_scaling):
            text, fix = draft_only_scaling(subject, d_scaling)
            own.append((text, fix))  # its own fix, not the generic "confirm these differences"
            warnings.append(text)
            warn_fixes.append(fix)
        dtypes_differ = bool(obs.engine_dtype and obs.target_engine_dtype and
                             obs.engine_dtype != obs.target_engine_dtype)
        if dtypes_differ:
            warnings.append(f"with --dtype auto {label} runs the draft in {obs.engine_dtype} and the target in "
                            f"{obs.target_engine_dtype}")

    if obs.rope and obs.rope.get("same") is False:
        problems.append(f"the engine applies another rope than the trainer trained with: trained "
                        f"{obs.rope['trained']} ({obs.rope.get('trained_class')}), applied {obs.rope['applied']}")
        fixes.append("carry the trainer's rope_theta and rope_scaling/rope_parameters into the config the engine reads")

    _window(subject, obs, label, ev, problems, fixes)

    if len(warnings) > len(own):
        warn_fixes.append("confirm these differences from the target are intended" +
                          (" (serve with --dtype to align dtypes)" if dtypes_differ else ""))
    unprobed = None
    if obs.switches_not_probed:
        set_here = switches_in(flat, original)
        unprobed = (f"whether {label} honours the switches this config sets ({', '.join(set_here) or 'none'}) is not "
                    f"judged: {obs.switches_not_probed}")
    if problems:
        return Result("config", FAIL, "; ".join(problems + warnings + ([unprobed] if unprobed else [])), ev,
                      "; ".join(dict.fromkeys(fixes + warn_fixes)))
    if warnings:
        return Result("config", WARN, "; ".join(warnings + ([unprobed] if unprobed else [])) + _from_step_1(obs), ev,
                      "; ".join(warn_fixes))
    if unprobed:
        return Result("config", SKIP, f"dispatches to {obs.draft_class}, sizes agree with the target; {unprobed}", ev)
    honoured = [k for k, s in obs.switches.items() if s["honoured"]]
    return Result("config", PASS, f"dispatches to {obs.draft_class}; switches honoured: {honoured or 'none set'}; "
                  f"sizes agree with the target" + _from_step_1(obs), ev)


def _window(subject: SubjectView, obs, label: str, ev: dict, problems: list, fixes: list) -> None:
    """A draft trained with sliding-window attention (speculators' ``train`` default, speculators#684) and served
    with full attention: the same outputs up to the window's length, then the draft attends to positions training
    never let it see. Whether the engine applies the window is its own answer (the window shrunk below the probe's
    tokens changes its outputs or not): vLLM builds ``per_layer_sliding_window``; SGLang takes a window only from a
    server argument; llama.cpp's converter writes none for an EAGLE-3 draft."""
    trained = trained_window(subject.checkpoint.config)
    if trained is None or obs.window is None:
        return
    if obs.window.get("applied"):
        return
    width = trained["sliding_window"]
    where = "every layer" if trained["sliding_layers"] == "all" else f"layers {trained['sliding_layers']}"
    problems.append(f"the draft was trained with sliding-window attention (window {width} on {where}) and {label} "
                    f"serves it full attention (its draft step with the window shrunk to {obs.window['probe_window']} "
                    f"tokens gives the same outputs): beyond {width} tokens of context the draft attends to positions "
                    f"its training never showed it")
    option = obs.window.get("engine_option")
    fixes.append(f"serve with {option} {width}" if option else
                 f"{label} applies no window to this draft: retrain it with full attention (layer_types "
                 f"full_attention), or serve it with an engine that applies the window")


def _acts(effect: dict) -> str:
    step_0, fed = effect.get("step_0_change", 0) > 0, effect.get("fed_back_state_change", 0) > 0
    return ("changes the step-0 logits and the state fed to the next step" if step_0 and fed else
            "changes the step-0 logits only (the state fed to the next step is the same either way)" if step_0 else
            "changes only the state fed to the next step (from draft step 1 on)" if fed else "changes nothing")


def _other_meanings(subject: SubjectView, obs, label: str, ev: dict) -> list[str]:
    """Switches the engine honours that mean something else to the trainer: flipping each on the same weights
    changes other things in the trainer's forward (observed in its environment) than in the engine's. SpecForge
    0.2.0's ``norm_output`` is its final norm before ``lm_head`` and leaves the state fed on raw; the engines'
    feeds the normalised state on: both honour a key they read differently, and only later steps show it."""
    known = subject.trainer_switches
    if known is None:
        return []
    semantics, source = known
    out = []
    for key, engine in obs.switches.items():
        trainer = semantics.get(key)
        if not trainer or not engine.get("honoured") or "step_0_change" not in engine:
            continue
        if _acts(trainer) != _acts(engine):
            ev.setdefault("trainer_switch_semantics", {"source": source})[key] = trainer
            out.append(f"{key} means something else to {source.split(' (')[0]} than to {label}: flipped on the same "
                       f"weights, there it {_acts(trainer)}, here it {_acts(engine)} (trainer side: {source})")
    return out


def _from_step_1(obs) -> str:
    later = switches_from_step_1(obs)
    return (f"; {', '.join(later)} act{'s' if len(later) == 1 else ''} from draft step 1 on (the state fed to the next "
            f"step; the step-0 logits are unchanged: forward-parity judges it against a trainer reference that "
            f"carries later steps)") if later else ""


def _as_saved(subject: SubjectView, label, ev: dict) -> list[tuple[str, str]]:
    """A converted checkpoint (speculators) is judged in the form the conversion writes: say whether the engine
    could serve the saved form at all (its own dispatch of the saved config), and how to get the judged form."""
    if not subject.converted:
        return []
    saved = subject.saved_config_obs
    saved_archs = subject.checkpoint.config.get("architectures")
    ev["as_saved"] = {"architectures": saved_archs, "dispatch_error": saved.dispatch_error,
                      "draft_class": saved.draft_class, "judged_form": subject.convert_command()}
    if saved.is_eagle3_draft and not saved.dispatch_error:
        return []
    why = (saved.dispatch_error or f"it dispatches to {saved.draft_class}, no EAGLE-3 draft class")[:200]
    return [(f"{label} cannot serve this checkpoint as saved (architectures {saved_archs}: {why}); every "
             f"verdict here is for its verbatim conversion, as a hand conversion writes it "
             f"(`{subject.convert_command()}`)",
             f"deploy what `{subject.convert_command(verbatim=False)}` writes: the form this release loads, with "
             f"the aux ids and tensor names it needs, verified by the contracts")]


def _duplicate_keys(subject: SubjectView, ev: dict) -> list[tuple[str, str]]:
    """Keys config.json gives twice: the engines read the last value (Python's json), the earlier is shadowed."""
    dups = subject.checkpoint.config_duplicates
    if not dups:
        return []
    ev["duplicate_keys"] = [{"key": k, "shadowed": old, "read": new} for k, old, new in dups]
    return [(f"config.json gives {k!r} twice: the engine reads the last value {json.dumps(new)}; the earlier "
             f"{json.dumps(old)} is shadowed", f"keep one {k!r} in config.json") for k, old, new in dups]
