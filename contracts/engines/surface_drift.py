"""Drift of an engine's EAGLE-3 contract surface between two releases, for every engine alike: each adapter's
``surface()`` reports the aspects its code has (SGLang and vLLM: the draft parameters it builds for the canonical
drafts, which parameter each spelling of a checkpoint key reaches through its ``load_weights``, the draft-config keys
it reads, the target classes that capture aux states; llama.cpp: its converter's EAGLE-3 config keys and special
tensors), and the nightly compares the newest release's against the committed snapshot of the pinned one
(``fixtures/surface/<engine>-<version>.json``). Every aspect either side reports is compared, so an engine whose
surface names other aspects is never reported as "no drift" unread. Prevents a release that renames a parameter or
stops reading a config key from reaching users before anyone reads its diff."""

from __future__ import annotations

import json

from contracts.engine_spec import ENGINE_NAMES


def drift(pinned: dict, newest: dict) -> list[dict]:
    """Every difference between two surfaces: ``{"aspect", "item", "pinned", "newest"}`` (None = absent)."""
    out = []

    def compare(aspect: str, a: dict, b: dict, prefix: str = "") -> None:
        for item in sorted(set(a) | set(b)):
            if a.get(item) != b.get(item):
                out.append({"aspect": aspect, "item": prefix + item, "pinned": a.get(item), "newest": b.get(item)})

    for name in sorted(set(pinned.get("draft_params", {})) | set(newest.get("draft_params", {}))):
        compare("draft_params", pinned["draft_params"].get(name, {}), newest["draft_params"].get(name, {}), f"{name}: ")
    compare("renames", pinned.get("renames", {}), newest.get("renames", {}))
    keys_a, keys_b = pinned.get("config_keys_read", {}), newest.get("config_keys_read", {})
    for name in sorted(set(keys_a) | set(keys_b)):
        a, b = set(keys_a.get(name, [])), set(keys_b.get(name, []))
        for key in sorted(a ^ b):
            out.append({"aspect": "config_keys_read", "item": f"{name}: {key}",
                        "pinned": "read" if key in a else None, "newest": "read" if key in b else None})
    compare("aux_capture", pinned.get("aux_capture", {}), newest.get("aux_capture", {}))
    for aspect in sorted((set(pinned) | set(newest)) - COMPARED_ABOVE):  # every other aspect an engine reports
        old, new = pinned.get(aspect), newest.get(aspect)
        if isinstance(old, dict) or isinstance(new, dict):
            compare(aspect, old if isinstance(old, dict) else {}, new if isinstance(new, dict) else {})
        elif isinstance(old, list) or isinstance(new, list):  # a set of names: each one present on one side only
            seen_old = {json.dumps(x, sort_keys=True) for x in old or []}
            seen_new = {json.dumps(x, sort_keys=True) for x in new or []}
            out += [{"aspect": aspect, "item": json.loads(item) if item.startswith('"') else item,
                     "pinned": "present" if item in seen_old else None,
                     "newest": "present" if item in seen_new else None} for item in sorted(seen_old ^ seen_new)]
        elif old != new:
            out.append({"aspect": aspect, "item": aspect, "pinned": old, "newest": new})
    return out


# the aspects compared one by one above; "engine" names the two releases compared
COMPARED_ABOVE = {"engine", "draft_params", "renames", "config_keys_read", "aux_capture"}


def drift_markdown(pinned: dict, newest: dict, rows: list[dict]) -> str:
    engine = ENGINE_NAMES.get(newest["engine"]["name"], newest["engine"]["name"])
    a, b = pinned["engine"]["version"], newest["engine"]["version"]
    if not rows:
        return f"No drift: {engine} {b}'s EAGLE-3 contract surface equals the committed snapshot of {a}.\n"
    out = [f"{engine} {b} against the committed snapshot of {a}: {len(rows)} difference(s).\n",
           f"| aspect | item | {a} | {b} |", "|---|---|---|---|"]
    for r in rows:
        cells = [r["aspect"], r["item"], json.dumps(r["pinned"]), json.dumps(r["newest"])]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out) + "\n"
