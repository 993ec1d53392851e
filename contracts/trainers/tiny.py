"""``eagle3-contracts build-tiny``: a tiny EAGLE-3 draft built by whichever release of a trainer is installed in this
environment, through the same builders as the bundled fixtures (``contracts/trainers/<trainer>.py``), with the
trainer's own step-0 reference forward and a record of how it was built.

Why: a pull request in a training library changes how drafts are built or saved; before merge, the engines must
still serve what the new code saves. The builders detect the installed release's API (which construction path,
reload path, forward signature, export function it has) instead of reading its version number; a step that cannot
run names the function or argument (``TrainerAPIChanged``, one line, exit 2).

    DIR/draft/                        what the trainer saved: the checkpoint an engine loads
    DIR/target/                       the tiny Llama target (8 layers, hidden 64, 2 heads of 32: a head size vLLM's
                                      CPU kernel takes), made by transformers with the fixtures' seed, unless --target
    DIR/reference.safetensors         the trainer's own forward (step 0, later TTT steps) on the target's hidden states (forward-parity)
    DIR/eagle3-contracts-build.json   trainer, release, functions called, aux ids and the hidden states trained on,
                                      the target ids selected, the bundled fixture whose verdicts it should get

``eagle3-contracts check DIR`` (and ``pytest -m contracts --checkpoint DIR``) judges it with the record's target,
trainer and reference; ``pytest -m contracts --build-with TRAINER`` builds and judges in one step.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
import tempfile
import traceback
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from contracts.trainer_profile import PROFILES
from contracts.builds import RECORD
from contracts.trainers.common import LLAMA_TINY_HD32, TinyTarget, TrainerAPIChanged, repo_relative

# trainer -> (its distribution, the builder module, the bundled fixture built the same way)
TRAINERS = PROFILES  # name -> TrainerProfile: its distribution, builder module and bundled twin


class BuildRefused(RuntimeError):
    """build-tiny cannot run here (the trainer is not installed, or DIR holds something else): one line, exit 2."""


def trainer_version(trainer: str) -> str:
    try:
        return version(TRAINERS[trainer].distribution)
    except PackageNotFoundError:
        raise BuildRefused(f"{TRAINERS[trainer].distribution} is not installed in this environment (build-tiny builds with "
                           f"the release installed where it runs)") from None


def _refuse_foreign(out: Path) -> None:
    """DIR must be empty, missing, or an earlier build-tiny output; anything else is refused, untouched."""
    if out.exists() and not out.is_dir():
        raise BuildRefused(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / RECORD).is_file():
        raise BuildRefused(f"{out} is not empty and holds no earlier build-tiny output ({RECORD}): give a new "
                           f"directory")


def _prepare(out: Path) -> None:
    """An earlier build-tiny output in DIR is replaced."""
    if out.is_dir() and any(out.iterdir()):
        for name in ("draft", "target", "reference.safetensors", RECORD):
            path = out / name
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)


def tiny_target(out: Path) -> TinyTarget:
    """The bundled head-size-32 tiny Llama, made by transformers from the fixtures' seed into DIR/target."""
    from contracts.trainers.target import build_target

    target = TinyTarget(LLAMA_TINY_HD32.name, out / "target", LLAMA_TINY_HD32.geometry,
                        stored_as=str((out / "target").resolve()))
    build_target(target, record=False)
    return target


def _api_change(trainer: str, release: str, error: BaseException) -> TrainerAPIChanged:
    """A builder step that failed on the installed release's API, as one line: what failed and where the builder
    called it (ImportError: a function or module that moved; TypeError: an argument; AttributeError: an attribute)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "/contracts/trainers/" in f.filename]
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno}: {frames[-1].line})" if frames else ""
    if isinstance(error, ModuleNotFoundError) and error.name and error.name.split(".")[0] != TRAINERS[trainer].import_name:
        top = error.name.split(".")[0]
        if top != error.name and importlib.util.find_spec(top) is not None:  # there, but without that module
            try:
                installed = f"{top} {version(top)}"
            except PackageNotFoundError:
                installed = top
            return TrainerAPIChanged(f"{trainer} {release} imports {error.name}, which the installed {installed} "
                                     f"does not have{where}")
        return TrainerAPIChanged(f"{trainer} {release} needs {error.name}, which is not installed here{where}")
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    return TrainerAPIChanged(f"{trainer} {release}: {type(error).__name__}: {message}{where}")


def build_tiny(trainer: str, out: Path, target: Path | None = None, reference: bool = True) -> dict:
    """Build the tiny draft with the installed ``trainer`` into ``out``; returns the record written beside it."""
    if trainer not in TRAINERS:
        raise BuildRefused(f"unknown trainer {trainer!r} (one of {', '.join(TRAINERS)})")
    out = Path(out)
    _refuse_foreign(out)
    release = trainer_version(trainer)
    _prepare(out)
    chosen = TinyTarget.from_directory(target) if target is not None else tiny_target(out)
    module = importlib.import_module(TRAINERS[trainer].builder)
    with tempfile.TemporaryDirectory(prefix=f"eagle3-contracts-build-{trainer}-") as scratch:
        try:
            details = module.build_tiny(Path(scratch), chosen, out / "draft",
                                        out / "reference.safetensors" if reference else None)
        except TrainerAPIChanged as e:
            raise TrainerAPIChanged(f"{trainer} {release}: {e}") from None
        except (ImportError, AttributeError, TypeError, KeyError) as e:
            raise _api_change(trainer, release, e) from None
    ref = details.pop("reference", None)
    details.pop("target", None)  # the fixture builders' name for the target; the record's is its directory
    record = {
        "trainer": trainer,
        "trainer_version": release,
        "draft": "draft",
        "target": "target" if target is None else repo_relative(Path(target)),
        "reference": "reference.safetensors" if ref else None,
        "trained_hidden_states": ref.get("trained_hidden_states") if ref else None,
        "bundled_twin": TRAINERS[trainer].bundled_twin,
        "python": sys.version.split()[0],
        **details,
        "reference_functions_called": ref.get("functions_called") if ref else None,
    }
    (out / RECORD).write_text(json.dumps(record, indent=1, default=str) + "\n")
    return record


def main(argv=None) -> int:
    """``python -m contracts.trainers.tiny TRAINER DIR`` (what the trainer-release sweep runs in each trainer's
    environment; ``eagle3-contracts build-tiny`` is the same with the CLI's options)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m contracts.trainers.tiny")
    p.add_argument("trainer", choices=sorted(TRAINERS))
    p.add_argument("out")
    p.add_argument("--target")
    p.add_argument("--no-reference", action="store_true")
    args = p.parse_args(argv)
    try:
        record = build_tiny(args.trainer, Path(args.out), args.target, not args.no_reference)
    except (BuildRefused, TrainerAPIChanged) as e:
        print(f"build-tiny: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"trainer": record["trainer"], "trainer_version": record["trainer_version"],
                      "reference": record["reference"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
