"""A subject of the contracts: one draft checkpoint and its target, with the engine observations about
them gathered lazily (once per subject, shared by every contract) through an engine adapter.

The user's directories are only read. A speculators checkpoint, which SGLang cannot load as saved, is
judged on SGLang after the conversion a user would apply (``contracts.hand_conversion``), written to a private temporary
directory that is removed on ``close()``.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from contracts.checkpoint import Checkpoint, InputError, text_config
from contracts.engine_spec import EngineSpec, default_engine
from contracts.refusals import EngineRefused, NotADraft, TargetRefused
from contracts.trainer_profile import nested
from contracts.registry import Result


@dataclass
class Subject:
    name: str
    checkpoint_path: Path
    target_path: Path | None = None
    intended_ids: list[int] | None = None  # the target ids the trainer's vocab mapping selected, when known
    trainer: str | None = None  # the library that trained it, when known (else inferred from the format)
    trainer_aux_ids: list[int] | None = None  # the aux layer ids it trained on, in the trainer's convention
    reference_path: Path | None = None  # the trainer's own reference forward (inputs + step-0 logits), if any
    # the engine under test (``sglang``: installed here or pinned; ``vllm==X``), judged on the path a GPU deployment
    # of that release takes by default; ``vllm==X:v1`` / ``:v2`` asks for a model runner (default: the default engine)
    engine: EngineSpec = field(default_factory=lambda: EngineSpec(default_engine()))
    # the transformers hidden_states indices the trainer trained on, when its build recorded them (build-tiny: read
    # off the installed release's own capture, which for some releases differs from the trainer's convention)
    trainer_hidden_states: list[int] | None = None
    # the directory the engine reads when it is not the checkpoint itself: a ``convert`` output of this checkpoint
    # (the verdicts are then about that copy; the trained facts, such as its config and aux ids, stay the checkpoint's)
    served_as: Path | None = None
    # why no trainer reference is made on the spot for this subject, when one must not be (a bundled draft whose
    # manifest records none: its verdicts are documented, and the fast tier runs without trainer environments)
    no_reference_because: str | None = None
    # the tensor-parallel size of the deployment judged (``--tp``): rank-consistency runs the engine's wiring in that
    # many ranks; every other contract is judged on one rank, which rank-consistency says the ranks together equal
    tp: int = 1

    def __post_init__(self):
        if not isinstance(self.engine, EngineSpec):  # parsed once where it came in (the CLI, the plugin)
            raise TypeError(f"Subject.engine is an EngineSpec, not {self.engine!r} (EngineSpec.parse it where it comes in)")
        self.checkpoint_path = Path(self.checkpoint_path)
        self.target_path = None if self.target_path is None else Path(self.target_path)
        self.served_as = None if self.served_as is None else Path(self.served_as)
        self._tmp: str | None = None

    @cached_property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint.open(self.checkpoint_path)

    @cached_property
    def target(self) -> Checkpoint | None:
        if self.target_path is None:
            return None
        return Checkpoint.open_target(self.target_path)

    @property
    def trainer_format(self) -> str:
        return self.checkpoint.trainer_format

    @cached_property
    def engine_dir(self) -> Path:
        """The directory the engine reads: the checkpoint itself, a ``convert`` output of it, or (speculators on
        SGLang) the verbatim conversion a user would write by hand."""
        if self.served_as is not None:
            return self.served_as
        if not self.converted:
            return self.checkpoint_path
        from contracts.hand_conversion import convert_to_sglang

        self._tmp = tempfile.mkdtemp(prefix="eagle3-contracts-")
        return convert_to_sglang(self.checkpoint_path, Path(self._tmp) / self.engine_name)

    @cached_property
    def adapter(self):
        """The ``contracts.engines.Engine`` that makes this subject's observations."""
        from contracts.engines import engine_for

        return engine_for(self.engine)

    @cached_property
    def path(self):
        """The engine's ``PathObservation``: the code path a GPU deployment of this release takes for this draft by
        default (vLLM's model runner, SGLang's speculative worker), found from the release's own code, and the one
        judged (``engine`` asks for another with ``:v1`` / ``:v2``)."""
        return self.adapter.path(self.engine_dir, self.target_path, self.engine.runner)

    @property
    def runner(self) -> str | None:
        """The vLLM runner every observation of this subject is made on (None for SGLang)."""
        return self.path.judged if self.path.kind == "runner" else None

    @staticmethod
    def _observed(ask):
        """``(ASK(), None)``, or ``(None, the refusal)`` when the engine's own code refused: ``TargetRefused`` for the
        target (an engine that loads a draft only beside its target: llama.cpp's converter), else ``EngineRefused``."""
        from contracts.engines.errors import EngineBuildError, TargetBuildError

        try:
            return ask(), None
        except TargetBuildError as e:
            return None, TargetRefused(str(e), e.needs)
        except EngineBuildError as e:
            return None, EngineRefused(str(e))

    @cached_property
    def _load(self):
        return self._observed(lambda: self.adapter.load(self.engine_dir, self.target_path, runner=self.runner))

    @property
    def load(self):
        """The engine's ``LoadObservation``; raises ``EngineRefused`` when the engine cannot build the draft,
        ``TargetRefused`` when it loads a draft only beside a target it cannot build, and ``NotADraft`` when what it
        builds is no EAGLE-3 draft class."""
        observation, refusal = self._load
        if refusal is not None:
            raise refusal
        if observation.is_eagle3_draft is False:
            engine = observation.engine
            raise NotADraft(f"{engine['name']} {engine['version']} dispatches architectures "
                            f"{observation.config.get('architectures')} to {observation.draft_class}, which is no "
                            f"EAGLE-3 draft class")
        return observation

    @property
    def engine_name(self) -> str:
        return self.engine.name

    @property
    def converted(self) -> bool:
        """The engine reads a converted copy (a speculators checkpoint on an engine that cannot dispatch the saved
        format: its profile's ``flat_config_only``, SGLang), not the directory as saved (vLLM reads speculators'
        format natively)."""
        return self.served_as is None and nested(self.trainer_format) and self.engine.profile.flat_config_only

    def judged_as(self) -> dict | None:
        """Which form of the checkpoint the verdicts are about: a ``convert`` output, the hand (verbatim) conversion
        of a speculators checkpoint on SGLang, or a speculators checkpoint as saved (flat configs as saved: None)."""
        if self.served_as is not None:
            return {"form": "after convert", "directory": str(self.served_as)}
        if not nested(self.trainer_format):
            return None
        if self.converted:
            return {"form": "converted", "conversion": "verbatim", "command": self.convert_command(),
                    "to_deploy": self.convert_command(verbatim=False)}
        return {"form": "as saved", "why": f"{self.engine.profile.label} reads speculators' config format natively"}

    def convert_command(self, verbatim: bool = True) -> str:
        """The hand conversion the verdicts judge (``--verbatim``), or the faithful one to deploy."""
        import shlex

        from contracts.hub import shown
        from contracts.report import command_prefix

        src, stem = shown(self.checkpoint_path)
        if verbatim:
            return (f"{command_prefix()} convert --to {self.engine_name} --verbatim {shlex.quote(src)} "
                    f"{shlex.quote(stem + '-' + self.engine_name)}")
        target = shlex.quote(shown(self.target_path)[0]) if self.target_path else "TARGET"
        engine = f" --engine {self.engine}" if self.engine.version else ""
        return (f"{command_prefix()} convert --to {self.engine_name} {shlex.quote(src)} "
                f"{shlex.quote(stem + '-' + self.engine_name)} --target {target}{engine}")

    @cached_property
    def saved_config_obs(self):
        """The engine's ``ConfigObservation`` of the checkpoint as saved (only asked for a converted one): can the
        engine dispatch it at all without the conversion?"""
        from contracts.config_facts import trained_config

        return self.adapter.config(self.checkpoint_path, trained_config(self.checkpoint.config), {}, None)

    @cached_property
    def conversion_record(self) -> dict | None:
        """What a copy written by ``convert`` records of itself (its trainer, the ids it trained with and the
        ``hidden_states`` they are, the release it was made for): its ids are that release's, no longer the trainer's
        convention, so the trained layers are read from here. Raises InputError when it contradicts ``--trainer``."""
        from contracts.checkpoint import CONVERSION_RECORD_KEY as RECORD_KEY

        record = self.checkpoint.config.get(RECORD_KEY)
        if not isinstance(record, dict):
            return None
        recorded = record.get("trainer")
        if self.trainer and recorded and self.trainer != recorded:
            raise InputError(f"{self.checkpoint_path}/config.json: this copy records that {recorded} trained it "
                             f"({RECORD_KEY}, written by eagle3-contracts convert), but --trainer says {self.trainer}")
        return record

    @property
    def trainer_name(self) -> str | None:
        from contracts.conventions import TRAINERS

        if self.trainer:
            return self.trainer
        recorded = (self.conversion_record or {}).get("trainer")
        if recorded:
            return recorded
        return self.trainer_format if self.trainer_format in TRAINERS else None

    @property
    def trainer_basis(self) -> tuple[str, bool]:
        """Why ``trainer_name`` is what it is, and whether that is a guess from the checkpoint's form (a flat config
        does not name its trainer: ``midlayer.*`` tensors are SpecForge's SGLang export, and a Model Optimizer
        export carries its own switches in ``eagle_config``, but another writer can produce either)."""
        if self.trainer:
            return "given by --trainer", False
        if (self.conversion_record or {}).get("trainer"):
            return "recorded in the copy's config by convert", False
        from contracts.trainer_profile import PROFILES

        recognised = PROFILES.get(self.trainer_format)
        if recognised is not None and recognised.form is not None:
            return recognised.form.basis, recognised.form.guessed
        return "no trainer named, recorded or evident from the checkpoint", True

    @cached_property
    def trainer_layers(self) -> dict | None:
        """The aux layers the trainer trained on: its ids, where they came from, and as transformers
        ``hidden_states`` indices (None when the trainer or the target's layer count is unknown)."""
        from contracts.conventions import hf_indices, trainer_layer_ids

        trainer = self.trainer_name
        n = text_config(self.target.config).get("num_hidden_layers") if self.target is not None else None
        if not trainer or not n:
            return None
        record = self.conversion_record or {}
        if self.trainer_aux_ids is not None:
            ids, source = list(self.trainer_aux_ids), "the trainer's record"
        elif record.get("trainer_aux_ids") is not None:
            ids, source = list(record["trainer_aux_ids"]), f"the conversion record ({record.get('source')})"
        else:
            ids, source = trainer_layer_ids(trainer, self.checkpoint.config, int(n))
        if self.trainer_hidden_states is not None:
            return {"name": trainer, "ids": ids, "ids_from": source, "hf_hidden_states": list(self.trainer_hidden_states),
                    "hf_hidden_states_from": "the build record (the installed release's own capture)"}
        if record.get("trained_hidden_states") is not None:
            return {"name": trainer, "ids": ids, "ids_from": source,
                    "hf_hidden_states": list(record["trained_hidden_states"]),
                    "hf_hidden_states_from": f"the conversion record: this copy was made by convert for "
                                             f"{record.get('made_for')}, its ids are that engine's"}
        return {"name": trainer, "ids": ids, "ids_from": source, "hf_hidden_states": hf_indices(trainer, ids)}

    @cached_property
    def aux(self):
        """The engine's ``AuxCaptureObservation`` for this draft and target (None without a target)."""
        if self.target_path is None:
            return None
        from contracts.engines.errors import EngineBuildError, TargetBuildError

        self.load  # noqa: B018  (an engine refusal is reported once, by the contract that meets it first)
        wanted = self.trainer_layers["hf_hidden_states"] if self.trainer_layers else None
        try:
            return self.adapter.aux(self.engine_dir, self.target_path, wanted, runner=self.runner)
        except TargetBuildError as e:  # (a subclass of EngineBuildError: first)
            raise TargetRefused(str(e), e.needs) from None
        except EngineBuildError as e:  # a load the engine stopped part-way (llama.cpp's converter): no draft built
            raise EngineRefused(str(e)) from None

    @cached_property
    def config_obs(self):
        """The engine's ``ConfigObservation``: dispatch, honoured switches, applied rope (never raises a refusal)."""
        import json

        from contracts.config_facts import switches_in, trained_config

        from contracts.engines.errors import EngineBuildError, TargetBuildError

        flat = json.loads((self.engine_dir / "config.json").read_text())
        original = self.checkpoint.config
        try:
            return self.adapter.config(self.engine_dir, trained_config(original), switches_in(flat, original),
                                       self.target.config if self.target is not None else None)
        except TargetBuildError as e:  # (a subclass of EngineBuildError: first)
            raise TargetRefused(str(e), e.needs) from None
        except EngineBuildError as e:  # dispatched, then refused while building (e.g. a missing config key)
            raise EngineRefused(str(e)) from None

    def ignored_switches(self) -> list[str]:
        """Switches the checkpoint sets that the engine ignores while computing the other value's math (the
        ``config`` contract's verdict on them)."""
        from contracts.config_facts import mismatched_switches

        return mismatched_switches(self, self.config_obs)

    @cached_property
    def trainer_switches(self) -> tuple[dict, str] | None:
        """What each EAGLE-3.1 switch means to the trainer (``trainers.common.switch_semantics``, observed on its own
        forward in its environment) and where that was observed: this checkpoint's reference forward, else the
        bundled draft of the same trainer that recorded it (its release said); None when no trainer is known."""
        import json

        from contracts.manifest import manifest

        if self.reference_path is not None and Path(self.reference_path).is_file():
            from safetensors import safe_open

            try:
                with safe_open(str(self.reference_path), framework="pt") as f:
                    meta = dict(f.metadata() or {})
            except Exception:  # noqa: BLE001  (a malformed reference is forward-parity's to report)
                meta = {}
            if meta.get("switch_semantics"):
                return (json.loads(meta["switch_semantics"]),
                        f"{meta.get('trainer')} {meta.get('version')} (its reference forward)")
        trainer = self.trainer_name
        recorded = [e for _, e in sorted(manifest().items())
                    if e.get("trainer") == trainer and (e.get("reference") or {}).get("switch_semantics")]
        if not recorded:
            return None
        release = recorded[0]["trainer_version"]
        merged = {}
        for entry in recorded:
            if entry["trainer_version"] == release:
                merged.update(entry["reference"]["switch_semantics"])
        return merged, (f"{trainer} {release} (observed when the bundled drafts were built; the release that trained "
                        f"this draft may differ)")

    def later_step_switches(self) -> list[str]:
        """Switches the checkpoint sets on whose effect the engine begins at draft step 1 (the state it feeds the
        next step), as the ``config`` contract observed by flipping each."""
        from contracts.config_facts import switches_from_step_1

        return switches_from_step_1(self.config_obs)

    def rope_scaling_warning(self) -> str | None:
        """``config``'s warning that the draft's config scales its rope where the target's does not, if it has one."""
        from contracts.config_facts import draft_only_rope_scaling

        return draft_only_rope_scaling(self)

    @cached_property
    def reference(self):
        """The trainer's reference forward ``forward-parity`` replays (``contracts.references.Reference``): the
        bundled or recorded one, else one made on the spot by the trainer's own forward on these weights."""
        from contracts.references import reference_for

        return reference_for(self)

    @cached_property
    def forward(self):
        """The engine's ``ForwardObservation`` replaying the trainer's reference (needs a reference: ``reference``),
        wired to the target the reference was computed with (the synthetic one, for a target without weights)."""
        return self.forward_for(self.reference)

    def forward_for(self, reference):
        """The engine's ``ForwardObservation`` replaying REFERENCE (a ``contracts.references.Reference`` with a path):
        the subject's own, or, for a draft whose trainer is unknown, each known trainer's."""
        from contracts.engines.errors import EngineBuildError, TargetBuildError

        self.load  # noqa: B018  (an engine refusal is reported once, by the contract that meets it first)
        try:
            return self.adapter.forward(self.engine_dir, reference.replay_target, reference.path, runner=self.runner)
        except TargetBuildError as e:  # (a subclass of EngineBuildError: first)
            raise TargetRefused(str(e), e.needs) from None
        except EngineBuildError as e:
            raise EngineRefused(str(e)) from None

    def engine_info(self) -> dict:
        return self.adapter.info()

    @cached_property
    def _embed_head(self):
        return self._observed(lambda: self.adapter.embed_head(self.engine_dir, self.target_path, runner=self.runner))

    @cached_property
    def _ranks(self):
        return self._observed(
            lambda: self.adapter.ranks([self.engine_dir], self.target_path, self.tp, runner=self.runner)[0])

    @property
    def ranks(self):
        """The engine's ``RankObservation``: the drafter as each of ``tp`` ranks builds it; raises ``EngineRefused``
        when a rank's engine code refuses, ``ReplayError`` when the ranks cannot be run here."""
        from contracts.engines.errors import EngineBuildError, TargetBuildError
        from contracts.engines.ranks import raised_as

        observation, refusal = self._ranks
        if refusal is None and observation.error is not None:  # this draft, in a set of ranks that built others too
            refusal = raised_as(observation.error_kind, observation.error)
            if isinstance(refusal, TargetBuildError):
                refusal = TargetRefused(str(refusal), None)
            elif isinstance(refusal, EngineBuildError):
                refusal = EngineRefused(str(refusal))
        if refusal is not None:
            raise refusal
        return observation

    @property
    def embed_head(self):
        """The engine's ``WiringObservation`` (the draft after the worker's embed/head wiring to the target);
        raises ``EngineRefused`` / ``TargetRefused`` when the engine cannot build the draft / the target."""
        self.load  # noqa: B018  (a refused or non-draft build is reported once, by the contract that meets it first)
        observation, refusal = self._embed_head
        if refusal is not None:
            raise refusal
        return observation

    def run(self, only: list[str] | None = None) -> list[Result]:
        """The selected contracts (default all) judged on this subject (``contracts.judging.judge``)."""
        from contracts.judging import judge

        return judge(self, only)

    def result(self, contract_id: str, only: list[str] | None = None) -> Result:
        """One contract's result from a run of ``only`` (default all) on this subject, run once and kept: its
        root-cause marking then sees every other contract's verdict (the pytest plugin's items ask one each)."""
        key = tuple(only or ())
        cache = self.__dict__.setdefault("_runs", {})
        if key not in cache:
            cache[key] = {r.contract: r for r in self.run(only)}
        return cache[key][contract_id]

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


__all__ = ["EngineRefused", "InputError", "NotADraft", "Subject", "TargetRefused"]
