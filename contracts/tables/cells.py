"""The cells every compatibility table shares (the engine-release table and the trainer-release grid): how a
release row is labelled with the path it judged, and what one verdict cell says.
"""

from __future__ import annotations

from contracts.engine_spec import EngineSpec


def verdict_cell(cells: dict | None) -> str:
    """One table cell: does the release serve the draft as trained (and if not, which root-cause contracts fail)."""
    if not cells:
        return "-"
    failed = sorted(c for c, v in cells.items() if v["status"] == "fail" and not v.get("follows_from"))
    errors = sorted(c for c, v in cells.items() if v["status"] == "error")
    if failed:
        return f"**no**: {', '.join(failed)}" + (f" (not judged: {', '.join(errors)})" if errors else "")
    if errors:
        return f"not judged: {', '.join(errors)}"
    if all(v["status"] == "skip" for v in cells.values()):  # e.g. the engine cannot build the target at all
        reason = next(iter(cells.values())).get("summary", "").removeprefix("not judged: ")
        return f"not judged: {reason[:160]}".replace("|", "/")
    return "yes"


def release_label(spec: EngineSpec, entry: dict | None = None) -> str:
    """``SGLang 0.5.9``; a vLLM row names its runner: ``vLLM 0.32.0, Model Runner V2 (the GPU default)``."""
    label, runner = spec.label, spec.runner
    if "the GPU wheel" in ((entry or {}).get("build") or {}).get("recipe", ""):  # recipes.derive_gpu_wheel's note
        label += " (GPU wheel on the CPU torch: no forward runs, so forward-parity and config's switches are not judged)"
    path = (entry or {}).get("path") or {}
    if path.get("kind") == "runner":
        return f"{label}, {path['label']}" + (" (the GPU default)" if path.get("is_default") else "")
    if path.get("kind") == "worker":  # the speculative worker the release constructs by default
        return f"{label}, {path['label']}"
    return f"{label}, Model Runner {runner.upper()}" if runner else label
