"""A draft as OpenVINO GenAI serves it: the IR its exporter (optimum-intel, in this release's environment) writes from
the draft directory, run as ``optimum-cli export openvino --task text-generation-with-past --weight-format fp32
--trust-remote-code`` runs it (``main_export`` in this process), with the exporter's own load report.

The exporter loads the draft with transformers' ``from_pretrained`` into its own EAGLE-3 classes
(``optimum.exporters.openvino.model_patcher``: one ``midlayer`` whatever ``num_hidden_layers`` says) and only
*warns* about the tensors it could not place: a tensor it does not know is dropped (UNEXPECTED), a parameter no tensor
wrote keeps its random initialisation (MISSING), and the export exits 0. The report is transformers' own
(``output_loading_info`` of the same load the exporter makes: its class choice, ``_CUSTOM_DRAFT_MODEL_MAP``, and its
config rewrite, ``update_config_for_custom_draft_model``); the IR is the exporter's. Each draft is exported once per
worker; a model whose files total under ``KEPT_BELOW`` bytes is exported once per environment: its IR and load report
are kept in the exporter's environment (``<env>/openvino-exports/``), under a key made of every file's name and
content (``_key``), so a file rewritten in place is exported again and a copy of a draft elsewhere is not. Importing the exporter alone takes 20-30 s on two
cores: a kept export is served without it. Larger models go into a temporary directory removed at exit.

A draft the exporter would hold more of than a check may take (``exporter_bytes``, counted from the headers and the
config before anything is allocated: an 8B-sized drafter cost 7.3 GB, a Kimi-K2.5-sized one 15.4 GB) is exported,
for the observations that ask for it (``scaled=True``), as a copy with every width divided by one factor
(``contracts.engines.scaled``); what the export reports is multiplied back into the checkpoint's numbers.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.checkpoint import Checkpoint
from contracts.engines.errors import EngineBuildError, ReplayError, TargetBuildError
from contracts.engines.scaled import layer_config, plan, write_copy

_CACHE: dict[str, "Exported"] = {}
_TARGETS: dict[str, Path] = {}
_DIGESTS: dict[tuple, str] = {}  # (resolved path, size, mtime) -> sha256 of the file's bytes
# transformers' words when a draft's modeling code (``--trust-remote-code``) imports what this environment lacks
NEEDS = re.compile(r"requires the following packages that were not found in your environment: ([\w.\-, ]+)")
_ROOT: list[Path] = []
KEPT_BELOW = 256 * 2**20  # bytes of model files: smaller exports are kept in the environment between runs
KEPT = "openvino-exports"
# the most kept exports an environment holds: past it, the least recently served go (each test's broken copy and each
# flipped-config probe of a draft is one; 769 had piled up, 507 MB, before there was a bound)
KEPT_MAX = 400
ABANDONED_S = 24 * 3600  # an unsettled export folder this old belongs to no running export (one takes minutes)
RECORD_FORM = b"4"  # what a kept export records (3: rename probes, seeded draws; 4: keyed by content); a new
# form exports again
# the largest target exported whole for GenAI's pair: the exporter loads it in float32 (1 GiB at this bound), traces it
# and writes the IR, about three times that at its peak. Larger targets are not exported here; the contracts judged
# on the pair say so (a target reduced to what the pair needs is the next step)
TARGET_EXPORT_ELEMENTS = 256_000_000


@dataclass
class Exported:
    ir: Path  # the directory holding openvino_model.xml / .bin
    draft_class: str  # the class the exporter built the draft as
    architecture: str | None  # config.architectures[0] as saved
    config: dict  # the config the exporter built from (after its rewrite)
    missing: list[str] = field(default_factory=list)  # parameters no checkpoint tensor wrote (random in the IR)
    unexpected: list[str] = field(default_factory=list)  # checkpoint tensors the exporter dropped
    mismatched: list[str] = field(default_factory=list)
    params: dict[str, list[int]] = field(default_factory=dict)  # the exporter's draft module's state, name -> shape
    buffers: list[str] = field(default_factory=list)  # of them, the buffers (d2t, t2d): served only as IR constants
    # for a dropped tensor, the name under which the exporter's own load places it (``RenameProbe`` fields)
    probes: list[dict] = field(default_factory=list)
    scale: Any = None  # scaled.Scale: the exporter was given a copy at that scale (a real-size draft), else None
    given: Path | None = None  # the folder exported (the copy when scaled)


def scratch_root() -> Path:
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="eagle3-contracts-openvino-")))
        atexit.register(shutil.rmtree, _ROOT[0], True)
    return _ROOT[0]


def _key(engine_dir: Path) -> str:
    """What an export depends on: every file of the folder by name and content where the folder is small enough to be
    kept (so a copy of a draft in another folder or another clone, as every test and sweep stages one, is served the
    export its first copy made: each was exported anew, 620 kept exports after a few runs), else by path, size and
    modification time (a large folder's export is temporary)."""
    files = sorted((f for f in engine_dir.iterdir() if f.is_file()), key=lambda f: f.name)
    if sum(f.stat().st_size for f in files) < KEPT_BELOW:
        stamp = "\n".join(f"{f.name}:{_digest(f)}" for f in files)
    else:
        stamp = "\n".join(f"{f.resolve()}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    return hashlib.sha256(RECORD_FORM + stamp.encode()).hexdigest()[:24]


def _digest(path: Path) -> str:
    """PATH's sha256, read once per process for each file (its resolved path, size and modification time): ``export``
    keys the folder on every call, and a flipped-config copy links the same tensors."""
    real = path.resolve()
    stamp = (str(real), real.stat().st_size, real.stat().st_mtime_ns)
    if stamp not in _DIGESTS:
        h = hashlib.sha256()
        with open(real, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[stamp] = h.hexdigest()
    return _DIGESTS[stamp]


def settle(made: Path, out: Path) -> Path:
    """MADE (written by this process) moved to OUT in one step; where another worker got there first, its copy."""
    try:
        os.replace(made, out) if not out.exists() else shutil.rmtree(made, ignore_errors=True)
    except OSError:  # another worker's copy arrived in between
        shutil.rmtree(made, ignore_errors=True)
    return out


def scratch_for(out: Path) -> Path:
    """A directory beside OUT that only this process writes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{out.name}.", dir=out.parent))


def _home(engine_dir: Path, key: str) -> Path:
    """Where ENGINE_DIR's export goes: kept in the environment when its files are small, else temporary."""
    size = sum(f.stat().st_size for f in engine_dir.iterdir() if f.is_file())
    return (Path(sys.prefix) / KEPT if size < KEPT_BELOW else scratch_root()) / key


def _config(engine_dir: Path):
    """The config as the exporter reads it (transformers' AutoConfig), or its refusal as ``EngineBuildError``."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(engine_dir), trust_remote_code=True)
    except Exception as e:  # noqa: BLE001  (the exporter's own refusal of the directory, in its words)
        raise EngineBuildError(f"optimum-intel's exporter cannot read this draft: {type(e).__name__}: {e}") from None


def saved_architecture(engine_dir) -> str | None:
    """``architectures[0]`` as the exporter reads the folder's config (the key of its draft classes)."""
    return (getattr(_config(Path(engine_dir)), "architectures", None) or [None])[0]


def eagle3_architectures() -> list[str]:
    """The draft architectures the exporter builds its EAGLE-3 module for (its _CUSTOM_DRAFT_MODEL_MAP's EAGLE-3 keys)."""
    from optimum.exporters.openvino.__main__ import _CUSTOM_DRAFT_MODEL_MAP

    return sorted(a for a in _CUSTOM_DRAFT_MODEL_MAP if "eagle3" in a.lower())


def exporter_class(architecture: str | None):
    """The (model, causal-LM) classes the exporter builds a draft of ARCHITECTURE as (None: not an EAGLE-3 draft it
    knows; it would export the directory as an ordinary model)."""
    from optimum.exporters.openvino.__main__ import _CUSTOM_DRAFT_MODEL_MAP

    return _CUSTOM_DRAFT_MODEL_MAP.get(architecture)


def exporter_bytes(draft, target=None) -> int:
    """What optimum-intel's exporter holds of a draft at its peak, roughly: its module in float32 three times over
    (the load report's model, the export's own load, the traced constants), counting the embedding it builds from
    the config where the checkpoint holds none (a SpecForge export: the target vocabulary's rows)."""
    numel = sum(t.numel for t in draft.tensors.values())
    if not any(name.endswith("embed_tokens.weight") for name in draft.tensors):
        layer = layer_config(draft.config)
        vocab, hidden = layer.get("vocab_size"), layer.get("hidden_size")
        numel += vocab * hidden if isinstance(vocab, int) and isinstance(hidden, int) else 0
    return 3 * 4 * numel


def draft_scale(engine_dir: Path):
    """The scale ENGINE_DIR is exported at when an observation allows a copy (None: full size)."""
    return plan(Path(engine_dir), None, exporter_bytes)


def full_size(engine_dir) -> Exported:
    """ENGINE_DIR exported at full size for GenAI's pair with the target (built at the target's own widths); a draft
    judged on a scaled copy is not built into a pair here: ``ReplayError`` before anything is allocated."""
    scale = draft_scale(Path(engine_dir))
    if scale is not None:
        raise ReplayError(f"OpenVINO GenAI's pair is built here on the draft exported at full size, and this draft is "
                          f"beyond what a check may hold in the exporter (about "
                          f"{exporter_bytes(Checkpoint.open(Path(engine_dir))) >> 20} MB in float32): it is judged on "
                          f"{scale.describe()}, which no full-size target pairs with")
    return export(engine_dir)


def export(engine_dir, keep: bool = True, scaled: bool = False) -> Exported:
    """The exporter's IR of ENGINE_DIR and its load report (raises ``EngineBuildError`` with the exporter's own words
    when it refuses the directory); KEEP false: never kept between runs (a probe's passing copy); SCALED: a draft
    beyond what a check may hold is exported as a scaled copy (never kept), its report in the checkpoint's numbers."""
    engine_dir = Path(engine_dir)
    scale = draft_scale(engine_dir) if scaled else None
    key = _key(engine_dir) + ("" if scale is None else f"-scaled-{scale.width}")
    if key in _CACHE:
        return _CACHE[key]
    out = _home(engine_dir, key) if keep and scale is None else scratch_root() / key
    record = out / "eagle3-contracts-export.json"
    if record.is_file():
        _CACHE[key] = Exported(**{**json.loads(record.read_text()), "ir": out})
        _served(record)
        return _CACHE[key]
    from optimum.exporters.openvino import main_export
    from optimum.exporters.openvino.__main__ import update_config_for_custom_draft_model
    from optimum.intel.openvino.configuration import OVConfig
    from transformers import AutoModelForCausalLM

    given = engine_dir if scale is None else \
        write_copy(engine_dir, Path(tempfile.mkdtemp(prefix=f"{key}-copy-", dir=scratch_root())) / engine_dir.name, scale)
    config = _config(given)
    architecture = (getattr(config, "architectures", None) or [None])[0]
    classes = exporter_class(architecture)
    if classes is not None:
        config = update_config_for_custom_draft_model(config, *classes)
    import torch

    try:
        torch.manual_seed(0)  # a parameter no tensor writes is drawn the same way by every export (a flip changes only
        # what the switch changes)
        model, info = AutoModelForCausalLM.from_pretrained(str(given), config=config, trust_remote_code=True,
                                                           output_loading_info=True)
        draft_class = type(model).__name__
        params = {name: list(t.shape) if scale is None else scale.up_shape(t.shape)
                  for name, t in model.state_dict().items()}
        buffers = sorted(name for name, _ in model.named_buffers())
        del model
        probes = _rename_probes(given, config, info) if info.get("unexpected_keys") else []
        made = scratch_for(out)
        torch.manual_seed(0)
        try:
            main_export(model_name_or_path=str(given), output=str(made), task="text-generation-with-past",
                        trust_remote_code=True, ov_config=OVConfig(dtype="fp32"))
        except BaseException:  # a refused export leaves no half-written folder beside the kept ones
            shutil.rmtree(made, ignore_errors=True)
            raise
    except ImportError as e:  # a module the exporter's path imports, missing here: the environment's to add
        needed = NEEDS.search(str(e))
        if needed is None:
            raise
        first = needed.group(1).split(",")[0].strip()
        raise ModuleNotFoundError(f"No module named '{first}' ({e})", name=first) from None
    except Exception as e:  # noqa: BLE001  (the exporter stopped: its refusal, in its words)
        words = f"{type(e).__name__}: {e}" + _mismatched(given, config, e)
        raise EngineBuildError("optimum-intel's exporter refused this draft: "
                               + (words if scale is None else scale.up_shapes_in(words))) from None
    built = json.loads(config.to_json_string())
    mismatched = sorted(str(m) for m in info.get("mismatched_keys", []))
    exported = Exported(ir=out, draft_class=draft_class, architecture=architecture,
                        config=built if scale is None else scale.up_config(built),
                        missing=sorted(map(str, info.get("missing_keys", []))),
                        unexpected=sorted(map(str, info.get("unexpected_keys", []))),
                        mismatched=mismatched if scale is None else [scale.up_shapes_in(m) for m in mismatched],
                        params=params, buffers=buffers, probes=probes, scale=scale,
                        given=None if scale is None else given)
    (made / record.name).write_text(json.dumps({k: v for k, v in exported.__dict__.items()
                                                if k not in ("ir", "scale", "given")}))
    settle(made, out)
    _CACHE[key] = exported
    if out.parent.name == KEPT:
        prune(out.parent)
    return exported


def _served(record: Path) -> None:
    """Mark a kept export as served now (``prune`` keeps the most recently served)."""
    try:
        os.utime(record)
    except OSError:  # another worker pruned it in between: this process holds its answer already
        pass


def prune(kept: Path, most: int | None = None) -> list[Path]:
    """Remove the least recently served exports of KEPT past the newest MOST (``KEPT_MAX``); returns what went."""
    most = KEPT_MAX if most is None else most
    entries, gone = [], []
    for entry in kept.iterdir():
        record = entry / "eagle3-contracts-export.json"
        try:
            if record.is_file():
                entries.append((record.stat().st_mtime, entry))
            elif entry.is_dir() and time.time() - entry.stat().st_mtime > ABANDONED_S:
                gone.append(entry)  # a folder an export was written into and never settled: its process is gone
        except OSError:
            continue
    entries.sort(reverse=True)
    gone += [entry for _, entry in entries[most:]]
    for entry in gone:
        shutil.rmtree(entry, ignore_errors=True)
    return gone


@contextmanager
def config_changed(engine_dir: Path, changes: dict):
    """A copy of ENGINE_DIR (its files linked) whose config.json has CHANGES, for as long as the block runs."""
    config = json.loads((engine_dir / "config.json").read_text())
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-openvino-config-", dir=scratch_root()) as scratch:
        changed = Path(scratch) / engine_dir.name
        changed.mkdir()
        for f in engine_dir.iterdir():
            if f.is_file() and f.name != "config.json":
                (changed / f.name).symlink_to(f.resolve())
        (changed / "config.json").write_text(json.dumps({**config, **changes}))
        yield changed


def _rename_probes(engine_dir: Path, config, info: dict) -> list[dict]:
    """For each tensor the exporter's load dropped (UNEXPECTED) that has a candidate name (``contracts.renames``)
    naming a parameter it left unwritten (MISSING): the same load again, on a copy with those tensors renamed (a
    safetensors header change), keeps each rename under which the tensor is no longer dropped and the parameter is
    written. The exporter decides; a candidate is only a question put to it."""
    from transformers import AutoModelForCausalLM

    from contracts.hand_conversion import write_copy as write_renamed
    from contracts.renames import candidate_names

    ckpt = Checkpoint.open(engine_dir)
    missing = set(map(str, info.get("missing_keys", [])))
    renames: dict[str, str] = {}
    reached: dict[str, str] = {}
    for key in map(str, info.get("unexpected_keys", [])):
        if key not in ckpt.tensors or not ckpt.tensors[key].file.endswith(".safetensors"):
            continue
        for candidate in candidate_names(key):
            param = next((p for p in (candidate, f"model.{candidate}") if p in missing and p not in reached.values()),
                         None)
            if param is not None and candidate not in ckpt.tensors:
                renames[key], reached[key] = candidate, param
                break
    if not renames:
        return []
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-openvino-probe-", dir=scratch_root()) as tmp:
        staged = write_renamed(engine_dir, json.loads((engine_dir / "config.json").read_text()),
                            Path(tmp) / engine_dir.name, link=True, renames=renames)
        _, again = AutoModelForCausalLM.from_pretrained(str(staged), config=config, trust_remote_code=True,
                                                        output_loading_info=True)
    dropped, unwritten = set(map(str, again.get("unexpected_keys", []))), set(map(str, again.get("missing_keys", [])))
    return [{"key": k, "candidate": c, "config_change": None, "reached": [reached[k]]} for k, c in renames.items()
            if c not in dropped and reached[k] not in unwritten]


def _mismatched(engine_dir: Path, config, error: Exception) -> str:
    """Where transformers refused sizes ("look at the above report"), the report it logged: the same load asked
    for it (``ignore_mismatched_sizes``), each tensor with the checkpoint's shape and the parameter's."""
    if "ignore_mismatched_sizes" not in str(error):
        return ""
    import gc

    from transformers import AutoModelForCausalLM

    # the refused load's frames (its model among their locals) live on in the traceback: let them go before the
    # same model is built again (two of a 2,000,000-token config's float32 embeddings were 1 GB at once)
    error.__traceback__ = None
    gc.collect()

    try:
        _, info = AutoModelForCausalLM.from_pretrained(str(engine_dir), config=config, trust_remote_code=True,
                                                       output_loading_info=True, ignore_mismatched_sizes=True)
    except Exception:  # noqa: BLE001  (no report beyond the refusal itself)
        return ""
    sizes = [f"{m[0]}: checkpoint {list(m[1])}, parameter {list(m[2])}" if isinstance(m, tuple) and len(m) == 3
             else str(m) for m in info.get("mismatched_keys", [])]
    return f" (its load report: size mismatch for {'; '.join(sizes)})" if sizes else ""


def export_target(target_dir) -> Path:
    """The exporter's IR of the target model (as ``optimum-cli export openvino`` writes it), once per worker."""
    target_dir = Path(target_dir)
    key = _key(target_dir)
    if key in _TARGETS:
        return _TARGETS[key]
    out = _home(target_dir, key)
    if (out / "openvino_model.xml").is_file():
        _TARGETS[key] = out
        return out
    _within_bound(target_dir)
    from optimum.exporters.openvino import main_export
    from optimum.intel.openvino.configuration import OVConfig

    try:
        made = scratch_for(out)
        main_export(model_name_or_path=str(target_dir), output=str(made), task="text-generation-with-past",
                    trust_remote_code=True, ov_config=OVConfig(dtype="fp32"))
    except Exception as e:  # noqa: BLE001  (the exporter stopped on the target: its words)
        raise TargetBuildError(f"optimum-intel's exporter refused the target: {type(e).__name__}: {e}") from None
    _TARGETS[key] = settle(made, out)
    return out


def _within_bound(target_dir: Path) -> None:
    """Refuse, as this suite's limit and before the exporter allocates anything, a target whose weights exceed
    ``TARGET_EXPORT_ELEMENTS`` (counted from the safetensors headers: a Llama-3.1-8B target would take about 96 GB)."""
    target = Checkpoint.open(target_dir, require_weights=False, role="target")  # config-only: the exporter decides
    n = sum(t.numel for t in target.tensors.values()) if target.has_weights else 0
    if n > TARGET_EXPORT_ELEMENTS:
        raise ReplayError(f"this suite builds OpenVINO GenAI's pair on the target exported whole, and this target's "
                          f"{n / 1e9:.2f} B parameters ({4 * n / 2**30:.1f} GiB in float32, about three times that "
                          f"while the exporter traces it) are beyond its bound of {TARGET_EXPORT_ELEMENTS / 1e6:.0f} M")


def ir_constants(ir: Path) -> dict[str, Any]:
    """The IR's named constants (``self.model.fc.weight`` -> its values, as numpy arrays): what the engine serves."""
    import openvino as ov

    model = ov.Core().read_model(str(ir / "openvino_model.xml"))
    return {op.get_friendly_name(): op.get_data() for op in model.get_ordered_ops() if op.get_type_name() == "Constant"
            and op.get_friendly_name().startswith("self.")}
