"""The acceptance study: do the verdicts predict what the engine's serving loop measures?

For every draft trained to convergence (fixtures/converged/, ``bundled.converged_subjects``) and, for each contract,
a copy with the break that contract exists for, it records the static verdicts (``check`` on the release's default
path and on the runner ``accept`` serves with) and the mean acceptance length ``accept`` measures on vLLM's own
speculative decoding loop. The agreement is stated as a figure: every variant with a root-cause failure and its
measured drop from the pristine draft; every all-pass and its gap to the pristine draft. ``--beside ENGINE[==X]``
(repeatable) measures every variant on another engine's own loop too (``accept --engine ENGINE``: llama.cpp's
converter and server, OpenVINO GenAI's exporter and pipeline), a column beside the first engine's: where two engines'
loops part on the same broken copy, the cause is in one of them.

    python -m contracts.tables.acceptance_study [--engine vllm==0.32.0] [--beside llamacpp] [--beside openvino]
                                         [--output docs/acceptance.md] [--json FILE]   (run by `tox -e acceptance`)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from contracts.engine_spec import EngineSpec, serving_engine

# A mean acceptance length this far below the pristine draft's counts as a drop (greedy decoding of fixed prompts is
# deterministic; what varies between releases and runners is float rounding, which moves it by far less).
DROP = 0.3


@dataclass(frozen=True)
class Break:
    """One way a deployment breaks a draft, the contract that exists to catch it, and how to make it."""

    name: str
    contract: str
    what: str
    make: Callable[[Path], bool]  # mutates the copy in place; False when the draft has nothing to break this way


def _tensors(directory: Path) -> tuple[dict, dict]:
    from safetensors import safe_open

    with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, (f.metadata() or {})


def _save(directory: Path, tensors: dict, metadata: dict) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(directory / "model.safetensors"), metadata=metadata or {"format": "pt"})


def _edit_tensors(change: Callable[[dict], bool]) -> Callable[[Path], bool]:
    def make(directory: Path) -> bool:
        tensors, metadata = _tensors(directory)
        if not change(tensors):
            return False
        _save(directory, tensors, metadata)
        return True
    return make


def _edit_config(key: str, change: Callable) -> Callable[[Path], bool]:
    """Change ``key`` wherever the draft's config.json holds it (top level or a nested block such as
    ``eagle_config``)."""
    def make(directory: Path) -> bool:
        path = directory / "config.json"
        config = json.loads(path.read_text())
        holders = [config, *(v for v in config.values() if isinstance(v, dict))]
        found = [h for h in holders if isinstance(h.get(key), (list, bool))]
        for holder in found:
            holder[key] = change(holder[key])
        path.write_text(json.dumps(config, indent=2) + "\n")
        return bool(found)
    return make


def _d2t(change: Callable) -> Callable[[dict], bool]:
    def edit(tensors: dict) -> bool:
        if "d2t" not in tensors:
            return False
        change(tensors)
        return True
    return edit


def _zero_d2t(t):
    t["d2t"] = t["d2t"].clone().zero_()


def _absolute_d2t(t):
    import torch

    t["d2t"] = t["d2t"] + torch.arange(t["d2t"].shape[0], dtype=t["d2t"].dtype)


def _drop_d2t(t):
    t.pop("d2t")


def _random_head(tensors: dict) -> bool:
    import torch

    key = next((k for k in tensors if k.endswith("lm_head.weight")), None)
    if key is None:
        return False
    gen = torch.Generator().manual_seed(0)
    head = tensors[key]
    tensors[key] = (torch.randn(head.shape, generator=gen) * float(head.float().std())).to(head.dtype)
    return True


def _layer_prefix_dropped(tensors: dict) -> bool:
    """The decoder layer saved under ``decoder.layers.0.`` (a prefix no engine maps): dropped by the loader."""
    layer = [k for k in tensors if k.startswith(("layers.0.", "midlayer.", "model.layers.0."))]
    for key in layer:
        rest = key.split("layers.0.", 1)[1] if "layers.0." in key else key.split("midlayer.", 1)[1]
        tensors[f"decoder.layers.0.{rest}"] = tensors.pop(key)
    return bool(layer)


BREAKS = [
    Break("pristine", "-", "the draft as its trainer saved it", lambda _d: True),
    Break("d2t zeroed", "d2t-semantics", "d2t all zeros: draft id j proposes target id j",
          _edit_tensors(_d2t(_zero_d2t))),
    Break("d2t absolute", "d2t-semantics", "d2t holds the target ids instead of offsets",
          _edit_tensors(_d2t(_absolute_d2t))),
    Break("d2t missing", "d2t-semantics", "no d2t tensor", _edit_tensors(_d2t(_drop_d2t))),
    Break("aux ids one layer off", "hidden-width", "eagle_aux_hidden_state_layer_ids each + 1",
          _edit_config("eagle_aux_hidden_state_layer_ids", lambda ids: [i + 1 for i in ids])),
    Break("head replaced", "forward-parity", "lm_head replaced by random weights of the same scale",
          _edit_tensors(_random_head)),
    Break("norm_before_residual flipped", "forward-parity", "the config's norm_before_residual negated",
          _edit_config("norm_before_residual", lambda v: not v)),
    Break("layer under a dropped prefix", "key-naming", "the decoder layer saved as decoder.layers.0.*",
          _edit_tensors(_layer_prefix_dropped)),
]


def _verdict(subject) -> dict:
    """``check``'s verdicts for one subject: failing contracts, the root causes among them, the path judged."""
    from contracts.engines.remote import WorkerError
    from contracts.judging import report

    try:
        rep = report(subject)
    except WorkerError as e:  # recorded as such: the study goes on with the next variant
        return {"path": None, "failed": [], "root_causes": [], "skipped": [], "error": str(e)[:300]}
    finally:
        subject.close()
    results = rep["results"]
    return {"path": rep["path"].get("label") if rep.get("path") else None,
            "failed": [r["contract"] for r in results if r["status"] == "fail"],
            "root_causes": [r["contract"] for r in results if r["status"] == "fail" and r.get("root_cause")],
            "skipped": [r["contract"] for r in results if r["status"] == "skip"]}


def _measured(copy: Path, target: Path, engine: EngineSpec, expect: bool) -> dict:
    """What ``accept`` measures for one variant on ENGINE: its figures, the engine's refusal, or the job's error."""
    from contracts.accept import ServingRefused, measure
    from contracts.environments.engines import EnvironmentBuildError

    try:
        measured = measure(copy, target, engine=engine, expect=expect, explain=False)  # the study runs check itself
    except ServingRefused as e:
        return {"refused": str(e)}
    except (RuntimeError, EnvironmentBuildError) as e:  # the job or its environment failed: recorded, never counted
        return {"error": str(e)[:300]}
    out = {k: measured[k] for k in ("mean_acceptance_length", "acceptance_rate_per_position", "rounds",
                                    "accepted_tokens", "draft_tokens", "seconds_wall", "unavailable") if k in measured}
    if expect:
        out["trainer_expectation"] = measured["trainer_expectation"]
    return out


def study(engine: EngineSpec | None = None, breaks: list[Break] = BREAKS, drafts: list[str] | None = None,
          beside: list[EngineSpec] | None = None) -> dict:
    """Every converged draft x break: verdicts (default path, the accept runner) and measured acceptance; with
    BESIDE (other engines), each variant measured on each of their loops too. ENGINE: a release of an engine
    whose serving loop runs on a CPU (default: accept's engine, its pinned release)."""
    from dataclasses import replace

    from contracts.accept import serving_loop

    engine = (engine or EngineSpec(serving_engine())).canonical()
    beside = [b.canonical() for b in beside or []]
    accept_spec = serving_loop(engine).check_spec  # the runner its loop runs on a CPU (vLLM: V1)

    from contracts.bundled import converged_subjects

    rows, start = [], time.perf_counter()
    for base in converged_subjects(engine):
        if drafts and base.name not in drafts:
            continue
        for brk in breaks:
            with tempfile.TemporaryDirectory(prefix="eagle3-contracts-study-") as tmp:
                copy = Path(tmp) / base.checkpoint_path.name
                shutil.copytree(base.checkpoint_path, copy)
                if not brk.make(copy):
                    continue
                row = {"draft": base.name, "break": brk.name, "contract": brk.contract, "what": brk.what}
                for key, spec in (("verdict", engine), ("verdict_v1", accept_spec)):
                    row[key] = _verdict(replace(base, checkpoint_path=copy, engine=spec))
                # the trainer's intent: its pristine draft
                row["acceptance"] = _measured(copy, base.target_path, accept_spec, brk.name == "pristine")
                if "trainer_expectation" in row["acceptance"]:
                    row["trainer_expectation"] = row["acceptance"].pop("trainer_expectation")
                if beside:
                    row["beside"] = {str(b): _measured(copy, base.target_path, b, False) for b in beside}
                rows.append(row)
                print(_line(row), file=sys.stderr, flush=True)
    doc = {"engine": str(engine), "rows": rows, "drop": DROP, "seconds": round(time.perf_counter() - start, 1),
           "agreement": agreement(rows), "paths": paths_of(rows)}
    if beside:
        doc["beside"] = [str(b) for b in beside]
        doc["beside_agreement"] = {str(b): beside_agreement(rows, str(b), str(engine)) for b in beside}
    return doc


def paths_of(rows: list[dict]) -> dict:
    """The paths the two verdict columns were judged on, as the verdicts name them: the release's default path and
    the one its serving loop measured (the same path where the engine has one)."""
    def first(key):
        return next((r[key]["path"] for r in rows if r[key].get("path")), None)

    return {"default": first("verdict"), "measured": first("verdict_v1")}


def _length(row: dict) -> float | None:
    return row["acceptance"].get("mean_acceptance_length")


def _unjudged(row: dict) -> str | None:
    """Why a variant cannot count toward the agreement: ``check`` could not judge it on the runner measured, or the
    measurement failed outside the engine (neither is a prediction or a measurement)."""
    if row["verdict_v1"].get("error"):
        return f"check could not judge it ({row['verdict_v1']['error']})"
    if row["acceptance"].get("error"):
        return f"not measured ({row['acceptance']['error']})"
    return None


def agreement(rows: list[dict]) -> dict:
    """Per variant: predicted (a root-cause contract fails on the runner measured that does not fail on its pristine
    draft) vs measured (refused, or a mean acceptance length more than DROP below the pristine draft's); the count of
    agreements, each disagreement, the variants that cannot be counted (an error is neither a prediction nor a
    measurement; a break whose contract already fails on the pristine draft cannot show whether it is caught), and
    each pristine draft's own verdict beside its acceptance."""
    pristine = {r["draft"]: r for r in rows if r["break"] == "pristine" and not _unjudged(r)}
    out: dict = {"variants": 0, "agree": 0, "disagreements": [], "unjudged": [], "pristine": []}
    for r in pristine.values():
        expected = (r.get("trainer_expectation") or {}).get("mean_acceptance_length")
        out["pristine"].append({"draft": r["draft"], "root_causes": r["verdict_v1"]["root_causes"],
                                "mean_acceptance_length": _length(r), "trainer_expectation": expected,
                                "gap": None if expected is None or _length(r) is None
                                else round(expected - _length(r), 2)})
    for r in rows:
        base = pristine.get(r["draft"])
        base_length = None if base is None else _length(base)
        if r["break"] == "pristine" or base is None or base_length is None:
            continue
        already = base["verdict_v1"]["root_causes"]
        new_causes = [c for c in r["verdict_v1"]["root_causes"] if c not in already]
        why_not = _unjudged(r) or (None if new_causes or r["contract"] not in already else
                                   f"{r['contract']} already fails on the pristine draft")
        if why_not:
            out["unjudged"].append(f"{r['draft']} / {r['break']}: {why_not}")
            continue
        length = _length(r)
        measured_drop = length is None or length < base_length - DROP
        predicted = bool(new_causes)
        r["measured_drop"] = None if length is None else round(base_length - length, 2)
        out["variants"] += 1
        if predicted == measured_drop:
            out["agree"] += 1
        else:
            out["disagreements"].append(f"{r['draft']} / {r['break']}: " + (
                "a root-cause failure, yet acceptance held" if predicted else "all pass, yet acceptance dropped"))
    return out


def beside_agreement(rows: list[dict], other: str, engine: str = "the first engine") -> dict:
    """Where OTHER's loop collapses (more than DROP below its own pristine draft, or refused) on the same variants as
    ENGINE's, and each variant where the two part. A draft whose pristine copy OTHER's loop already serves more than
    DROP below ENGINE's (a break of OTHER's own, which its verdicts name) is not compared: nothing is left to drop."""
    def measured(row, theirs):
        return row["beside"][other] if theirs else row["acceptance"]

    def collapsed(row, base, theirs):
        length = measured(row, theirs).get("mean_acceptance_length")
        return length is None or length < measured(base, theirs)["mean_acceptance_length"] - DROP

    pristine = {r["draft"]: r for r in rows if r["break"] == "pristine"}
    out: dict = {"variants": 0, "same": 0, "parted": [], "not_compared": []}
    for r in rows:
        base = pristine.get(r["draft"])
        if r["break"] == "pristine" or base is None or any(
                measured(base, t).get("error") or measured(base, t).get("mean_acceptance_length") is None or
                measured(r, t).get("error") for t in (False, True)):
            continue
        ours, theirs = (measured(base, t)["mean_acceptance_length"] for t in (False, True))
        if theirs < ours - DROP:
            note = f"{r['draft']}: {other}'s loop serves the pristine draft at {theirs:.2f} ({engine}: {ours:.2f})"
            if note not in out["not_compared"]:
                out["not_compared"].append(note)
            continue
        out["variants"] += 1
        ours, theirs = collapsed(r, base, False), collapsed(r, base, True)
        if ours == theirs:
            out["same"] += 1
        else:
            out["parted"].append(f"{r['draft']} / {r['break']}: " + (
                f"{engine} collapses, {other} holds" if ours else f"{other} collapses, {engine} holds"))
    return out


def _fmt_beside(row: dict, other: str) -> str:
    got = (row.get("beside") or {}).get(other) or {}
    if got.get("error"):
        return "not measured"
    if "refused" in got:
        return "refused: " + got["refused"].split("did not serve the draft: ", 1)[-1][:240].replace("|", "/")
    if got.get("mean_acceptance_length") is None:
        return f"no length ({got.get('unavailable') or 'no draft round'})"
    return f"{got['mean_acceptance_length']:.2f}"


def _fmt_length(row: dict) -> str:
    if row["acceptance"].get("error"):
        return "not measured"
    length = _length(row)
    return "refused" if length is None else f"{length:.2f}"


def _fmt_verdict(v: dict) -> str:
    if v.get("error"):
        return f"check could not judge it ({v['error']})"
    if not v["failed"]:
        return "all pass" + (f" ({', '.join(v['skipped'])} skipped)" if v["skipped"] else "")
    return ", ".join(f"**{c}**" if c in v["root_causes"] else c for c in v["failed"])


def _line(row: dict) -> str:
    return (f"{row['draft']:<24} {row['break']:<30} {_fmt_length(row):>7}  V2: {_fmt_verdict(row['verdict'])}; "
            f"V1: {_fmt_verdict(row['verdict_v1'])}")


def render_markdown(doc: dict) -> str:
    a = doc["agreement"]
    beside = doc.get("beside") or []
    paths = doc.get("paths") or {}
    lines = [
        f"| draft | break | contract it exists for | verdict (default path: {doc['engine']}, "
        f"{paths.get('default') or 'its default path'}) | verdict ({paths.get('measured') or 'the accept path'}, the "
        f"loop measured) | mean acceptance length on {doc['engine']}'s loop | drop from pristine |"
        + "".join(f" {b}'s loop |" for b in beside),
        "|---|---|---|---|---|---|---|" + "---|" * len(beside),
    ]
    for r in doc["rows"]:
        drop = "" if r["break"] == "pristine" else "not counted" if "measured_drop" not in r else (
            "refused" if r["measured_drop"] is None else f"{r['measured_drop']:+.2f}")
        lines.append(f"| {r['draft']} | {r['break']} | {r['contract']} | {_fmt_verdict(r['verdict'])} | "
                     f"{_fmt_verdict(r['verdict_v1'])} | {_fmt_length(r)} | {drop} |"
                     + "".join(f" {_fmt_beside(r, b)} |" for b in beside))
    lines += ["", f"Agreement: {a['agree']} of {a['variants']} broken variants (a root-cause failure on the runner "
              f"measured that the pristine draft does not have, exactly where acceptance dropped by more than "
              f"{doc['drop']} or the engine refused to serve)" + (f"; {len(a['unjudged'])} not counted" if a.get("unjudged") else "") +
              f"; {doc['seconds']:.0f} s for the study."]
    for p in a.get("pristine", []):
        expected = "no trainer expectation yet" if p["trainer_expectation"] is None else \
            f"the trainer's expectation {p['trainer_expectation']:.2f} (gap {p['gap']:+.2f})"
        causes = ", ".join(p["root_causes"]) or "none"
        measured = "refused" if p["mean_acceptance_length"] is None else f"{p['mean_acceptance_length']:.2f}"
        lines.append(f"- pristine {p['draft']}: root causes on the runner measured: {causes}; measured {measured}, "
                     f"{expected}")
    lines += [f"- disagreement: {d}" for d in a["disagreements"]]
    lines += [f"- not counted: {u}" for u in a.get("unjudged", [])]
    for other in beside:
        b = doc["beside_agreement"][other]
        lines += ["", f"{other}'s loop collapses (more than {doc['drop']} below its own pristine draft, or refused) "
                  f"on the same variants as {doc['engine']}'s in {b['same']} of {b['variants']}."]
        lines += [f"- parted: {p}" for p in b["parted"]]
        lines += [f"- not compared: {n}, already collapsed" for n in b.get("not_compared", [])]
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- study:begin -->", "<!-- study:end -->"


def write_doc(doc: dict, path: Path) -> None:
    """Replace the study's table between the markers in ``path`` (the prose around it is kept)."""
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{render_markdown(doc)}{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contracts.tables.acceptance_study")
    parser.add_argument("--engine", help="a release of an engine whose serving loop runs on a CPU (default: accept's "
                                          "engine, its pinned release)")
    parser.add_argument("--draft", action="append", help="only this converged draft (repeatable)")
    parser.add_argument("--beside", action="append", default=[],
                        help="measure every variant on this engine's loop too (llamacpp[==X], openvino[==X]; repeatable)")
    parser.add_argument("--output", type=Path, help="a markdown file whose study markers receive the table")
    parser.add_argument("--json", type=Path, help="the rows as JSON")
    args = parser.parse_args(argv)
    try:
        engine = EngineSpec.parse(args.engine) if args.engine else None
        beside = [EngineSpec.parse(b) for b in args.beside]
    except ValueError as e:
        parser.error(str(e))
    doc = study(engine, drafts=args.draft, beside=beside)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    if args.output:
        write_doc(doc, args.output)
    sys.stdout.write(render_markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
