"""Shared test fixtures: the bundled trainer-built drafts, and broken copies of them made in tmp dirs."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
TARGET = FIXTURES / "targets" / "llama-tiny"
DRAFTS = {
    "specforge": FIXTURES / "drafts" / "specforge",
    "speculators-default": FIXTURES / "drafts" / "speculators-default",
    "speculators-train": FIXTURES / "drafts" / "speculators-train",
    "speculators-kimi-k25": FIXTURES / "drafts" / "speculators-kimi-k25",
}
KIMI_TARGET = FIXTURES / "targets" / "kimi-k25-tiny"
# the head-dim-32 twins (every engine's CPU attention takes 32) and the trainers' reference forwards
HD32_TARGET = FIXTURES / "targets" / "llama-tiny-hd32"
HD32 = {name: FIXTURES / "drafts" / f"{name}-hd32" for name in ("specforge", "speculators-default", "speculators-train")}
REFERENCES = FIXTURES / "references"
OLD_ENGINE = "sglang==0.5.9"  # the old release CI runs besides the pinned one (its environment is built once)


def tree_digest(path: Path) -> dict[str, str]:
    """sha256 of every file (and the set of names) under ``path``: to prove nothing was written there."""
    out = {}
    for p in sorted(Path(path).rglob("*")):
        rel = str(p.relative_to(path))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def pytest_configure(config):
    """The session's engine workers fork from one zygote per engine release (``contracts.engines.zygote``): each
    check a test starts, in this process, an xdist worker or a CLI subprocess, skips the 5-12 s engine import."""
    import os
    import tempfile

    from contracts.engines.zygote import ZYGOTES

    if config.getoption("record_scope_seconds") and not hasattr(config, "workerinput"):
        from tests.scheduling import ScopeClock

        config.pluginmanager.register(ScopeClock(), "scope-clock")
    if hasattr(config, "workerinput") or os.environ.get(ZYGOTES):
        return  # an xdist worker (its controller owns the zygotes), or a session inside another
    directory = Path(tempfile.mkdtemp(prefix="eagle3-contracts-zygotes-"))
    (directory / "owner").write_text(str(os.getpid()))
    os.environ[ZYGOTES] = str(directory)
    config._eagle3_zygotes = directory


def pytest_addoption(parser):
    parser.addoption("--record-scope-seconds", action="store_true", default=False,
                     help="write each xdist unit's seconds to tests/scope_seconds.json (tests/scheduling.py)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: a file per unit unless grouped, the longest unit first (tests/scheduling.py)."""
    if config.getvalue("dist") == "loadgroup":
        from tests.scheduling import LongestFirst

        return LongestFirst(config, log)
    return None


def pytest_unconfigure(config):
    import os

    from contracts.engines.zygote import ZYGOTES, stop_all

    directory = getattr(config, "_eagle3_zygotes", None)
    if directory is not None:
        stop_all(directory)
        os.environ.pop(ZYGOTES, None)


DELETE = "<delete this key>"  # config value that removes the key (None writes JSON null)
# what a run says on stderr as it goes (an environment or a trainer's reference made once), never an error
PROGRESS = re.compile(r"^eagle3-contracts: (making |made |\[)")


def weights_apart(a: Path, b: Path) -> float:
    """The largest difference between two safetensors files' floating tensors, relative to each tensor's largest value
    (their names, shapes, dtypes and integer tensors must be equal, else AssertionError). A build trained again on
    another CPU differs in its last bits (its kernels accumulate in another order): byte for byte is a property of one
    machine, these are of the recipe."""
    from safetensors.torch import load_file

    x, y = load_file(str(a)), load_file(str(b))
    assert sorted(x) == sorted(y), (sorted(x), sorted(y))
    worst = 0.0
    for name in x:
        assert (x[name].dtype, x[name].shape) == (y[name].dtype, y[name].shape), name
        if not x[name].is_floating_point():
            assert bool((x[name] == y[name]).all()), f"{name} differs"
            continue
        scale = float(y[name].float().abs().max()) or 1.0
        worst = max(worst, float((x[name].float() - y[name].float()).abs().max()) / scale)
    return worst


def errors_in(err: str) -> str:
    """STDERR without the progress lines a first run prints (``contracts.environments.engines.progress``, the
    reference made on the spot): what is left is what went wrong."""
    return "".join(line for line in err.splitlines(keepends=True) if not PROGRESS.match(line))


def make_copy(src: Path, dst: Path, *, add=None, remove=(), replace=None, config=None) -> Path:
    """A copy of checkpoint ``src`` at ``dst`` with tensors added / removed / replaced and config keys changed.

    Tensors are written with safetensors, like a trainer would; ``config`` maps keys to new values
    (``DELETE`` removes the key, ``None`` writes null).
    """
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    tensors = load_file(weights)
    for key in remove:
        del tensors[key]
    tensors.update(replace or {})
    tensors.update(add or {})
    save_file({k: v.contiguous() for k, v in tensors.items()}, weights, metadata={"format": "pt"})
    if config:
        cfg = json.loads((dst / "config.json").read_text())
        for k, v in config.items():
            if v == DELETE:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


@pytest.fixture
def broken(tmp_path):
    """``broken("specforge", add={...}, remove=[...], replace={...}, config={...})`` → a modified copy."""
    counter = iter(range(1000))

    def factory(name: str, **changes) -> Path:  # a bundled draft, or NAME-hd32 for its head-dim-32 twin
        source = DRAFTS[name] if name in DRAFTS else HD32[name.removesuffix("-hd32")]
        return make_copy(source, tmp_path / f"{name}-{next(counter)}", **changes)

    return factory


def judge_contract(contract_id: str | None, checkpoint, target=TARGET, **subject_fields):
    """Run one contract on a checkpoint dir with the pinned engine (or ``engine=``); returns the Result (contract_id
    None: every contract's, by id). ``subject_fields`` are Subject's optional fields (intended_ids, trainer,
    reference_path, engine, ...)."""
    from contracts.engine_spec import EngineSpec
    from contracts.subject import Subject

    if isinstance(subject_fields.get("engine"), str):  # a test names its engine as a user would: parsed here
        subject_fields["engine"] = EngineSpec.parse(subject_fields["engine"])
    subject = Subject(Path(checkpoint).name, checkpoint, target, **subject_fields)
    try:
        results = subject.run([contract_id] if contract_id else None)
        return results[0] if contract_id else {r.contract: r for r in results}
    finally:
        subject.close()


@pytest.fixture(scope="session")
def run_contract():
    """``run_contract(checkpoint, contract_id, target=TARGET)``: see ``judge_contract``."""
    return lambda checkpoint, contract_id, target=TARGET: judge_contract(contract_id, checkpoint, target)


def second_layer(src: Path) -> dict:
    """Layer 1 of a two-layer draft as a standard decoder layer (no hidden_norm; q/k/v take the hidden size, not
    twice it): what a trainer's layers above 0 hold. Shapes follow the draft's layer 0; seeded values."""
    import torch
    from safetensors import safe_open

    gen = torch.Generator().manual_seed(1)
    with safe_open(str(src / "model.safetensors"), "pt") as f:
        first = {k: f.get_slice(k) for k in f.keys()}
        layer0 = {k.removeprefix("midlayer.").removeprefix("layers.0."): (v.get_shape(), v.get_dtype())
                  for k, v in first.items() if k.startswith(("midlayer.", "layers.0."))}
    hidden = layer0["input_layernorm.weight"][0][0]
    out = {}
    for name, (shape, _) in layer0.items():
        if name == "hidden_norm.weight":
            continue
        if name.startswith("self_attn.") and name[10] in "qkv":
            shape = [shape[0], hidden]
        tensor = torch.ones(shape) if name.endswith("norm.weight") else torch.randn(shape, generator=gen) * 0.02
        out[f"layers.1.{name}"] = tensor.to(torch.bfloat16)
    return out
