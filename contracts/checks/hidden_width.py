"""``hidden-width``: the target architecture, wired by the engine's own code for this draft config, captures
the aux layers and hands the draft hidden states whose width equals ``fc.in_features`` (so ``fc`` is never
bypassed), and the physical layers captured are the ones the trainer trained on.

Prevents accept length 1.00 behind a healthy server: a target class without ``set_eagle3_layers_to_capture``
(Kimi-K2.5 on SGLang 0.5.9) hands over one layer's state, SGLang's draft skips ``fc`` because the width equals
its embedding's, and the forward succeeds; ``use_aux_hidden_state: false`` does the same; and layer ids
counted in another convention (SGLang adds 1 to explicit ids; speculators and vLLM do not) feed the draft
neighbouring layers it was never trained on. On vLLM a target class without ``SupportsEagle3`` refuses to
start; the ids convention is judged the same way. No id range of the suite's own: an id at the layer count is the last
layer's output where the engine captures it (vLLM; SGLang's gpt-oss hook) and nothing where it does not (SGLang's Llama
loop), so ids are judged by what the engine's capture does, and the ids a fix prints are the ones its forward was seen
to capture the trained layers with; where none do, the fix says so.
"""

from __future__ import annotations

from contracts.checks.evidence import engine_label
from contracts.config_facts import served_without_aux, trained_without_aux
from contracts.registry import FAIL, PASS, SKIP, Result, SubjectView, contract

IDS = "eagle_aux_hidden_state_layer_ids"


def _on(aux) -> str:
    return {"v1": " on Model Runner V1", "v2": " on Model Runner V2"}.get(aux.runner or "", "")


def _ids_not_read(subject: SubjectView, aux) -> str | None:
    """Where the config the engine read lists aux ids the engine did not read (it applied its default), if it does:
    e.g. ids nested under ``eagle_config``, which vLLM's Model Runner V2 never reads, or top-level ids on SGLang."""
    if aux.aux_layer_ids is not None:
        return None
    import json

    cfg = json.loads((subject.engine_dir / "config.json").read_text())
    nested = (cfg.get("eagle_config") or {}).get(IDS) if isinstance(cfg.get("eagle_config"), dict) else None
    written = [(f"eagle_config.{IDS}", nested), (IDS, cfg.get(IDS))]
    listed = [f"{key}: {ids} is not a key it reads" for key, ids in written if ids]
    return "; ".join(listed) or None


def _states(width: int | None, hidden: int | None) -> str:
    if width is None or not hidden:
        return "?"
    return f"{width} = {width // hidden} × {hidden}" if width % hidden == 0 else str(width)


@contract("hidden-width", "the target architecture, wired by the engine for this draft config, captures the aux "
                          "layers and hands over hidden states as wide as fc.in_features; the captured layers are "
                          "the ones the trainer used")
def check_hidden_width(subject: SubjectView) -> Result:
    if subject.target_path is None:
        return Result("hidden-width", SKIP, "not judged: no --target: the hidden states the target hands over "
                      "cannot be observed", {}, "pass --target DIR (its config.json is enough)", needs="--target DIR")
    aux = subject.aux
    ev = aux.to_dict()
    ev.pop("engine", None)
    label = engine_label(aux.engine)
    hook_name = aux.hook_name or "the engine's aux capture hook"
    problems, fixes = [], []

    if aux.hook == "missing" or aux.configure_error:
        reason = aux.configure_error or f"the class has no {hook_name}"
        problems.append(f"target class {aux.target_class or aux.target_architecture} cannot capture aux hidden states "
                        f"on {label}: {reason}")
        since = aux.hook_since
        if aux.configure_error and aux.ids_for_trainer_layers is not None:  # refused for want of ids it then takes
            fixes.append(f"write {aux.ids_key}: {aux.ids_for_trainer_layers} ({label} then builds the pair and "
                         f"captures the layers the trainer used)")
        else:
            fixes.append(f"serve with {since}" if since else
                         f"{label} does not implement {hook_name} for {aux.target_architecture}: serve a target "
                         f"class that does, or add the hook to it")
    no_aux = trained_without_aux(subject.checkpoint.config, subject.checkpoint.tensors)
    if no_aux:
        ev["trained_without_aux"] = no_aux
    if aux.use_aux_hidden_state is False and not no_aux:
        problems.append("the draft config sets eagle_config.use_aux_hidden_state: false, so the engine captures no aux "
                        "layers although fc expects them")
        fixes.append("remove use_aux_hidden_state: false from eagle_config")

    fc_weight = next((t for name, t in subject.checkpoint.tensors.items() if name.endswith("fc.weight")
                      and "decoder" not in name), None)
    draft_cfg = subject.load.config
    trained_hidden = draft_cfg.get("target_hidden_size") or draft_cfg.get("hidden_size")
    if fc_weight is not None and trained_hidden and aux.layers_to_capture is not None and not aux.configure_error:
        trained_states = fc_weight.shape[1] // trained_hidden if fc_weight.shape[1] % trained_hidden == 0 else None
        ev["fc_trained_on_states"] = trained_states
        if trained_states is not None and trained_states != len(aux.layers_to_capture):
            problems.append(f"the engine captures {len(aux.layers_to_capture)} layer(s) {aux.layers_to_capture} but the "
                            f"checkpoint's fc was trained on {trained_states} ({fc_weight.shape[1]} = {trained_states} × "
                            f"{trained_hidden})")
            fixes.append(f"list exactly {trained_states} ids in eagle_config.eagle_aux_hidden_state_layer_ids")

    served_as_trained = served_without_aux(subject, aux) is not None
    if aux.evidence == "observed" and not served_as_trained:
        h = aux.tiny_hidden_size
        if no_aux and aux.draft_forward_error and aux.use_aux_hidden_state:
            fixes.append(f"{label}{_on(aux)} captures aux hidden states whatever use_aux_hidden_state says: serve "
                         f"this draft where the engine reads it (check it with --engine of another runner or engine)")
        if aux.hidden_width != aux.fc_in_features:
            what = "fc is silently bypassed" if aux.fc_ran is False and not aux.draft_forward_error else \
                f"the draft forward fails ({aux.draft_forward_error[:160]})" if aux.draft_forward_error else \
                "fc sees the wrong width"
            takes = f"fc takes {_states(aux.fc_in_features, h)}" if aux.fc_in_features is not None else \
                "the draft the engine builds for this config has no fc" + (
                    " (use_aux_hidden_state: false), yet the runner captures them" if aux.use_aux_hidden_state else "")
            problems.append(f"the target hands over {_states(aux.hidden_width, h)}{_on(aux)} but {takes}: {what}")
        elif aux.fc_ran is False:
            problems.append("fc did not run on the target's hidden states")
        if aux.draft_forward_error:
            ev["draft_forward_error"] = aux.draft_forward_error

    trained = subject.trainer_layers
    engine_layers = aux.hf_indices if aux.hf_indices else aux.layers_to_capture
    if trained and engine_layers is not None and not aux.configure_error and aux.use_aux_hidden_state:
        trainer, ids, wanted = trained["name"], trained["ids"], trained["hf_hidden_states"]
        ev["trainer"] = trained
        ev["engine_hf_hidden_states"] = engine_layers
        ev["engine_hf_mapping"] = (aux.hf_indices_from or "verified against transformers") if aux.hf_indices else \
            "layer-input convention verified on the Llama target"
        if list(engine_layers) != list(wanted):
            unread = _ids_not_read(subject, aux)
            problems.append(f"the engine captures hidden_states {list(engine_layers)} but {trainer} trained on "
                            f"hidden_states {wanted} (its ids {ids})" + (
                                f"; {label}{_on(aux)} reads no aux ids from this config ({unread}), so it captures "
                                f"the target's default layers" if unread else ""))
            if aux.ids_for_trainer_layers is not None:
                ids_fix = (f"{aux.ids_key or 'eagle_config.eagle_aux_hidden_state_layer_ids'}: "
                           f"{aux.ids_for_trainer_layers} ({label} then captures hidden_states {wanted})")
                # one fix per problem: a draft judged in its hand conversion is deployed through convert, which
                # writes these ids (config says the same of the conversion as a whole)
                fixes.append(f"deploy what `{subject.convert_command(verbatim=False)}` writes (its {ids_fix})"
                             if subject.converted else f"write {ids_fix}")
            elif aux.ids_unreachable:
                fixes.append(f"no config makes {label}{_on(aux)} serve this draft as trained ({aux.ids_unreachable}): "
                             f"retrain on layers it captures, or serve it with an engine that captures these")
    elif not subject.trainer_name:
        ev["trainer"] = ("unknown (a flat config names no trainer): layer alignment not judged; pass --trainer "
                         "speculators|specforge|modelopt to judge it")

    others = _other_conventions(subject, aux, engine_layers, ev)
    if problems:
        return Result("hidden-width", FAIL, "; ".join(problems) + others, ev, "; ".join(fixes) or None)
    if aux.evidence == "static":
        return Result("hidden-width", PASS, f"{aux.target_class} implements the aux-capture hook ({aux.hook}); static "
                      f"evidence only: {aux.evidence_reason}", ev)
    if served_as_trained:
        return Result("hidden-width", PASS, f"{aux.target_class} hands over {_states(aux.hidden_width, aux.tiny_hidden_size)}"
                      f"{_on(aux)} (no aux layers captured: the draft was trained without aux hidden states, {no_aux}); "
                      f"no fc applied: served as trained", ev)
    return Result("hidden-width", PASS, f"{aux.target_class} hands over {_states(aux.hidden_width, aux.tiny_hidden_size)}"
                  f" (hidden_states {list(engine_layers or [])}), fc ran" + others, ev)


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def _other_conventions(subject: SubjectView, aux, engine_layers, ev) -> str:
    """Where the trainer is a guess (a flat config names none), what each trainer's convention would make of the
    layers the engine captures; said in the summary when they disagree. Nothing where the trainer is known."""
    from contracts.conventions import TRAINERS, hf_indices, trainer_layer_ids

    why, guessed = subject.trainer_basis
    n = aux.num_target_layers
    if not guessed or engine_layers is None or not n or aux.configure_error or not aux.use_aux_hidden_state:
        return ""
    verdicts = {}
    for name in TRAINERS:
        ids, _ = trainer_layer_ids(name, subject.checkpoint.config, int(n))
        own = subject.trainer_layers if name == subject.trainer_name else None
        wanted = own["hf_hidden_states"] if own else hf_indices(name, ids)
        verdicts[name] = {"hf_hidden_states": wanted, "aligned": list(engine_layers) == wanted}
    assumed = subject.trainer_name
    ev["convention"] = {"assumed": assumed or "none (layer alignment not judged)", "why": why, "each": verdicts}
    if len({v["aligned"] for v in verdicts.values()}) < 2:  # every convention gives the same verdict
        return ""
    said = ", ".join(f"{_possessive(name)} would {'pass' if v['aligned'] else 'fail'} it (hidden_states "
                     f"{v['hf_hidden_states']})"
                     for name, v in verdicts.items() if name != assumed)
    head = f"convention assumed: {assumed} ({why})" if assumed else f"trainer unknown ({why})"
    return f" [{head}; {said}: pass --trainer to settle it]"
