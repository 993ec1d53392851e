"""``eagle3-contracts convert``: the copy of a draft that one engine release, serving the target's class, serves
as the trainer trained it, proven by the contracts run on that copy.

Contract served: ``hidden-width``'s layer alignment, and every other contract by the verification. Prevents the
converter's own misalignment: speculators' aux ids copied verbatim into SGLang's ``eagle_config`` capture
``hidden_states[k+1]`` where speculators trained on ``hidden_states[k]``, so every draft token is rejected (the
verbatim copy is what ``--verbatim`` still writes). The ids are never taken from a table: the engine's own capture
is asked, on a tiny instance of the target class, which ids make it capture the ``hidden_states`` the trainer
trained on (``AuxCaptureObservation.ids_for_trainer_layers``), because the rule differs per engine, release and
target class (SGLang's DeepSeek family shifts only when the first id is 1; gpt-oss has its own rule). Tensors
the release's loader drops as saved but, by its own probe, loads under another name are renamed (``layers.0.*`` ->
``midlayer.*`` on SGLang 0.5.3-0.5.11; a safetensors header change), and a layer count copied from the target is
set to the layers the checkpoint holds where the release's own rebuild loads it whole (NeMo Automodel). Switches the
engine lacks are not papered over: the verification's ``config`` and ``forward-parity`` name them, and ``convert``
exits 1. SRC is never written.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from contracts.checkpoint import CONVERSION_RECORD_KEY, Checkpoint, InputError
from contracts.engine_profile import convert_targets, default_engine, profile
from contracts.engine_spec import EngineSpec
from contracts.observations import AuxCaptureObservation, LoadObservation, PathObservation
from contracts.hand_conversion import check_destination, files_to_copy, speculators_to_sglang_config, write_copy
from contracts.trainer_profile import PROFILES, nested

IDS = "eagle_aux_hidden_state_layer_ids"


def served_architecture(trainer_format: str) -> str | None:
    """The draft class a trainer's serve helpers write for the engines, where it saves another (its profile's
    ``form.served_architecture``: NeMo Automodel's training class, which no engine registers)."""
    p = PROFILES.get(trainer_format)
    return p.form.served_architecture if p is not None and p.form is not None else None
SGLANG_IDS_KEY = f"eagle_config.{IDS}"  # the only place SGLang reads explicit ids (top-level ones are ignored)
# The record every copy carries in its config.json: what it was trained on and what it was made for, so that `check`
# judges the copy against the trainer's layers without being told (its ids are no longer in the trainer's convention).
RECORD_KEY = CONVERSION_RECORD_KEY


@dataclass
class Conversion:
    src: Path
    dst: Path
    engine: EngineSpec
    form: str  # "faithful" or "verbatim"
    config: dict
    notes: list[str] = field(default_factory=list)  # what was written and why
    not_faithful: list[str] = field(default_factory=list)  # why DST is not served as trained (empty: it is)
    report: dict = field(default_factory=dict)  # the contracts' report on DST, on the path a GPU deployment takes (subject.report)
    other_reports: list[dict] = field(default_factory=list)  # on the release's other paths (vLLM's other runner)
    renames: dict = field(default_factory=dict)  # tensor old name -> new name, as the engine's loader asked

    @property
    def served_as_trained(self) -> bool:
        return not self.not_faithful


def base_config(ckpt: Checkpoint, to: str) -> dict:
    """The config the engine reads before any alignment: SGLang cannot dispatch speculators' nested format, so it
    gets the flat form (``contracts.hand_conversion``); vLLM reads both formats as saved. A record of an earlier conversion
    is dropped (the new copy gets its own). NeMo Automodel's training checkpoint names its own draft class, which no
    engine registers: it gets the class its serve helpers write for both engines."""
    if profile(to).flat_config_only and nested(ckpt.trainer_format):
        cfg = speculators_to_sglang_config(ckpt.config)
    else:
        cfg = json.loads(json.dumps(ckpt.config))
    served = served_architecture(ckpt.trainer_format)
    if served:
        cfg["architectures"] = [served]
    cfg.pop(RECORD_KEY, None)
    return cfg


def with_ids(cfg: dict, key: str, ids: list[int]) -> dict:
    """CFG with the aux ids written where the engine reads them (``key``: top level, or ``eagle_config.``). Written
    at the top level (vLLM: both runners read it first), ids nested under ``eagle_config`` are set to the same, so
    no key of the copy names other layers."""
    cfg = json.loads(json.dumps(cfg))
    if key == IDS:
        cfg[IDS] = list(ids)
        if isinstance(cfg.get("eagle_config"), dict) and IDS in cfg["eagle_config"]:
            cfg["eagle_config"] = {**cfg["eagle_config"], IDS: list(ids)}
    else:
        cfg["eagle_config"] = {**(cfg.get("eagle_config") or {}), IDS: list(ids)}
    return cfg


def ids_read(cfg: dict, key: str) -> list[int] | None:
    """The explicit aux ids the engine reads from CFG at ``key`` (None: its default applies)."""
    return cfg.get(IDS) if key == IDS else (cfg.get("eagle_config") or {}).get(IDS)


def conversion_record(trained: dict | None, engine: EngineSpec, src: Path, form: str, paths: list[str]) -> dict:
    """What the copy records of itself (``RECORD_KEY``): the trainer, the ids it trained with in its own convention,
    the transformers ``hidden_states`` they are, the engine release (and paths) it was made and proven for."""
    out = {"made_for": str(engine.release()), "proven_on": paths, "form": form, "source": str(src), "by": "eagle3-contracts"}
    if trained:
        out.update(trainer=trained["name"], trainer_aux_ids=list(trained["ids"]),
                   trained_hidden_states=list(trained["hf_hidden_states"]))
    return out


def trainer_given(trainer: str | None, record: dict, ckpt: Checkpoint) -> bool:
    """Whether the trainer of SRC was named (``--trainer``) rather than recognised, as ``check`` asks before it
    treats a bundled draft's directory as that bundled draft."""
    return bool(trainer) and trainer != record.get("trainer") and trainer != ckpt.trainer_format


def bundled_facts(src: Path, target: Path | None) -> dict | None:
    """A bundled draft's facts (the ids its trainer selected and trained on, its reference forward) when SRC is that
    draft's directory, as ``check`` judges it; None for any other directory."""
    from contracts.bundled import bundled_subject_for

    bundled = bundled_subject_for(src, EngineSpec(default_engine()), target)
    if bundled is None:
        return None
    return {k: getattr(bundled, k) for k in ("intended_ids", "trainer_aux_ids", "reference_path")
            if getattr(bundled, k) is not None}


def _subject(src: Path, target: Path | None, engine: EngineSpec, trainer: str | None, served_as: Path, **facts):
    from contracts.subject import Subject

    return Subject(src.name, src, target, trainer=trainer, engine=engine, served_as=served_as, **facts)


@dataclass
class Observed:
    """What the engine made of SRC's weights under one config (a staged copy) on one path: its load, its aux capture,
    the layers the trainer trained on and the path judged; ``why`` says what could not be observed (its fields are
    then None)."""

    load: LoadObservation | None = None
    aux: AuxCaptureObservation | None = None
    trained: dict | None = None
    path: PathObservation | None = None
    why: str | None = None


def observe(src, cfg, target, engine, trainer, into: Path, facts: dict, renames: dict | None = None,
            ids: list[int] | None = None) -> Observed:
    """One staged copy of SRC under CFG (weights linked, RENAMES applied; IDS written where the engine reads them
    when that is not config.json: ``serve_beside``), asked by one subject: every observation `convert` needs of it
    comes from the same engine load."""
    from contracts.engines.errors import EngineBuildError, ReplayError
    from contracts.refusals import EngineRefused, TargetRefused

    staged = write_copy(src, cfg, into, link=True, renames=renames)
    observed = Observed()
    if ids is not None:
        refused = serve_beside(staged, engine, ids)
        if refused:
            observed.why = f"the engine's capture could not be observed: {refused}"
            return observed
    subject = _subject(src, target, engine, trainer, staged, **facts)
    try:
        observed.path = subject.path
        observed.load = subject.load
        observed.trained = subject.trainer_layers
        if observed.trained is None:
            observed.why = "the target's config gives no num_hidden_layers, so the trained layers are unknown"
        else:
            observed.aux = subject.aux
    except (EngineRefused, TargetRefused, ReplayError, EngineBuildError) as e:
        observed.why = f"the engine's capture could not be observed: {e}"
    finally:
        subject.close()
    return observed


def serve_beside(dst: Path, engine: EngineSpec, ids: list[int] | None) -> str | None:
    """Run the engine's ``convert_job`` on DST (what it serves, written beside the copy, with IDS where it reads
    them) in the release's environment; the engine's refusal in its words, else None."""
    from contracts.engines.remote import last_error, run_module
    from contracts.environments.engines import environment_for

    job = profile(engine.name).convert_job
    assert job is not None, f"{engine.name} writes nothing beside a copy"
    done = run_module(environment_for(engine.release()), job, str(dst), json.dumps(ids), engine=engine.name)
    if done.returncode != 0:  # outside the engine's own calls: a defect of this suite, never a verdict
        raise RuntimeError(f"{profile(engine.name).label}'s convert job failed: {last_error(done.stderr)}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result.get("refused")


def _on(observed: Observed) -> str:
    p = observed.path
    return f" on {p.label}" if p is not None and p.kind == "runner" else ""


def align_aux_ids(cfg: dict, firsts: list[Observed], reobserve,
                  in_config: bool = True) -> tuple[dict, list[str], list[str], list[int] | None]:
    """CFG with the aux ids that make the engine capture the layers the trainer trained on, on every path in FIRSTS
    (the observations of CFG: the default path first, then the release's others): kept when every path already does
    (a draft on its trainer's engine, or default ids), else the ids the engine's own hook reports for those layers
    (also where it refused to capture for want of ids it then takes), written where every path reads them and
    confirmed by ``reobserve(new config, ids)`` (one observation per path). IN_CONFIG false: the engine reads ids
    from what its ``convert_job`` writes beside the copy, not from config.json (which is then left as it is).
    Returns (config, notes, reasons it could not be aligned, the ids written outside config.json)."""
    observed_all, outside = firsts, None
    for attempt in (0, 1):
        missing = next((o for o in observed_all if o.aux is None or o.trained is None), None)
        if missing is not None:
            return cfg, [], [f"aux layer ids not aligned{_on(missing)}: {missing.why}"], None
        captures = [(o, o.aux) for o in observed_all if o.aux is not None]
        trained = observed_all[0].trained or {}
        wanted = list(trained["hf_hidden_states"])
        trained_on = f"{trained['name']} trained on hidden_states {wanted} (its ids {trained['ids']})"
        misaligned: list[tuple[str, AuxCaptureObservation, list[int] | None]] = []
        ids_for, key = None, None
        for o, aux in captures:
            label = f"{aux.engine['name']} {aux.engine['version']}{_on(o)}"
            captured = aux.hf_indices or aux.layers_to_capture
            if (aux.configure_error or captured is None) and not (aux.configure_error and aux.ids_for_trainer_layers):
                reason = aux.configure_error or aux.evidence_reason or "its capture could not be observed"
                return cfg, [], [f"aux layer ids not aligned: {label} with {aux.target_class or aux.target_architecture} "
                                 f"cannot be asked which layers it captures ({reason})"], None
            if aux.configure_error or captured is None:  # refused for want of ids it then takes (observed)
                misaligned.append((label, aux, None))
            elif list(captured) != wanted:
                misaligned.append((label, aux, list(captured)))
            ids_for = ids_for or aux.ids_for_trainer_layers
            key = key or aux.ids_key
        key = key or SGLANG_IDS_KEY
        labels = ", ".join(f"{aux.engine['name']} {aux.engine['version']}{_on(o)}" for o, aux in captures)
        if not misaligned:
            written = ids_read(cfg, key) if in_config else outside
            s, readers = ("s", "it reads") if len(observed_all) == 1 else ("", "both runners read")
            note = (f"aux layer ids: wrote {written} ({labels} then capture{s} hidden_states {wanted}; {trained_on}; "
                    f"at {key}, where {readers} them)" if attempt else
                    f"aux layer ids kept as {written if written is not None else 'the default'}: {labels} with "
                    f"{captures[0][1].target_class} capture{s} hidden_states {wanted}; {trained_on}")
            return cfg, [note], [], outside
        if attempt or ids_for is None:
            return cfg, [], [f"aux layer ids not aligned: {label} with {aux.target_class} "
                             + (f"captures hidden_states {captured}" if captured is not None else
                                f"refuses without ids ({aux.configure_error})")
                             + f", and no ids make it capture {wanted} ({trained_on}"
                             + (f"; observed: {aux.ids_unreachable})" if aux.ids_unreachable else ")")
                             for label, aux, captured in misaligned], None
        if in_config:
            cfg = with_ids(cfg, key, ids_for)
        else:
            outside = list(ids_for)
        observed_all = reobserve(cfg, outside)
    raise AssertionError("unreachable: the second observation always returns")


def engine_renames(ckpt: Checkpoint, load) -> tuple[dict[str, str], list[str], list[str]]:
    """The tensor renames the engine's own loader asks for (LOAD: its observation of CKPT's tensors): each tensor it
    drops as saved that its probe (the same tensor fed again under a candidate name) shows it loading under another
    name, such as a layer SGLang 0.5.3-0.5.11 names ``midlayer`` where the draft saved ``layers.0``. Only
    safetensors files are rewritten (a header change); returns (renames, notes, reasons a drop stays)."""
    present = set(ckpt.tensors)
    dropped = {f.key for f in load.tensors if f.dropped}
    renames, reasons = {}, []
    for probe in load.probes:
        if (probe.key in dropped and probe.key not in renames and probe.candidate and probe.config_change is None
                and probe.reached and probe.candidate not in present):
            if ckpt.tensors[probe.key].file.endswith(".safetensors"):
                renames[probe.key] = probe.candidate
            else:
                reasons.append(f"{probe.key} loads only as {probe.candidate}, and it is in a pickle file "
                               f"({ckpt.tensors[probe.key].file}), which convert does not rewrite")
    notes = []
    if renames:
        label = f"{load.engine['name']} {load.engine['version']}"
        shown = ", ".join(f"{k} -> {v}" for k, v in sorted(renames.items())[:4])
        notes.append(f"renamed {len(renames)} tensor(s) ({shown}{', ...' if len(renames) > 4 else ''}): {label}'s "
                     f"loader drops them as saved and loads them under these names (its own probe); values unchanged")
    return renames, notes, reasons


def engine_layer_count(cfg: dict, load) -> tuple[dict, list[str]]:
    """The draft's layer count where the engine's own rebuild asks for it (LOAD's ``config_fix``): a config whose
    ``num_hidden_layers`` was copied from the target (NeMo Automodel's recipe writes the target's) makes the engine
    build that many draft layers and serve all but the saved ones on random weights; under the checkpoint's own count
    it loads every tensor and writes every parameter (observed). Other settings are the trainer's to say: not set."""
    fix = load.config_fix or {}
    if set(fix) != {"num_hidden_layers"} or cfg.get("num_hidden_layers") == fix["num_hidden_layers"]:
        return cfg, []
    label = f"{load.engine['name']} {load.engine['version']}"
    note = (f"num_hidden_layers: {cfg.get('num_hidden_layers')} -> {fix['num_hidden_layers']} (the decoder layers the "
            f"checkpoint holds): {label}'s own build asks for it (observed under both counts: under the config's, it "
            f"serves layers the checkpoint lacks on random weights or refuses the draft; under this one, it loads "
            f"every tensor and serves it)")
    return {**cfg, **fix}, [note]


def convert(src, dst, *, engine: EngineSpec, target=None, trainer: str | None = None,
            verbatim: bool = False, link: bool = False, facts: dict | None = None) -> Conversion:
    """Write the copy of SRC that ENGINE (a release, or the engine as installed or pinned) serves as trained
    into DST (new or empty), then judge DST with every contract on that engine. ``verbatim``: the naive copy (the
    speculators config flattened, ids as saved), judged the same way. ``facts``: what a build record knows
    (``trainer_aux_ids``, ``trainer_hidden_states``). Raises InputError before writing anything it cannot use."""
    from contracts.conventions import TRAINERS
    from contracts.judging import report

    to = engine.name
    if to not in convert_targets():
        own = profile(to).label
        raise InputError(f"convert writes copies for {' and '.join(convert_targets())}; {own} serves what its own "
                         f"converter writes (check --engine {to} judges the draft as that converter converts it)")
    src, dst = Path(src).resolve(), Path(dst).resolve()
    ckpt = Checkpoint.open(src)
    target_path = None if target is None else Path(target).resolve()
    check_destination(src, dst, target_path)
    recorded = ckpt.config.get(RECORD_KEY)
    record: dict = recorded if isinstance(recorded, dict) else {}
    if trainer and record.get("trainer") and trainer != record["trainer"]:
        raise InputError(f"{src}/config.json: this copy records that {record['trainer']} trained it ({RECORD_KEY}), "
                         f"but --trainer says {trainer}")
    trainer = trainer or record.get("trainer") or (ckpt.trainer_format if ckpt.trainer_format in TRAINERS else None)
    if facts is None and not trainer_given(trainer, record, ckpt):
        facts = bundled_facts(src, target_path)
    if target_path is not None:
        Checkpoint.open_target(target_path)
    if target_path is None:
        raise InputError("convert: give --target DIR (its config.json is enough): the aux ids are read off the "
                         "engine's capture of that target class, and the copy is judged against it")
    if not verbatim and trainer is None:
        raise InputError("convert: a flat config names no trainer, so the layers it trained on are unknown: pass "
                         f"--trainer {'|'.join(TRAINERS)} (or --verbatim)")
    facts = facts or {}
    cfg = base_config(ckpt, to)
    conversion = Conversion(src=src, dst=dst, engine=engine, form="verbatim" if verbatim else "faithful", config=cfg)
    if profile(to).flat_config_only and nested(ckpt.trainer_format):
        conversion.notes.append(f"config flattened from speculators' nested format ({profile(to).label} cannot "
                                "dispatch it)")
    served = served_architecture(ckpt.trainer_format)
    if served:
        conversion.notes.append(f"architectures: {ckpt.config.get('architectures')} -> [{served!r}] (no engine "
                                f"registers {PROFILES[ckpt.trainer_format].label}'s training class; its serve "
                                f"helpers write this one)")
    skipped = files_to_copy(src)[1]
    if skipped:
        conversion.notes.append(f"not copied: {', '.join(skipped)}")
    renames: dict[str, str] = {}
    job = None if verbatim else profile(to).convert_job
    outside_ids: list[int] | None = None
    scratch = Path(tempfile.mkdtemp(prefix="eagle3-contracts-convert-"))
    try:  # the load and the capture under the base config come from one observation per path
        first = observe(src, cfg, target_path, engine, trainer, scratch / "base", facts)
        engines = [engine] + other_paths(engine, first.path)
        if not verbatim:
            firsts = [first] + [observe(src, cfg, target_path, e, trainer, scratch / f"base-{i}", facts)
                                for i, e in enumerate(engines[1:])]
            if first.load is not None:
                renames, notes, reasons = engine_renames(ckpt, first.load)
                conversion.notes += notes
                conversion.not_faithful += reasons
                cfg, notes = engine_layer_count(cfg, first.load)
                conversion.notes += notes
                if job is not None and (renames or notes):  # what it writes beside the copy depends on both
                    firsts = [observe(src, cfg, target_path, e, trainer, scratch / f"fixed-{i}", facts, renames)
                              for i, e in enumerate(engines)]
            counter = iter(range(1000))
            cfg, notes, reasons, outside_ids = align_aux_ids(cfg, firsts, lambda c, ids: [observe(
                src, c, target_path, e, trainer, scratch / f"ids-{next(counter)}", facts, renames, ids)
                for e in engines], in_config=job is None)
            conversion.notes += notes
            conversion.not_faithful += reasons
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    trained = first.trained or _subject(src, target_path, engine, trainer, src, **facts).trainer_layers
    cfg[RECORD_KEY] = conversion_record(trained, engine, src, conversion.form,
                                        [first.path.judged if first.path else str(engine)] +
                                        [e.runner or str(e) for e in engines[1:]])
    conversion.config = cfg
    conversion.renames = renames
    write_copy(src, cfg, dst, link=link, renames=renames)
    if job is not None:
        refused = serve_beside(dst, engine, outside_ids)
        if refused:
            conversion.not_faithful.append(f"{profile(to).label} refused the copy: {refused}")
        else:
            conversion.notes.append(f"wrote {profile(to).label}'s own form of the copy beside it ({job})"
                                    + (f", with aux layer ids {outside_ids} where it reads them" if outside_ids else ""))
    for i, spec in enumerate(engines):
        rep = report(_subject(src, target_path, spec, trainer, dst, **facts))
        causes = [r for r in rep["results"] if r["status"] == "fail" and r.get("root_cause", True)]
        on = "" if i == 0 else f" on {(rep.get('path') or {}).get('label') or spec}"
        conversion.not_faithful += [f"{r['contract']}{on}: {r['summary']}" + (f" (fix: {r['fix']})" if r.get("fix")
                                                                                 else "") for r in causes]
        if i == 0:
            conversion.report = rep
        else:
            conversion.other_reports.append(rep)
    return conversion


def other_paths(engine: EngineSpec, path) -> list[EngineSpec]:
    """ENGINE asking for each path of the release other than the one judged by default (vLLM: the other model
    runner, where the release has two): `convert` proves its copy on every one."""
    if path is None or path.kind != "runner":
        return []
    return [engine.with_runner(r) for r in path.available if r != path.judged]
