"""``eagle3-contracts``: check a draft checkpoint against the engine's real code, or convert one.

    eagle3-contracts check CHECKPOINT [--target DIR] [--engine sglang[==VERSION]|vllm[==VERSION]] [--runner v1|v2]
                           (CHECKPOINT and DIR: a directory, or hf:ORG/NAME[@REVISION] on the Hub, read by
                           ranges; --download fetches every file)
                           [--only IDS] [--format text|json|junit|markdown] [--output FILE] [--strict]
    eagle3-contracts check --examples [--engine sglang==X]   (every bundled trainer-built draft)
    eagle3-contracts matrix CHECKPOINT [--target DIR] --engines sglang==A,vllm==B [--format text|json|markdown]
                            [--all-paths]
    eagle3-contracts convert --to sglang|vllm|openvino SRC DST --target DIR [--engine E==X] [--trainer T] [--verbatim]
    eagle3-contracts doctor URL [--draft DIR|hf:NAME] [--target DIR|hf:NAME] [--probe N] [--format text|json]
                            (a running vLLM, SGLang or llama.cpp server: its measured acceptance beside the verdicts)
    eagle3-contracts build-tiny --trainer speculators|specforge|modelopt|automodel --out DIR [--target DIR]
                                (a tiny draft built by the trainer release installed here; `check DIR` judges it)
    eagle3-contracts accept DRAFT --target DIR [--engine vllm==X|llamacpp==X] [--tokens 3] [--prompts N]
                            [--temperature T] [--no-expectation] [--format text|json] [--output FILE]
                            (acceptance on vLLM's or llama.cpp's own serving loop, CPU, beside the trainer's
                            expectation; exit 1 when it falls short of it beyond noise, or the engine refuses the draft)

Exit codes (``contracts.report.EXIT_CODES``; docs/checking-a-draft.md#exit-codes): 0 every contract judged holds
(warnings allowed unless --strict; for matrix: at least one engine serves the draft as trained; for convert: the
engine serves DST as trained), 1 a contract fails (matrix: no engine serves it; convert: DST is still not served as
trained, and why; accept: a collapse or a gap beyond noise), 2 the input or the invocation is unusable (one line on
stderr, nothing written), 3 nothing fails but a contract was not judged for want of an input the user can give
(--target, the target's weights, --trainer; --allow-not-judged accepts it). ``--engine sglang==X`` for a release other than the one
installed here runs the engine side in that release's cached environment (contracts.environments.engines). Every
verdict is about the code path a GPU deployment of the release takes by default (vLLM: Model Runner V2; SGLang: the
worker its release constructs), and says so; ``--runner v1`` (vLLM) judges the other runner.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from contracts.checkpoint import InputError
from contracts.conventions import TRAINERS
from contracts.engine_profile import convert_targets, default_engine, profiles, serving_engine, serving_engines
from contracts.engine_spec import EngineSpec, EngineSpecError
from contracts.input_bounds import one_line

FORMATS = ("text", "json", "junit", "markdown")
DOWNLOAD_HELP = ("hf:ORG/NAME inputs: fetch every file of the repositories (huggingface_hub's cache) instead of the "
                 "configs, safetensors headers and small tensors read by ranges")


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as for every unusable invocation
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="eagle3-contracts", description="Executable EAGLE-3 draft/engine contracts.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser("check", help="judge a draft checkpoint with every contract")
    c.add_argument("checkpoint", nargs="?", help="draft checkpoint directory, or hf:ORG/NAME[@REVISION] on the Hub")
    c.add_argument("--target", help="target model directory (config.json; weights optional, but llama.cpp needs them), "
                                    "or hf:ORG/NAME[@REVISION]")
    c.add_argument("--trainer", choices=tuple(TRAINERS),
                   help="the library that trained a flat-config draft (for a draft converted by hand: its aux "
                        "layer ids are then read in that trainer's convention)")
    c.add_argument("--engine", default=default_engine(), help="engine under test: " + _engines_help())
    c.add_argument("--runner", choices=_runners(),
                   help="vLLM: judge this model runner instead of the one a GPU deployment of the release takes by "
                        "default (Model Runner V2 since it became the default)")
    c.add_argument("--tp", type=_tp, default=1, help=TP_HELP)
    c.add_argument("--only", help="comma-separated contract ids")
    c.add_argument("--format", choices=FORMATS, default="text")
    c.add_argument("--output", help="write the report to FILE instead of stdout")
    c.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    c.add_argument("--allow-not-judged", action="store_true",
                   help="exit 0 although a contract was not judged for want of an input you could give (--target, "
                        "the target's weights, --trainer); without it such a run exits 3")
    c.add_argument("--examples", action="store_true", help="check every bundled example")
    c.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
    m = sub.add_parser("matrix", help="which engine releases serve a draft as trained (contract × release table)")
    m.add_argument("checkpoint", help="draft checkpoint directory")
    m.add_argument("--target", help="target model directory (config.json; weights optional)")
    m.add_argument("--engines", required=True,
                   help="comma-separated engine specs, e.g. sglang==0.5.9,sglang==0.5.23 (each in its own environment)")
    m.add_argument("--trainer", choices=tuple(TRAINERS),
                   help="the library that trained a flat-config draft (as for check)")
    m.add_argument("--tp", type=_tp, default=1, help=TP_HELP)
    m.add_argument("--only", help="comma-separated contract ids")
    m.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    m.add_argument("--all-paths", action="store_true",
                   help="a row for every path judged (vLLM: both model runners), not only where they disagree")
    m.add_argument("--output", help="write the matrix to FILE instead of stdout")
    m.add_argument("--allow-not-judged", action="store_true",
                   help="exit 0 although a contract was not judged for want of an input you could give (as for check)")
    m.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
    b = sub.add_parser("build-tiny", help="build a tiny draft with the trainer release installed here (then: check DIR)")
    b.add_argument("--trainer", choices=tuple(TRAINERS), required=True)
    b.add_argument("--out", required=True, help="output directory (new, empty, or an earlier build-tiny output)")
    b.add_argument("--target", help="a small target model directory with weights (default: the bundled tiny Llama, "
                                    "made by transformers into DIR/target)")
    b.add_argument("--no-reference", action="store_true",
                   help="skip the trainer's reference forward (forward-parity is then not judged)")
    a = sub.add_parser("accept", help="serve the target with the draft on vLLM's or llama.cpp's own speculative "
                                      "decoding loop (CPU) and report the measured acceptance")
    a.add_argument("draft", help="draft checkpoint directory")
    a.add_argument("--target", required=True, help="target model directory, with its weights")
    a.add_argument("--engine", default=serving_engine(), help="an engine whose serving loop runs on a CPU: " + _engines_help(
        serving_engines()))
    a.add_argument("--runner", choices=_runners(), help="the model runner (an engine with several); a CPU serves "
                                                        "with the one its serving loop names")
    a.add_argument("--tokens", type=int, default=3, help="speculative tokens per round (default 3)")
    a.add_argument("--tp", type=_tp, default=1,
                   help="serve at this tensor-parallel size: the engine's own ranks as processes on this CPU (vLLM)")
    a.add_argument("--prompts", type=int, default=4, help="number of fixed prompts (default 4)")
    a.add_argument("--max-tokens", type=int, default=64, help="tokens generated per prompt (default 64)")
    a.add_argument("--temperature", type=float, default=0.0,
                   help="0 (greedy, default) or e.g. 1: the engine's own rejection sampler then compares the "
                        "draft's distribution with the target's")
    a.add_argument("--no-expectation", dest="expectation", action="store_false",
                   help="skip the trainer's expectation (its own forward on the same prompts, in the trainer "
                        "release's environment, made once)")
    a.add_argument("--format", choices=("text", "json"), default="text")
    a.add_argument("--output", help="write the report to FILE instead of stdout")
    v = sub.add_parser("convert", help="write the copy of a draft that an engine release serves as trained, and "
                                       "judge that copy with every contract")
    v.add_argument("--to", choices=convert_targets(),
                   help="the engine to serve with (default: --engine's)")
    v.add_argument("src", help="draft checkpoint directory (never written)")
    v.add_argument("dst", help="output directory (new or empty)")
    v.add_argument("--target", help="target model directory (config.json; weights optional): the aux layer ids are "
                                    "read off the engine's capture of this target class")
    v.add_argument("--engine", help="the release to convert for: sglang (installed here), sglang==X, vllm or vllm==X "
                                    "(default: the --to engine)")
    v.add_argument("--trainer", choices=tuple(TRAINERS),
                   help="the library that trained a flat-config draft (whose layer convention the ids follow)")
    v.add_argument("--verbatim", action="store_true",
                   help="the naive copy (speculators' config flattened, aux ids as saved), as a hand conversion "
                        "writes it; still judged")
    v.add_argument("--link", action="store_true", help="symlink the weight files instead of copying them")
    v.add_argument("--copy", action="store_true", help=argparse.SUPPRESS)  # the default since convert deploys
    v.add_argument("--format", choices=FORMATS, default="text", help="format of the verdicts on DST")
    d = sub.add_parser("doctor", help="read a running server's own endpoints (release, target, draft, measured "
                                      "acceptance) and judge the same draft with every contract")
    d.add_argument("url", help="the server, http://HOST:PORT (vLLM, SGLang or llama.cpp)")
    d.add_argument("--draft", help="the draft's directory or hf:ORG/NAME, where the server does not name it (llama.cpp; "
                                   "vLLM outside its development mode)")
    d.add_argument("--target", help="the target's directory or hf:ORG/NAME, where the server names none this machine "
                                    "reads (llama.cpp serves a GGUF)")
    d.add_argument("--engine", help="the release, where the server does not say it (e.g. llamacpp==X)")
    d.add_argument("--runner", choices=_runners(), help="the path the server runs on, where it does not say it")
    d.add_argument("--probe", type=int, default=0, metavar="N",
                   help="send N short greedy completions when the server has measured nothing yet (it only reads "
                        "otherwise)")
    d.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
    d.add_argument("--format", choices=("text", "json"), default="text")
    d.add_argument("--output", help="write the diagnosis to FILE instead of stdout")
    d.add_argument("--allow-not-judged", action="store_true",
                   help="exit 0 although the draft could not be judged for want of an input you could give")
    e = sub.add_parser("envs", help="the cached engine and trainer environments and converged builds, with their "
                                    "sizes; remove the old ones")
    e.add_argument("--remove-unused", type=float, metavar="DAYS",
                   help="remove what no run has needed for DAYS days")
    e.add_argument("--remove-superseded", action="store_true",
                   help="remove each environment of a release another environment of it was used after")
    e.add_argument("--remove", nargs="+", metavar="NAME", help="remove these entries (names as listed)")
    e.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    e.add_argument("--format", choices=("text", "json"), default="text")
    return p


def _engines_help(names: tuple[str, ...] | None = None) -> str:
    """``sglang (installed here), sglang==VERSION, vllm (its pinned release, own environment), ...`` from the
    engines' profiles."""
    out = []
    for name, p in profiles().items():
        if names is None or name in names:
            bare = "installed here" if p.in_process else f"its pinned {p.package} release, own environment"
            out += [f"{name} ({bare})", f"{name}==VERSION"]
    return ", ".join(out)


TP_HELP = ("the deployment's tensor-parallel size: rank-consistency runs the engine's own wiring in N ranks (gloo, on "
           "this machine) and says whether they build the drafter one rank builds (default 1: one rank)")


def _tp(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is no tensor-parallel size (1-64)")
    return n


def _runners() -> tuple[str, ...]:
    return tuple(sorted({r for p in profiles().values() for r in p.runners}))


def _engine(text: str, runner: str | None = None) -> EngineSpec:
    """``--engine`` (and ``--runner``) parsed once, here, into the engine path every later step is given: the release
    of an in-process engine installed here, or a release on the package index; else a usage error."""
    from contracts.engines.inprocess import installed_release, judged_in_process

    try:
        spec = EngineSpec.parse(text)
    except EngineSpecError as e:
        raise UsageError(str(e)) from None
    if runner:
        try:
            spec = spec.with_runner(runner)
        except EngineSpecError as e:
            raise UsageError(f"--runner {runner}: {e}") from None
    try:
        release = spec.canonical()
        if release.version is None:
            if installed_release(spec.profile) is None:
                raise UsageError(f"{spec.profile.label} is not installed in this environment: run through `tox "
                                 f"-e check`, or name a release (--engine {spec.name}==X) to use its own cached "
                                 "environment")
        elif not judged_in_process(release):
            from contracts.environments.engines import check_release

            check_release(release)
    except EngineSpecError as e:
        raise UsageError(str(e)) from None
    return spec


def _selected(only: str | None) -> list[str] | None:
    """The contract ids of ``--only`` (None: all), each one a registered contract."""
    from contracts.checks import select

    ids = [c.strip() for c in only.split(",") if c.strip()] if only else None
    try:
        select(ids)
    except KeyError as e:
        raise UsageError(str(e.args[0])) from None
    return ids


def _guard_output(output: str | None, inputs: list[Path]) -> None:
    """``--output`` checked before any engine work (a report that cannot be written after a long check loses its
    verdicts): outside every input directory, not a directory, in an existing directory this user may write."""
    if output is None:
        return
    out = Path(output).resolve()
    for d in inputs:
        d = d.resolve()
        if out == d or d in out.parents:
            raise UsageError(f"{output}: refusing to write inside the checkpoint directory {d}")
    if out.is_dir():
        raise UsageError(f"--output {output}: is a directory; give a file name")
    if out.exists() and not out.is_file():
        raise UsageError(f"--output {output}: exists and is not a regular file")
    if not out.parent.is_dir():
        raise UsageError(f"--output {output}: directory {out.parent} does not exist")
    if not os.access(out if out.exists() else out.parent, os.W_OK):
        raise UsageError(f"--output {output}: not writable")


def _run_check(args) -> int:
    from contracts.report import exit_code, render
    from contracts.judging import report
    from contracts.subject import Subject

    engine = _engine(args.engine, args.runner)
    only = _selected(args.only)
    if args.examples:
        from contracts.bundled import bundled_subjects

        subjects = bundled_subjects(engine=engine)
        if not subjects:
            raise UsageError("no bundled examples (fixtures/manifest.json) next to this installation")
    else:
        if not args.checkpoint:
            raise UsageError("check: give a CHECKPOINT directory (or --examples)")
        _from_hub(args)
        from contracts.builds import read_record, subject_for
        from contracts.bundled import bundled_subject_for

        bundled = None if args.trainer else bundled_subject_for(args.checkpoint, engine, args.target)
        if Path(args.checkpoint).is_dir() and read_record(args.checkpoint) is not None:  # a build-tiny output
            subjects = [subject_for(args.checkpoint, engine, name=args.checkpoint, target=args.target)]
        elif bundled is not None:  # a bundled example: with its trainer's reference forward and ids
            subjects = [bundled]
        else:
            subjects = [Subject(args.checkpoint, args.checkpoint, args.target, trainer=args.trainer,
                                engine=engine)]
    _guard_output(args.output, [s.checkpoint_path for s in subjects]
                  + [s.target_path for s in subjects if s.target_path])
    for s in subjects:  # validate every input before any engine work
        s.checkpoint, s.target, s.conversion_record  # noqa: B018
        s.tp = args.tp
    if args.tp > 1 and len(subjects) > 1 and (not only or "rank-consistency" in only):
        from contracts.judging import observe_ranks_together

        observe_ranks_together(subjects)
    reports = []
    from contracts.hub import record

    for s in subjects:
        rep = record(report(s, only))
        if args.examples:
            rep["name"] = s.name
        reports.append(rep)
    if args.examples:
        return _finish_examples(reports, args)
    _emit(render(reports, args.format), args.output)
    return exit_code(reports, args.strict, args.allow_not_judged)


def _run_matrix(args) -> int:
    """The contracts on one checkpoint under each engine release: the can-i-deploy table."""
    from contracts.tables import matrix
    from contracts.subject import Subject

    engines = [_engine(e.strip()) for e in args.engines.split(",") if e.strip()]
    if not engines:
        raise UsageError("matrix: give at least one engine in --engines")
    name = args.checkpoint  # a Hub draft's rows are named by its hf: spec, not its local copy
    _from_hub(args)
    only = _selected(args.only)
    from contracts.bundled import bundled_subject_for

    def subject(engine: EngineSpec):  # a bundled example's directory: with its trainer's facts and reference, as check has it
        bundled = None if args.trainer else bundled_subject_for(args.checkpoint, engine, args.target)
        return bundled or Subject(name, args.checkpoint, args.target, trainer=args.trainer, engine=engine)

    subjects = {e: [subject(e)] for e in engines}
    for rows in subjects.values():
        rows[0].tp = args.tp
    first = subjects[engines[0]][0]
    _guard_output(args.output, [first.checkpoint_path] + ([first.target_path] if first.target_path else []))
    first.checkpoint, first.target  # noqa: B018  (validate the inputs before any engine work)
    doc = matrix.run(subjects, only)
    from contracts.hub import FETCHED

    fetched = [FETCHED[str(p)] for p in (first.checkpoint_path, first.target_path) if str(p) in FETCHED]
    if fetched:
        doc["hub"] = {f.role: f.to_dict() for f in fetched}
    _emit(matrix.render(doc, args.format, all_paths=args.all_paths), args.output)
    for f in fetched:  # what each row was judged from (in the JSON document: hub)
        print(f"eagle3-contracts: {f.summary()}", file=sys.stderr)
    return matrix.exit_code(doc, args.allow_not_judged)


def _from_hub(args, download: bool | None = None) -> None:
    """``hf:ORG/NAME[@REV]`` checkpoint and target arguments replaced by their local copies (``contracts.hub``)."""
    from contracts.hub import local

    download = getattr(args, "download", False) if download is None else download
    for attr, role in (("checkpoint", "draft"), ("src", "draft"), ("draft", "draft"), ("target", "target")):
        if getattr(args, attr, None):
            setattr(args, attr, local(getattr(args, attr), role=role, download=download))


def _emit(text: str, output: str | None) -> None:
    """TEXT to OUTPUT, or stdout; when OUTPUT cannot be written after all (a full device), the verdicts go to stdout
    and the error line follows (exit 2), so no finished check is lost."""
    if output:
        try:
            Path(output).write_text(text)
            return
        except OSError as e:
            sys.stdout.write(text)
            raise InputError(f"--output {output}: cannot write the report ({e.strerror}); it was printed above") \
                from None
    sys.stdout.write(text)


def _finish_examples(reports: list[dict], args) -> int:
    """The bundled examples pass when every verdict is the documented one (fixtures/expected.json)."""
    from contracts.bundled import documented_key, expected_failures
    from contracts.report import render

    surprises = []
    for rep in reports:
        expected = expected_failures(documented_key(rep), rep.get("tp", 1))
        if expected is None:
            surprises.append(f"{rep['name']}: no documented verdicts for {documented_key(rep)} in "
                             f"fixtures/expected.json")
            continue
        for r in rep["results"]:
            why = expected.get((rep["name"], r["contract"]))
            if (r["status"] == "fail") != bool(why):
                surprises.append(f"{rep['name']} {r['contract']}: {r['status']}, expected {'fail' if why else 'not fail'}")
            elif why:
                r["expected_failure"] = why
    text = render(reports, args.format)
    if args.format == "text":
        notes = [f"  {rep['name']} / {r['contract']}: {r['expected_failure']}" for rep in reports
                 for r in rep["results"] if r.get("expected_failure")]
        if notes:
            text += "\nKnown failures of the examples on this engine (fixtures/expected.json):\n" + "\n".join(notes) + "\n"
        text += ("\nUnexpected: " + "; ".join(surprises) + "\n") if surprises else \
            "\nEvery example got its documented verdicts.\n"
    _emit(text, args.output)
    return 1 if surprises else 0


def _run_convert(args) -> int:
    """Write DST for the engine release, judge it there; exit 1 when it is still not served as trained."""
    from contracts.convert_command import convert
    from contracts.report import render

    engine = _engine(args.engine) if args.engine else None
    to = args.to or (engine.name if engine else None)
    if to is None:
        raise UsageError(f"convert: give --to {'|'.join(convert_targets())} (or --engine NAME==VERSION)")
    if engine is not None and engine.name != to:
        raise InputError(f"--engine {engine} is not a {to} release (--to {to})")
    _from_hub(args, download=True)  # the copy to deploy holds every weight
    c = convert(args.src, args.dst, target=args.target, engine=engine or _engine(to), trainer=args.trainer,
                verbatim=args.verbatim, link=args.link)
    paths = [c.report, *c.other_reports]
    if len(paths) > 1:  # one report per path of the release: named by it
        for rep in paths:
            rep["name"] = f"{c.dst.name} on {(rep.get('path') or {}).get('label') or rep.get('engine_spec')}"
    label = f"{c.report['engine']['name']} {c.report['engine']['version']}" + (
        f" ({' and '.join((r.get('path') or {}).get('label') or '?' for r in paths)})" if len(paths) > 1 else "")
    weights = f"{len(c.renames)} tensor(s) renamed, values unchanged" if c.renames else "unchanged"
    print(f"wrote {c.dst} for {label} ({c.form}): config.json, weight files {'linked' if args.link else 'copied'} "
          f"from {c.src} ({weights})", file=sys.stderr)
    for note in c.notes:
        print(f"  {note}", file=sys.stderr)
    if args.format == "json":  # one document, the default path's, with the release's other paths in it
        _emit(render([{**c.report, "other_paths": c.other_reports}] if c.other_reports else [c.report], "json"), None)
    else:
        _emit(render(paths, args.format), None)
    if c.served_as_trained:
        skipped = sorted({r["contract"] for rep in paths for r in rep["results"] if r["status"] == "skip"})
        print(f"{c.dst}: {label} serves it as trained: no contract fails"
              + (f" (not judged: {', '.join(skipped)})" if skipped else ""), file=sys.stderr)
        return 0
    print(f"{c.dst}: NOT served as trained by {label}:", file=sys.stderr)
    for why in c.not_faithful:
        print(f"  - {why[:600]}", file=sys.stderr)
    return 1


def _run_build_tiny(args) -> int:
    from contracts.report import command_prefix
    from contracts.trainers.common import TrainerAPIChanged
    from contracts.trainers.tiny import BuildRefused, build_tiny

    if args.target and not (Path(args.target) / "config.json").is_file():
        raise InputError(f"{args.target}: no config.json (a target model directory)")
    try:
        record = build_tiny(args.trainer, Path(args.out), Path(args.target) if args.target else None,
                            reference=not args.no_reference)
    except (BuildRefused, TrainerAPIChanged) as e:
        raise UsageError(f"build-tiny: {e}") from None
    print(f"built a tiny {record['trainer']} {record['trainer_version']} draft in {args.out}/draft (target "
          f"{record['target']}, reference {record['reference'] or 'none'}); judge it: {command_prefix()} check "
          f"{args.out} --engine ...", file=sys.stderr)
    return 0


def _run_accept(args) -> int:
    from contracts.accept import AcceptUnavailable, ServingRefused, measure, render_text

    if args.tokens < 1 or args.prompts < 1 or args.max_tokens < 1 or args.temperature < 0:
        raise UsageError("accept: --tokens, --prompts and --max-tokens must be at least 1, --temperature at least 0")
    engine = _engine(args.engine, args.runner)
    _from_hub(args, download=True)  # served: every weight
    _guard_output(args.output, [Path(args.draft), Path(args.target)])
    try:
        result = measure(args.draft, args.target, engine=engine, tokens=args.tokens, prompts=args.prompts,
                         max_tokens=args.max_tokens, temperature=args.temperature, expect=args.expectation, tp=args.tp)
    except AcceptUnavailable as e:
        raise UsageError(str(e)) from None
    except ServingRefused as e:
        print(f"eagle3-contracts: {e}", file=sys.stderr)
        return 1
    import json

    _emit(json.dumps(result, indent=2) + "\n" if args.format == "json" else render_text(result), args.output)
    return 1 if result.get("verdict") else 0


def _run_doctor(args) -> int:
    import json

    from contracts.doctor import diagnose, exit_code, render_text

    if args.probe < 0:
        raise UsageError("doctor: --probe N takes N >= 0")
    _guard_output(args.output, [])
    doc = diagnose(args.url, draft=args.draft, target=args.target, engine=args.engine, runner=args.runner,
                   probe_requests=args.probe, download=args.download)
    _emit(json.dumps(doc, indent=2, default=str) + "\n" if args.format == "json" else render_text(doc), args.output)
    return exit_code(doc, args.allow_not_judged)


def _run_envs(args) -> int:
    """List the environments' cache; with a --remove* option, take those entries out (a running build's is kept)."""
    import json

    from contracts.environments import cache
    from contracts.environments.recipes import envs_root

    root = envs_root()
    found = cache.entries(root)
    chosen: list = []
    if args.remove_unused is not None:
        chosen += cache.unused_for(found, args.remove_unused)
    if args.remove_superseded:
        chosen += cache.superseded(found)
    if args.remove:
        named = {e.name: e for e in found}
        unknown = [n for n in args.remove if n not in named]
        if unknown:
            raise UsageError(f"not in {root}: {', '.join(unknown)} (eagle3-contracts envs lists what is)")
        chosen += [named[n] for n in args.remove]
    chosen = list({e.name: e for e in chosen}.values())
    removed: list = []
    kept: dict[str, str] = {}
    for entry in chosen:
        why = None if args.dry_run else cache.remove(entry)
        if why:
            kept[entry.name] = why
        else:
            removed.append(entry)
    if args.format == "json":
        print(json.dumps({"root": str(root), "entries": [e.to_json() for e in found],
                          "removed" if not args.dry_run else "would_remove": [e.name for e in removed],
                          "kept": kept}, indent=1))
        return 0
    if not chosen:
        print(cache.render(found, root), end="")
    verb = "would remove" if args.dry_run else "removed"
    for entry in removed:
        print(f"{verb} {entry.name} ({(entry.own_bytes) / 2**20:.0f} MB)")
    for name, why in kept.items():
        print(f"kept {name}: {why}")
    return 0


def main(argv=None) -> int:
    from contracts.engines import close_all
    from contracts.memory import return_large_frees

    return_large_frees()
    from contracts.environments.engines import EnvironmentBuildError
    from contracts.engines.remote import WorkerError

    try:
        args = _parser().parse_args(argv)
        return {"check": _run_check, "matrix": _run_matrix, "convert": _run_convert,
                "build-tiny": _run_build_tiny, "accept": _run_accept, "envs": _run_envs,
                "doctor": _run_doctor}[args.command](args)
    except (InputError, UsageError, EnvironmentBuildError, WorkerError) as e:
        print(f"eagle3-contracts: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as e:  # the file system refused a path the user gave (a name too long, a full device, ...)
        where = f"{e.filename}: " if e.filename else ""
        print(f"eagle3-contracts: error: {one_line(f'{where}{e.strerror or e}', 400)}", file=sys.stderr)
        return 2
    except Exception as e:  # a bug in this suite, never the user's input: still one line, still exit 2
        if os.environ.get("EAGLE3_CONTRACTS_DEBUG"):
            raise
        print(f"eagle3-contracts: internal error: {type(e).__name__}: {one_line(str(e), 300)} (set "
              f"EAGLE3_CONTRACTS_DEBUG=1 for the traceback and report it)", file=sys.stderr)
        return 2
    finally:
        close_all()


if __name__ == "__main__":
    sys.exit(main())
