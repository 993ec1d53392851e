"""SGLang's model registry without importing every model module at start-up: only the classes a check asks for.

Prevents start-up from being most of every check: importing ``sglang.srt.models.registry`` imports all ~300
model modules (5.3 s of a 9 s one-contract check on 0.5.23) to answer "which class is LlamaForCausalLMEagle3".

Nothing here decides a dispatch. SGLang's own registry has a deferred mode (``SGLANG_EXTERNAL_MODEL_PACKAGE``:
defaults not loaded, ``resolve_model_cls``' "fast startup path" answering registered architectures, the
defaults loaded by the registry itself on the first architecture it does not know). The registry is started
in that mode with an empty package (``deferred_models``), and before a lookup the classes of the asked
architectures are registered from the map {architecture: module} that SGLang's own ``import_model_classes``
produced for this release: computed once per release, cached beside its environment, and recomputed when the
release (its version or its models directory) changes. An architecture missing from the map falls through to
the registry's own full load, as without this module.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from pathlib import Path

DEFERRED_PACKAGE = "contracts.engines.sglang.deferred_models"
_map: dict[str, str] | None = None


def defer_default_models() -> None:
    """Start SGLang's registry in its deferred mode (before ``sglang.srt.models.registry`` is first imported;
    releases without the mode ignore the variable and load every module as before)."""
    os.environ.setdefault("SGLANG_EXTERNAL_MODEL_PACKAGE", DEFERRED_PACKAGE)


def _release_key() -> str:
    """The release and its models directory (module names and sizes): a changed release gets a new map."""
    import sglang.srt.models as models

    version = getattr(sys.modules.get("sglang"), "__version__", None) or "unknown"
    digest = hashlib.sha256()
    for entry in sorted(os.scandir(models.__path__[0]), key=lambda e: e.name):
        if entry.name.endswith(".py"):
            digest.update(f"{entry.name}:{entry.stat().st_size};".encode())
    return f"sglang-{version}-{digest.hexdigest()[:16]}"


def _cache_files(key: str) -> list[Path]:
    """Beside the environment (its prefix), else the user's cache."""
    name = f"registry-{key}.json"
    return [Path(sys.prefix) / "share" / "eagle3-contracts" / name,
            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "eagle3-contracts" / "registry" / name]


def _computed_map() -> dict[str, str]:
    """SGLang's own answer: every architecture ``import_model_classes`` registers, and the module it lives in
    (the registry's full load, paid once per release; the loaded classes are kept for this process)."""
    from sglang.srt.models.registry import ModelRegistry

    ModelRegistry.get_supported_archs()  # loads the defaults (deferred mode) or returns them
    return {arch: getattr(cls, "__module__", cls) for arch, cls in ModelRegistry.models.items() if not isinstance(cls, str)}


def _architecture_map() -> dict[str, str]:
    global _map
    if _map is not None:
        return _map
    key = _release_key()
    files = _cache_files(key)
    for f in files:
        try:
            _map = json.loads(f.read_text())["modules"]
            return _map
        except (OSError, ValueError, KeyError, TypeError):
            continue
    _map = _computed_map()
    for f in files:  # atomically, first place that takes it; a read-only install just recomputes next time
        try:
            f.parent.mkdir(parents=True, exist_ok=True)
            tmp = f.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"release": key, "modules": _map}, sort_keys=True))
            os.replace(tmp, f)
            break
        except OSError:
            continue
    return _map


def register_architectures(architectures) -> None:
    """Register the engine classes of ARCHITECTURES (as their modules' ``EntryClass`` declare them) in SGLang's
    registry, importing only their modules. Unknown names are left to the registry's own fallback."""
    from sglang.srt.models.registry import ModelRegistry

    if isinstance(architectures, str):
        architectures = [architectures]
    wanted = [a for a in architectures or [] if isinstance(a, str) and a not in ModelRegistry.models]
    if not wanted or getattr(ModelRegistry, "_default_models_loaded", True):
        return  # every class is already there (a release without the deferred mode, or after a full load)
    modules = _architecture_map()
    for arch in wanted:
        if arch in ModelRegistry.models or arch not in modules:
            continue
        try:
            module = importlib.import_module(modules[arch])
        except Exception:  # noqa: BLE001  (the registry's own full load skips such a module the same way)
            continue
        entries = getattr(module, "EntryClass", [])
        for cls in entries if isinstance(entries, list) else [entries]:
            ModelRegistry.models.setdefault(cls.__name__, cls)


def all_models() -> dict:
    """Every architecture the registry knows (its full load), for the contract surface."""
    from sglang.srt.models.registry import ModelRegistry

    ModelRegistry.get_supported_archs()
    return dict(ModelRegistry.models)
