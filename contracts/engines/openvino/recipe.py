"""OpenVINO GenAI's environment recipe (its profile's ``install.derive``): the ``openvino-genai`` wheel with what it
declares (its tokenizers, which pin OpenVINO itself), and the exporter that writes the IR it serves: optimum-intel, the
newest release whose own declared ``openvino`` admits the OpenVINO this release pairs with, on the CPU torch. What the
exporter's path imports beyond its declarations (``--trust-remote-code``'s imports) is added by the environment
builder's closure, as for every engine."""

from __future__ import annotations

from contracts.engine_spec import EngineSpec
from contracts.environments.recipes import (Recipe, ReleaseNotFound, always, canonical, declared_requirements,
                                            distribution_metadata, distribution_versions, release_metadata,
                                            requirement_line)

EXPORTER = "optimum-intel"
# what the exporter's EAGLE-3 classes import when transformers loads them as remote code (its
# ``optimum.exporters.openvino.model_patcher``, which ``--trust-remote-code`` checks): declared by no requirement, and
# resolved here together with the exporter's own pins (added alone, an unpinned one moves huggingface-hub past
# the transformers the exporter pins)
REMOTE_CODE_IMPORTS = ("diffusers", "einops")


def paired_openvino(version: str) -> str:
    """The OpenVINO release an openvino-genai release pairs with: its first three numbers (2026.4.1.0 -> 2026.4.1)."""
    return ".".join(version.split(".")[:3])


def exporter_for(openvino: str) -> tuple[str, str]:
    """(the newest exporter release whose declared ``openvino`` admits OPENVINO, that declaration)."""
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version

    for candidate in distribution_versions(EXPORTER):
        try:
            if Version(candidate).is_prerelease:
                continue
        except InvalidVersion:
            continue
        declared = [Requirement(line) for line in distribution_metadata(EXPORTER, candidate)]
        base = [r for r in declared if canonical(r.name) == "openvino" and r.marker is None]
        if base and base[0].specifier.contains(openvino, prereleases=True):
            return candidate, str(base[0])
    raise ReleaseNotFound(f"no {EXPORTER} release on the package index declares support for openvino {openvino}")


def derive(release: EngineSpec) -> Recipe:
    """openvino-genai==VERSION's declared requirements, the exporter paired with its OpenVINO, the CPU torch."""
    version = str(release.version)
    reqs = declared_requirements(release_metadata(release), release.profile)
    declared = {canonical(r.name): requirement_line(r) for r in reqs}
    openvino = paired_openvino(version)
    exporter, admits = exporter_for(openvino)
    recipe = Recipe(release.name, version, always(release.profile), declared=declared)
    # GenAI's library links one OpenVINO exactly (2026.3.0.0: libopenvino.so.2630); its tokenizers' ``~=`` admits the
    # next patch release (2026.3.1), which the resolver takes and GenAI then cannot load
    recipe.lines += list(declared.values()) + [f"openvino=={openvino}", f"{EXPORTER}=={exporter}", *REMOTE_CODE_IMPORTS]
    recipe.notes.append(f"from openvino-genai=={version}'s Requires-Dist: {', '.join(declared.values()) or '(none)'}; "
                        f"openvino=={openvino}, the release its library links; "
                        f"its exporter {EXPORTER}=={exporter}, the newest release declaring {admits} (this release "
                        f"pairs with openvino {openvino}), with what its remote-code classes import ({', '.join(REMOTE_CODE_IMPORTS)}); torch {always(release.profile)[0].split('==')[1]}'s CPU wheel")
    return recipe
