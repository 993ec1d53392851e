"""The engine's own refusals, as every adapter reports them: an observation (a verdict), never a crash.

An engine refusing a readable checkpoint is a finding of the contracts (exit 1), not an input error and not an
internal error of this suite. Each adapter raises these from its engine's own error message; they
cross an engine worker's pipe as themselves (``contracts.engines.worker``).
"""

from __future__ import annotations

from pathlib import Path


from contracts.engine_spec import EngineSpecError  # noqa: F401  (re-exported: the engine seam's errors, in one place)


class EngineBuildError(Exception):
    """The engine itself refused the draft config or could not build the draft class."""


class TargetBuildError(EngineBuildError):
    """The engine itself refused the target config or could not build the target class. ``needs``: the input the user
    could give that the engine lacked (llama.cpp loads a draft only beside the target's weights), else None."""

    def __init__(self, message: str, needs: str | None = None):
        super().__init__(message)
        self.needs = needs


class ReplayError(Exception):
    """This suite's replay of the engine's code failed in the suite itself (an engine API this release does not
    have, a stand-in it cannot use): a gap of the adapter, never a verdict about the draft. The contracts that meet
    it are not judged. Before this, SGLang 0.5.3.post2's wiring replay raised an AttributeError of its own and
    ``embed-head`` read the untouched draft as one whose embedding the engine never wrote (a false fail)."""


def raised_by_engine(exc: BaseException, package: str) -> bool:
    """Whether EXC was raised by the engine's own code (the installed package PACKAGE, e.g. ``sglang``) rather than
    by this suite's: the innermost traceback frame in either decides (torch's and other libraries' frames are
    passed over: the engine's call into them is the engine's; engine source this suite executes statement by
    statement is compiled under the engine's own file name, so it counts as the engine's)."""
    import importlib.util
    import traceback

    spec = importlib.util.find_spec(package)
    engine_dirs = [Path(d).resolve() for d in (spec.submodule_search_locations or [])] if spec else []
    suite_dir = Path(__file__).resolve().parents[1]  # the contracts package
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename).resolve()
        if any(path.is_relative_to(d) for d in engine_dirs):
            return True
        if path.is_relative_to(suite_dir):
            return False
    return False


def engine_words(exc: BaseException) -> str:
    """``Type: message`` of what the engine raised; for a bare ``assert`` (no message) the statement that failed and
    where, from the innermost frame, so a refusal never reads as an empty "AssertionError:"."""
    import traceback

    if str(exc).strip():
        return f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    return f"{type(exc).__name__} at {Path(last.filename).name}:{last.lineno}: {(last.line or '').strip()}"
