"""The engine's own refusals, as every adapter reports them: an observation (a verdict), never a crash.

An engine refusing a readable checkpoint is a finding of the contracts (exit 1), not an input error and not an
internal error of this suite (DESIGN.md). Each adapter raises these from its engine's own error message; they
cross an engine worker's pipe as themselves (``contracts.engines.worker``).
"""

from __future__ import annotations


class EngineBuildError(Exception):
    """The engine itself refused the draft config or could not build the draft class."""


class TargetBuildError(EngineBuildError):
    """The engine itself refused the target config or could not build the target class."""
