"""llama.cpp's environment recipe (its profile's ``install.derive``): the xllamacpp wheel is the server, a CPU build
with no dependencies; its source release carries the llama.cpp tree the wheel was built from, whose converter reads
the HF draft with that tree's own gguf-py (``contracts.engines.llamacpp.tree`` unpacks them)."""

from __future__ import annotations

from contracts.engine_spec import EngineSpec
from contracts.environments.recipes import (CPU_TORCH, Recipe, ReleaseNotFound, always, canonical, requirement_line,
                                       sdist_requirements)

LLAMACPP_TREE = "thirdparty/llama.cpp"
LLAMACPP_CONVERTER_REQUIREMENTS = "requirements/requirements-convert_hf_to_gguf.txt"


def derive(release: EngineSpec) -> Recipe:
    """llama.cpp's environment: what its converter's own requirements file declares (the tree's
    ``requirements/requirements-convert_hf_to_gguf.txt`` in the release's source distribution), torch replaced by the
    CPU wheel and ``gguf`` by the tree's own gguf-py (the index's gguf does not know EAGLE-3), which the environment
    builder installs from the tree with the converter beside it; the xllamacpp wheel itself has no dependencies."""
    from packaging.requirements import Requirement

    version = str(release.version)
    lines = sdist_requirements(release, f"{LLAMACPP_TREE}/{LLAMACPP_CONVERTER_REQUIREMENTS}")
    reqs = [r for r in map(Requirement, lines) if r.marker is None or r.marker.evaluate()]
    if not reqs:
        raise ReleaseNotFound(f"xllamacpp=={version}'s source release has no {LLAMACPP_TREE}/"
                              f"{LLAMACPP_CONVERTER_REQUIREMENTS}: no llama.cpp converter to run")
    declared = {canonical(r.name): requirement_line(r) for r in reqs}
    recipe = Recipe(release.name, version, always(release.profile), declared=declared)
    recipe.lines += [line for name, line in declared.items() if name not in ("torch", "gguf")]
    recipe.notes.append(f"from xllamacpp=={version}'s {LLAMACPP_TREE}/{LLAMACPP_CONVERTER_REQUIREMENTS}: "
                        + ", ".join(declared.values()) + f"; torch {CPU_TORCH}'s CPU wheel, gguf from the tree; the "
                        "tree's C headers beside the converter (the draft-graph replay is compiled against them)")
    return recipe
