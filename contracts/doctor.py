"""``eagle3-contracts doctor URL``: why a running server accepts what it accepts.

It reads what the server reports about itself, through the engine's own endpoints (each engine's reader,
``contracts/engines/<name>/server.py``, named by its profile): the engine and its release, the target, the
speculative method and settings, the draft where the server names it, and the acceptance it measured. Then it judges
the same draft and target with every contract on the same release (``check``'s subject and report) and puts the
measurement beside the verdicts: "accept length 1.02 measured on the server; d2t-semantics fails: ...".

It only reads. With ``--probe N`` it sends N short greedy completions, and only when the server has measured nothing
yet (no draft round counted). A draft or target the server names by a path this machine has is judged there; a name
that is not a local path is read from the Hub (``hf:``); ``--draft`` and ``--target`` say it where the server does not
(llama.cpp names neither; vLLM names its draft only on ``/server_info`` in its development mode).

Exit codes: 1 acceptance collapsed (mean length under ``accept.COLLAPSE``) or a contract fails; 3 nothing fails but
something could not be judged for want of an input you can give (``--draft``); 0 otherwise; 2 the URL is no server,
or a server without speculative decoding (one line).
"""

from __future__ import annotations

import importlib
import re
import urllib.error
from pathlib import Path

from contracts.checkpoint import InputError
from contracts.server_facts import Endpoint, ServerFacts

URL = re.compile(r"^https?://[^/\s]+(:\d+)?/?$")
PROBE_TOKENS = 32
PROBE_VOCAB = 256  # probe prompts draw token ids below this: every vocabulary has them, no tokenizer needed


def read_server(url: str) -> ServerFacts:
    """The first engine whose reader recognises the server at URL; ``InputError`` when none does or none answers."""
    from contracts.engine_profile import profile, server_readers

    if not URL.match(url):
        raise InputError(f"{url}: not a server URL (give http://HOST:PORT)")
    server = Endpoint(url)
    for name, module in server_readers().items():
        try:
            facts = importlib.import_module(module).read(server, profile(name).label)
        except (urllib.error.URLError, OSError, ValueError) as e:  # refused, reset, not HTTP at all
            reason = getattr(e, "reason", e)
            raise InputError(f"{url}: no server answers there ({reason})") from None
        if facts is not None:
            return facts
    raise InputError(f"{url}: answers HTTP but is not a server of {', '.join(profile(n).label for n in server_readers())}"
                     " (none of their endpoints answers as theirs)")


def probe(url: str, facts: ServerFacts, n: int) -> ServerFacts:
    """N short greedy completions through the server's OpenAI-compatible endpoint (the fixed prompts ``accept``
    decodes, as token ids), then the server read again."""
    from contracts.engines.serving_prompts import prompts

    server = Endpoint(url, timeout=300)
    for prompt in prompts(PROBE_VOCAB, n):
        server.post("/v1/completions", {"model": facts.served_name or facts.target, "prompt": prompt,
                                        "max_tokens": PROBE_TOKENS, "temperature": 0})
    return read_server(url)


def diagnose(url: str, *, draft: str | None = None, target: str | None = None, engine: str | None = None,
             runner: str | None = None, probe_requests: int = 0, download: bool = False) -> dict:
    """The server's facts, its measured acceptance, and ``check``'s report on the same draft, target and release."""
    from contracts.accept import COLLAPSE

    facts = read_server(url)
    if not facts.method:
        raise InputError(f"{url}: {facts.label} {facts.version or ''} serves {facts.target} without speculative "
                         "decoding: no acceptance to diagnose".replace("  ", " "))
    probed = 0
    if probe_requests and not facts.drafts and facts.mean_acceptance is None:
        facts, probed = probe(url, facts, probe_requests), probe_requests
    doc: dict = {"url": url, "server": facts.to_dict(), "probed_requests": probed}
    measured = facts.mean_acceptance
    doc["acceptance"] = {"mean_acceptance_length": None if measured is None else round(measured, 3),
                         "rounds": facts.drafts, "per_position": facts.per_position,
                         "collapsed": measured is not None and measured < COLLAPSE,
                         "why_unknown": facts.unknown.get("mean_acceptance") if measured is None else None}
    if measured is None and not facts.unknown.get("mean_acceptance"):
        doc["acceptance"]["why_unknown"] = "the server has not drafted yet (--probe N sends N requests)"
    draft_source = "--draft" if draft else (facts.read.get("draft") and f"the server ({facts.read['draft']})")
    target_source = "--target" if target else f"the server ({facts.read.get('target')})"
    draft = draft or facts.draft
    target = target or (facts.target if facts.target_is_checkpoint else None)
    doc["draft"], doc["target"] = ({"given": draft, "from": draft_source},
                                   {"given": target, "from": target_source if target else None})
    if draft is None:
        doc["check"] = None
        doc["not_judged"] = facts.unknown.get("draft") or "the server does not name its draft: give --draft"
        return doc
    spec = _release(facts, engine, runner)
    doc["check"] = _check(_local(draft, "draft", download), _local(target, "target", download) if target else None,
                          spec, name=draft, tp=facts.tp_size or 1)
    return doc


def _local(given: str, role: str, download: bool) -> str:
    """A path the server (or the user) gave, as this machine reads it: a local directory, else a Hub name."""
    from contracts.hub import REPO_ID, is_hub, local

    if is_hub(given) or Path(given).exists():
        return local(given, role=role, download=download)
    if REPO_ID.match(given.partition("@")[0]):  # a Hub repository, as servers name them
        return local(f"hf:{given}", role=role, download=download)
    raise InputError(f"{given}: the server's {role} is not a directory on this machine nor a Hub name: give "
                     f"--{'draft' if role == 'draft' else 'target'} DIR (a copy of it)")


def _release(facts: ServerFacts, engine: str | None, runner: str | None):
    """The engine path ``check`` judges: the server's engine at its release (``--engine`` where it cannot say)."""
    from contracts.engine_spec import EngineSpec, EngineSpecError

    text = engine or (f"{facts.engine}=={facts.version.split('+')[0]}" if facts.version else None)
    if text is None:
        raise InputError(f"{facts.label}: {facts.unknown.get('version') or 'the server does not say its release'}")
    try:
        spec = EngineSpec.parse(text)
        if spec.name != facts.engine:
            raise InputError(f"--engine {text}: the server is {facts.label}")
        return spec.with_runner(runner or facts.runner) if (runner or facts.runner) else spec
    except EngineSpecError as e:
        raise InputError(str(e)) from None


def _check(draft: str, target: str | None, spec, name: str, tp: int = 1) -> dict:
    """``check`` on the server's draft, target and release, at its tensor-parallel size (rank-consistency)."""
    from contracts.hub import record
    from contracts.judging import report
    from contracts.subject import Subject

    return record(report(Subject(name, Path(draft), Path(target) if target else None, engine=spec, tp=tp)))


def exit_code(doc: dict, allow_not_judged: bool = False) -> int:
    from contracts.report import exit_code as check_exit

    if doc["acceptance"]["collapsed"]:
        return 1
    if doc.get("check") is None:
        return 0 if allow_not_judged else 3
    return check_exit([doc["check"]], False, allow_not_judged)


def render_text(doc: dict) -> str:
    from contracts.report import render_text as check_text

    f, a = doc["server"], doc["acceptance"]
    spec = f" ({f['method']}, {f['speculative_tokens']} speculative tokens)" if f.get("speculative_tokens") else \
        f" ({f['method']})"
    lines = [f"{doc['url']}: {f['label']} {f.get('version') or '(release not reported)'} serving "
             f"{f.get('target') or '?'}{spec}"]
    lines.append("  read from the server: " + ", ".join(f"{k} {v}" for k, v in f["read"].items()))
    for key, why in f["unknown"].items():
        lines.append(f"  not reported: {key}: {why}")
    if doc["probed_requests"]:
        lines.append(f"  probed: {doc['probed_requests']} greedy completions sent (the server had measured nothing)")
    if a["mean_acceptance_length"] is None:
        lines.append(f"  measured on the server: no acceptance yet ({a['why_unknown']})")
    else:
        rounds = f" over {a['rounds']} draft rounds" if a.get("rounds") else ""
        per = f" (per position {', '.join(f'{x:.2f}' for x in a['per_position'])})" if a.get("per_position") else ""
        lines.append(f"  measured on the server: mean acceptance length {a['mean_acceptance_length']:.2f}{rounds}{per}"
                     + (": a collapse, the engine rejects (almost) every draft token" if a["collapsed"] else ""))
    lines.append(f"  draft: {doc['draft']['given'] or 'unknown'} (from {doc['draft']['from'] or '-'}); target: "
                 f"{doc['target']['given'] or '-'} (from {doc['target']['from'] or '-'})")
    if doc.get("check") is None:
        lines.append(f"  NOT JUDGED: {doc['not_judged']}")
        return "\n".join(lines) + "\n"
    rep = doc["check"]
    failing = [r for r in rep["results"] if r["status"] == "fail"]
    causes = [r for r in failing if r.get("root_cause", True)] or failing
    measured = ("accept length " + f"{a['mean_acceptance_length']:.2f} measured on the server"
                if a["mean_acceptance_length"] is not None else "no acceptance measured yet")
    if causes:
        lines.append(f"  diagnosis: {measured}; " + "; ".join(f"{r['contract']} fails: {r['summary']}"
                                                             for r in causes))
    elif a["collapsed"]:
        lines.append(f"  diagnosis: {measured}, yet every contract judged holds on this path: the cause is outside "
                     "what the contracts check (the serving settings, the prompts, the target's weights)")
    else:
        lines.append(f"  diagnosis: {measured}; every contract judged holds")
    lines.append("")
    lines.append(check_text([rep]))
    return "\n".join(lines)
