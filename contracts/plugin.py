"""pytest plugin: ``pytest -m contracts [--checkpoint DIR --target DIR]...`` runs every registered contract
over every subject, one test item per (contract, subject), ids like ``key-naming[specforge]``.

Subjects: each ``--checkpoint`` (paired in order with ``--target``; a ``build-tiny`` output is judged with its
record's target, trainer and reference), each ``--build-with TRAINER`` (a tiny draft built first, once, by the
release of that trainer installed here: the pre-merge check of a training repository), else the bundled fixtures
when the run asks for them (this repository's conftest does), once per ``--engine`` (default: the SGLang installed
here; ``sglang==X``, ``vllm`` or ``vllm==X`` run the engine side in that release's cached environment and
the ids gain ``@sglang==X`` / ``@vllm==X``). Engine observations are gathered once per subject per process and shared by its contracts,
so the suite is safe and cheap under pytest-xdist.
"""

from __future__ import annotations

import pytest

from contracts.engine_spec import EngineSpec
from contracts.registry import FAIL, SKIP, WARN

_SUBJECTS_KEY = pytest.StashKey[list]()
_EXPECTED_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("eagle3-contracts", "EAGLE-3 draft/engine contracts")
    group.addoption("--checkpoint", action="append", default=[], metavar="DIR",
                    help="draft checkpoint to run every contract on, a directory or hf:ORG/NAME[@REV] (repeatable)")
    group.addoption("--target", action="append", default=[], metavar="DIR",
                    help="target model directory (or hf:ORG/NAME[@REV]) for the --checkpoint at the same position "
                         "(repeatable)")
    group.addoption("--trainer", action="append", default=[], metavar="NAME",
                    help="speculators, specforge or modelopt: the trainer of the --checkpoint at the same position")
    group.addoption("--build-with", action="append", default=[], metavar="TRAINER", dest="contracts_build_with",
                    help="speculators, specforge or modelopt: build a tiny draft with the release installed here "
                         "(build-tiny) and judge it; the contracts its bundled twin is documented to fail are "
                         "xfail(strict), so only a change in verdicts fails the run (repeatable)")
    group.addoption("--accept", action="store_true", default=False, dest="contracts_accept",
                    help="with --build-with: also train a draft to convergence on the converged target with the "
                         "installed release (the bundled fixtures/converged/TRAINER's builder) and add accept[TRAINER], "
                         "which fails when vLLM's serving loop accepts it less than that bundled draft minus noise")
    group.addoption("--build-dir", default=None, metavar="DIR", dest="contracts_build_dir",
                    help="where --build-with builds (kept: DIR/TRAINER); default a temporary directory, removed")
    group.addoption("--contracts-only", default=None, metavar="IDS",
                    help="comma-separated contract ids to run (default: all)")
    group.addoption("--contracts-results", default=None, metavar="FILE",
                    help="write every contract item's result (subject, engine, status, summary) to FILE as JSON; "
                         "under pytest-xdist the controller gathers them (contracts.tables.compatibility reads it)")
    group.addoption("--engine", action="append", default=[], metavar="SPEC", dest="contracts_engine",
                    help="engine under test: sglang (installed here), sglang==X, vllm or vllm==X (each in its own "
                         "cached environment), judged on the path a GPU deployment of that release takes by default; "
                         "vllm==X:v1 / :v2 judges that model runner; repeatable: every subject is judged on each")
    group.addoption("--allow-not-judged", action="store_true", default=False, dest="contracts_allow_not_judged",
                    help="a contract not judged for want of an input you could give (--target, the target's weights, "
                         "--trainer) is a skip; without it, an item that fails saying which input would judge it")
    group.addoption("--tp", default=1, type=int, metavar="N", dest="contracts_tp",
                    help="the deployment's tensor-parallel size: rank-consistency is judged on N ranks of each engine "
                         "(default 1: one rank, where it is not judged)")
    group.addoption("--runner", default=None, choices=("v1", "v2"), dest="contracts_runner",
                    help="judge every vLLM engine of this run on this model runner instead of its release's default")


def engines(config) -> list[EngineSpec]:
    """The engine paths of this run, parsed here once (``--engine``, default the engine installed here; ``--runner``
    applied to the ones that name no runner and whose engine has it); a usage error names a bad one."""
    from contracts.engine_spec import EngineSpecError, default_engine

    try:
        specs = [EngineSpec.parse(s) for s in config.getoption("contracts_engine") or [default_engine()]]
    except EngineSpecError as e:
        raise pytest.UsageError(str(e)) from None
    runner = config.getoption("contracts_runner", None)
    if not runner:
        return specs
    return [s.with_runner(runner) if runner in s.profile.runners and s.runner is None else s for s in specs]


def _named(name: str, engine: EngineSpec) -> str:
    from contracts.engine_spec import default_engine

    return name if engine == EngineSpec(default_engine()) else f"{name}@{engine.canonical()}"


def pytest_configure(config):
    _CONFIG["config"] = config
    config.addinivalue_line("markers", "contracts: a registered contract judged on one subject (checkpoint + target)")
    checkpoints, targets = config.getoption("checkpoint"), config.getoption("target")
    if len(targets) > len(checkpoints):
        raise pytest.UsageError("--target given without a matching --checkpoint")
    from contracts.subject import Subject

    from contracts.builds import read_record, subject_for, twin_expectations
    from contracts.checkpoint import InputError
    from contracts.input_bounds import one_line

    from contracts.hub import local

    subjects, expected = [], {}
    builds = _builds(config)
    given = list(zip(checkpoints, targets + [None] * (len(checkpoints) - len(targets))))
    try:  # hf:ORG/NAME[@REV] made local once (contracts.hub): the name and the reproduce line keep the spec
        where = {spec: local(spec, role=role) for pair in given for spec, role in zip(pair, ("draft", "target"))
                 if spec}
    except InputError as e:
        raise pytest.UsageError(one_line(str(e))) from None
    for engine in engines(config):
        for i, (given_ckpt, given_target) in enumerate(given):
            ckpt, target = where[given_ckpt], where.get(given_target)
            base = given_ckpt.rstrip("/").split("/")[-1]
            name = _named(f"{i}-{base}" if len(checkpoints) > 1 else base, engine)
            try:
                record = read_record(ckpt)
            except InputError as e:
                raise pytest.UsageError(str(e)) from None
            if record is not None:  # a build-tiny output: its record's facts, its twin's documented verdicts
                subjects.append(subject_for(ckpt, engine, name=name, target=target))
                _REPRODUCE[name] = ["--checkpoint", given_ckpt, *(["--target", given_target] if target else []),
                                    *_engine_args(engine)]
                expected.update({(name, c): why for c, why in (twin_expectations(record, engine) or {}).items()})
                continue
            trainers = config.getoption("trainer")
            trainer = trainers[i] if i < len(trainers) else None
            subjects.append(Subject(name, ckpt, target, trainer=trainer, engine=engine))
            _REPRODUCE[name] = ["--checkpoint", given_ckpt, *(["--target", given_target] if target else []),
                                *(["--trainer", trainer] if trainer else []), *_engine_args(engine)]
        for subject in subjects:  # every input validated once, before any engine work: one line, not one per item
            try:
                subject.checkpoint, subject.target  # noqa: B018
            except InputError as e:
                raise pytest.UsageError(one_line(str(e))) from None
        for trainer, built in builds.items():
            if "directory" in built:
                name = _named(f"build-{trainer}", engine)
                subjects.append(subject_for(built["directory"], engine, name=name))
                _REPRODUCE[name] = ["--build-with", trainer, *_engine_args(engine)]
                record = read_record(built["directory"])
                expected.update({(name, c): why for c, why in (twin_expectations(record, engine) or {}).items()})
    config.stash.setdefault(_SUBJECTS_KEY, [])[:0] = subjects
    config.stash.setdefault(_EXPECTED_KEY, {}).update(expected)


_BUILDS_KEY = pytest.StashKey[dict]()
# subject name -> the options that judge it again (its --checkpoint/--target/--trainer or --build-with, its --engine)
_REPRODUCE: dict[str, list[str]] = {}


def _engine_args(engine: EngineSpec) -> list[str]:
    from contracts.engine_spec import default_engine

    return [] if engine == EngineSpec(default_engine()) else ["--engine", str(engine.canonical())]


def reproduce(subject_name: str, engine: EngineSpec, contract_id: str) -> str:
    """The pytest command that judges this item again, as it was asked for (a bundled subject, which this
    repository's conftest adds: the contract on every bundled subject under that engine)."""
    import shlex

    args = [*_REPRODUCE.get(subject_name, _engine_args(engine)), "--contracts-only", contract_id]
    tp = _CONFIG["config"].getoption("contracts_tp", 1) if "config" in _CONFIG else 1
    args += ["--tp", str(tp)] if tp > 1 else []
    return " ".join(["pytest -m contracts", *(shlex.quote(str(a)) for a in args)])


def _builds(config) -> dict:
    """trainer -> {"directory": the build-tiny output} or {"error": the one line it failed with}, for each
    ``--build-with``: built once, by the xdist controller (or the only process), before any worker starts; the
    workers are handed the directories (``pytest_configure_node``)."""
    trainers = config.getoption("contracts_build_with")
    if not trainers:
        if config.getoption("contracts_accept"):
            raise pytest.UsageError("--accept measures what --build-with TRAINER trains: give --build-with")
        return {}
    if _BUILDS_KEY in config.stash:
        return config.stash[_BUILDS_KEY]
    if hasattr(config, "workerinput"):
        return config.workerinput.get("eagle3_contracts_builds", {})
    import shutil
    import tempfile
    from pathlib import Path

    from contracts.trainers.common import TrainerAPIChanged
    from contracts.trainers.tiny import TRAINERS, BuildRefused, build_tiny

    unknown = [t for t in trainers if t not in TRAINERS]
    if unknown:
        raise pytest.UsageError(f"--build-with {unknown[0]}: not a trainer (one of {', '.join(TRAINERS)})")
    root = config.getoption("contracts_build_dir")
    if root is None:
        root = tempfile.mkdtemp(prefix="eagle3-contracts-builds-")
        config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))
    builds = {}
    for trainer in dict.fromkeys(trainers):
        out = Path(root) / trainer
        try:
            record = build_tiny(trainer, out)
            builds[trainer] = {"directory": str(out), "trainer_version": record["trainer_version"]}
        except (BuildRefused, TrainerAPIChanged) as e:
            builds[trainer] = {"error": f"build-tiny: {e}"}
        if config.getoption("contracts_accept"):
            builds[trainer]["converged"] = _converged_build(trainer, Path(root) / f"{trainer}-converged")
    config.stash[_BUILDS_KEY] = builds
    return builds


def _converged_build(trainer: str, out) -> dict:
    """``--accept``: the installed release's draft trained to convergence (``contracts.trainers.converged_build``),
    as {"directory": ...} or {"error": its one line}."""
    from contracts.trainers.converged_build import build_in_subprocess
    from contracts.trainers.tiny import BuildRefused

    try:
        record = build_in_subprocess(trainer, out)
    except BuildRefused as e:
        return {"error": str(e)}
    # a build reused from the cache says which (contracts.trainers.converged_cache: same trainer code and inputs)
    return {"directory": str(out), "trainer_version": record["trainer_version"],
            "reused": (record.get("reused") or {}).get("key", "")}


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """(pytest-xdist) hand each worker the controller's builds, so a draft is built once per run."""
    builds = node.config.stash.get(_BUILDS_KEY, None)
    if builds is not None:
        node.workerinput["eagle3_contracts_builds"] = builds


def add_subjects(config, subjects, expected_failures: dict | None = None) -> None:
    """Add ``Subject``s unless the user named checkpoints (or builds) on the command line. ``expected_failures`` maps
    (subject name, contract id) to the reason a contract is known to fail there (on the subjects' engine):
    those items are marked xfail(strict=True), so both a fix and a new break are noticed."""
    if not config.getoption("checkpoint") and not config.getoption("contracts_build_with"):
        expected = {}
        for s in subjects:
            name = _named(s.name, s.engine)
            expected.update({(name, cid): why for (n, cid), why in (expected_failures or {}).items() if n == s.name})
            s.name = name
        config.stash.setdefault(_SUBJECTS_KEY, []).extend(subjects)
        config.stash.setdefault(_EXPECTED_KEY, {}).update(expected)


class ContractFailed(Exception):
    pass


class NotJudged(Exception):
    """A contract left unjudged on a draft the user named, for want of an input they could give: never a silent pass."""


class ContractItem(pytest.Item):
    def __init__(self, *, contract_id: str, subject, **kwargs):
        super().__init__(**kwargs)
        self.contract_id = contract_id
        self.subject = subject  # shared by the subject's contracts: its engine observations are made once
        self.add_marker("contracts")

    def runtest(self):
        from contracts.engines import close_others
        from contracts.checks import select

        close_others(self.subject.engine)  # items come grouped by engine release: the previous one is done

        self.user_properties += [("subject", self.subject.name.split("@")[0]), ("engine", str(self.subject.engine.canonical())),
                                 ("contract", self.contract_id)]
        (contract,) = select([self.contract_id])
        if self.contract_id == "rank-consistency" and "_ranks" not in self.subject.__dict__:
            from contracts.judging import observe_ranks_together

            # this engine's subjects in one set of ranks (most of a rank observation is starting the ranks)
            observe_ranks_together([s for s in self.config.stash.get(_SUBJECTS_KEY, [])
                                    if s.engine == self.subject.engine and "_ranks" not in s.__dict__])
        only = self.config.getoption("contracts_only")
        result = self.subject.result(self.contract_id, [c.strip() for c in only.split(",")] if only else None)
        # what the results file keeps, not the evidence: a report crosses to the xdist controller through execnet,
        # which cannot send an int below -2**31 (an IR's never-written d2t buffer put such ids in forward-parity's)
        self.user_properties.append(("result", {k: v for k, v in result.to_dict().items()
                                                if k in ("status", "summary", "root_cause", "follows_from")}))
        from contracts.judging import path_record

        self.user_properties.append(("path", path_record(self.subject)))
        if result.status == FAIL:
            raise ContractFailed(result)
        if result.status == SKIP and result.needs and self.subject.name in _REPRODUCE and \
                not self.config.getoption("contracts_allow_not_judged"):
            raise NotJudged(f"{result.contract} not judged on {self.subject.checkpoint_path}: {result.summary}; "
                            f"give {result.needs} (or --allow-not-judged to accept this)")
        if result.status == SKIP:
            pytest.skip(result.summary)
        if result.status == WARN:
            import warnings

            warnings.warn(f"{contract.id}[{self.subject.name}]: {result.summary}", UserWarning, stacklevel=1)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ContractFailed):
            from contracts.report import _evidence_lines

            result = excinfo.value.args[0]
            from contracts.report import cause

            from contracts.report import path_label
            from contracts.judging import path_record

            engine = self.subject.engine_info()
            lines = [f"{result.contract}{cause(result.to_dict())} failed on {self.subject.checkpoint_path} "
                     f"({engine['name']} {engine['version']} on {path_label({'path': path_record(self.subject)})}): "
                     f"{result.summary}"]
            lines += _evidence_lines(result.evidence)
            if result.fix:
                lines.append(f"fix: {result.fix}")
            lines.append(f"reproduce: {reproduce(self.subject.name, self.subject.engine, result.contract)}")
            return "\n".join(lines)
        from contracts.checkpoint import InputError

        if isinstance(excinfo.value, NotJudged):
            return str(excinfo.value)
        if isinstance(excinfo.value, InputError):
            return f"unusable input: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return str(self.subject.checkpoint_path), None, f"{self.contract_id}[{self.subject.name}]"


class BuildFailed(Exception):
    pass


class BuildItem(pytest.Item):
    """``build[TRAINER]``: the ``--build-with`` build itself, one item (in JUnit too): it fails with build-tiny's one
    line when the installed trainer's API moved so that a builder step cannot run, the news a pre-merge check is for."""

    def __init__(self, *, trainer: str, built: dict, **kwargs):
        super().__init__(**kwargs)
        self.trainer, self.built = trainer, built
        self.add_marker("contracts")

    def runtest(self):
        self.user_properties += [("trainer", self.trainer)] + [(k, v) for k, v in self.built.items()]
        if "error" in self.built:
            raise BuildFailed(self.built["error"])

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, BuildFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.built.get("directory", "build-tiny"), None, f"build[{self.trainer}]"


class AcceptItem(BuildItem):
    """``accept[TRAINER]`` (``--build-with TRAINER --accept``): the installed release's converged draft and the bundled
    one, measured in one run on vLLM's serving loop (greedy, the same prompts); it fails when the build's mean
    acceptance length falls more than ``accept.NOISE`` below the bundled draft's: a training change that serves
    fine at step 0 yet no longer converges to a draft the engine accepts."""

    def __init__(self, *, engine: EngineSpec, **kwargs):
        super().__init__(**kwargs)
        self.engine = engine

    def runtest(self):
        from pathlib import Path

        from contracts.accept import AcceptUnavailable, ServingRefused
        from contracts.trainers.converged_build import compare_to_twin

        self.user_properties += [("trainer", self.trainer), ("engine", str(self.engine)),
                                 ("build_reused", self.built.get("reused", ""))]
        if "error" in self.built:
            raise BuildFailed(self.built["error"])
        try:
            verdict = compare_to_twin(Path(self.built["directory"]) / "draft", self.trainer, self.engine)
        except (AcceptUnavailable, ServingRefused) as e:
            raise BuildFailed(str(e)) from None
        self.user_properties += [(f"{who}_mean_acceptance_length", verdict[who]) for who in ("build", "bundled")]
        if verdict["failure"]:
            raise BuildFailed(f"{self.trainer} {self.built.get('trainer_version')}: {verdict['failure']}")

    def reportinfo(self):
        return self.built.get("directory", "converged build"), None, f"accept[{self.trainer}]"


def _accept_engine(config) -> EngineSpec:
    """The release ``accept[...]`` measures on: the run's first release of the engine accept measures by default
    (``serving_engine``: vLLM), else its pinned one, on the runner its serving loop runs on a CPU (vLLM: V1)."""
    from contracts.accept import serving_loop
    from contracts.engine_spec import serving_engine

    for spec in engines(config):
        if spec.name == serving_engine():
            return serving_loop(spec).check_spec
    return serving_loop(EngineSpec(serving_engine())).check_spec


class ContractsCollector(pytest.Collector):
    def collect(self):
        from contracts.checks import select

        group = _group_suffix(self.config)
        for trainer, built in _builds(self.config).items():
            yield BuildItem.from_parent(self, name=f"build[{trainer}]", trainer=trainer, built=built)
            if "converged" in built:
                engine = _accept_engine(self.config)
                yield AcceptItem.from_parent(self, name=f"accept[{trainer}]{group(f'accept-{engine}')}",
                                             trainer=trainer, built=built["converged"], engine=engine)
        only = self.config.getoption("contracts_only")
        ids = [c.strip() for c in only.split(",")] if only else None
        expected = self.config.stash.get(_EXPECTED_KEY, {})
        tp = self.config.getoption("contracts_tp", 1)
        for subject in self.config.stash.get(_SUBJECTS_KEY, []):
            subject.tp = tp
            for contract in select(ids):
                if not ids and contract.applies is not None and not contract.applies(subject):
                    continue  # (rank-consistency on one rank)
                # `-n N --dist loadgroup` gives each engine release one worker (one environment, one engine start,
                # both of its vLLM runners)
                name = f"{contract.id}[{subject.name}]{group(str(subject.engine.release()))}"
                item = ContractItem.from_parent(self, name=name, contract_id=contract.id, subject=subject)
                why = expected.get((subject.name, contract.id))
                if why:
                    item.add_marker(pytest.mark.xfail(reason=why, strict=True, raises=ContractFailed))
                yield item


def _group_suffix(config):
    """``name -> "@name"`` under pytest-xdist's ``--dist loadgroup`` (else ``""``): the group of an item, written into
    its node id as the scheduler reads it (``...]@group``). pytest-xdist's own ``xdist_group`` marker sets the private
    ``item._nodeid``, which pytest 9.2 no longer reads (its ids live in ``Node._id``): every group was then silently
    ignored and each engine release started on every worker. Naming the item is public API on every pytest."""
    # pytest-xdist sets ``option.loadgroup`` on its workers (where ``dist`` is reset to "no"), where items are collected
    loadgroup = getattr(config.option, "loadgroup", False) or config.getoption("dist", None) == "loadgroup"
    return (lambda name: f"@{name}") if loadgroup else (lambda _name: "")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Append the contract items before marker/keyword selection (``-m contracts``) runs."""
    if not config.stash.get(_SUBJECTS_KEY, None) and not config.getoption("contracts_build_with"):
        return
    collector = ContractsCollector.from_parent(session, name="contracts", nodeid="contracts")
    items.extend(collector.collect())


_RESULTS_KEY = pytest.StashKey[list]()
_CONFIG: dict = {}  # this process's config, for the report hook (which is handed reports only)


def pytest_runtest_logreport(report):
    """Gather each contract item's result (on the xdist controller too: user properties travel with reports)."""
    props = dict(report.user_properties)
    config = _CONFIG.get("config")
    if config is None or not config.getoption("contracts_results") or "contract" not in props:
        return
    if report.when == "call" or (report.when == "setup" and report.failed):
        record = {"subject": props["subject"], "engine": props["engine"], "contract": props["contract"]}
        if "result" in props:
            result = props["result"]
            record.update(status=result["status"], summary=result["summary"],
                          root_cause=result.get("root_cause"), follows_from=result.get("follows_from"))
            if props.get("path"):
                record["path"] = {k: props["path"].get(k) for k in ("kind", "label", "is_default", "default_why")}
        else:  # the engine could not be started or made: the reason, in one line (the exception's own message)
            crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
            message = getattr(crash, "message", None) or (str(report.longrepr).strip().splitlines() or ["?"])[-1]
            record.update(status="error", summary=message[:500])
        config.stash.setdefault(_RESULTS_KEY, []).append(record)


def pytest_sessionfinish(session):
    config = session.config
    path = config.getoption("contracts_results", None)
    if path and not hasattr(config, "workerinput"):  # the controller (or a run without xdist) writes the file
        import json

        records = sorted(config.stash.get(_RESULTS_KEY, []), key=lambda r: (r["engine"], r["subject"], r["contract"]))
        with open(path, "w") as f:
            json.dump(records, f, indent=1)


def pytest_unconfigure(config):
    from contracts.engines import close_all

    for subject in config.stash.get(_SUBJECTS_KEY, []):
        subject.close()
    close_all()
