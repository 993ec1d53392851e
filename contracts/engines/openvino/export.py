"""A draft as OpenVINO GenAI serves it: the IR its exporter (optimum-intel, in this release's environment) writes from
the draft directory, run as ``optimum-cli export openvino --task text-generation-with-past --weight-format fp32
--trust-remote-code`` runs it (``main_export`` in this process), with the exporter's own load report.

The exporter loads the draft with transformers' ``from_pretrained`` into its own EAGLE-3 classes
(``optimum.exporters.openvino.model_patcher``: one ``midlayer`` whatever ``num_hidden_layers`` says) and only
*warns* about the tensors it could not place: a tensor it does not know is dropped (UNEXPECTED), a parameter no tensor
wrote keeps its random initialisation (MISSING), and the export exits 0. The report is transformers' own
(``output_loading_info`` of the same load the exporter makes: its class choice, ``_CUSTOM_DRAFT_MODEL_MAP``, and its
config rewrite, ``update_config_for_custom_draft_model``); the IR is the exporter's. Each draft is exported once per
worker (its directory and config digest), into a temporary directory removed at exit.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.engines.errors import EngineBuildError

_CACHE: dict[str, "Exported"] = {}
# transformers' words when a draft's modeling code (``--trust-remote-code``) imports what this environment lacks
NEEDS = re.compile(r"requires the following packages that were not found in your environment: ([\w.\-, ]+)")
_ROOT: list[Path] = []


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


def _root() -> Path:
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="eagle3-contracts-openvino-")))
        atexit.register(shutil.rmtree, _ROOT[0], True)
    return _ROOT[0]


def _key(engine_dir: Path) -> str:
    digest = hashlib.sha256((engine_dir / "config.json").read_bytes()).hexdigest()[:12]
    return f"{engine_dir.resolve()}@{digest}"


def exporter_class(architecture: str | None):
    """The (model, causal-LM) classes the exporter builds a draft of ARCHITECTURE as (None: not an EAGLE-3 draft it
    knows; it would export the directory as an ordinary model)."""
    from optimum.exporters.openvino.__main__ import _CUSTOM_DRAFT_MODEL_MAP

    return _CUSTOM_DRAFT_MODEL_MAP.get(architecture)


def export(engine_dir) -> Exported:
    """The exporter's IR of ENGINE_DIR and its load report (raises ``EngineBuildError`` with the exporter's own words
    when it refuses the directory)."""
    engine_dir = Path(engine_dir)
    key = _key(engine_dir)
    if key in _CACHE:
        return _CACHE[key]
    from optimum.exporters.openvino import main_export
    from optimum.exporters.openvino.__main__ import update_config_for_custom_draft_model
    from optimum.intel.openvino.configuration import OVConfig
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(engine_dir), trust_remote_code=True)
    except Exception as e:  # noqa: BLE001  (the exporter's own refusal of the directory, in its words)
        raise EngineBuildError(f"optimum-intel's exporter cannot read this draft: {type(e).__name__}: {e}") from None
    architecture = (getattr(config, "architectures", None) or [None])[0]
    classes = exporter_class(architecture)
    if classes is not None:
        config = update_config_for_custom_draft_model(config, *classes)
    out = _root() / hashlib.sha256(key.encode()).hexdigest()[:16]
    try:
        model, info = AutoModelForCausalLM.from_pretrained(str(engine_dir), config=config, trust_remote_code=True,
                                                           output_loading_info=True)
        draft_class = type(model).__name__
        params = {name: list(t.shape) for name, t in model.state_dict().items()}
        buffers = sorted(name for name, _ in model.named_buffers())
        del model
        main_export(model_name_or_path=str(engine_dir), output=str(out), task="text-generation-with-past",
                    trust_remote_code=True, ov_config=OVConfig(dtype="fp32"))
    except ImportError as e:  # a module the exporter's path imports, missing here: the environment's to add
        needed = NEEDS.search(str(e))
        if needed is None:
            raise
        first = needed.group(1).split(",")[0].strip()
        raise ModuleNotFoundError(f"No module named '{first}' ({e})", name=first) from None
    except Exception as e:  # noqa: BLE001  (the exporter stopped: its refusal, in its words)
        raise EngineBuildError(f"optimum-intel's exporter refused this draft: {type(e).__name__}: {e}") from None
    exported = Exported(ir=out, draft_class=draft_class, architecture=architecture,
                        config=json.loads(config.to_json_string()),
                        missing=sorted(map(str, info.get("missing_keys", []))),
                        unexpected=sorted(map(str, info.get("unexpected_keys", []))),
                        mismatched=sorted(str(m) for m in info.get("mismatched_keys", [])), params=params,
                        buffers=buffers)
    _CACHE[key] = exported
    return exported


def ir_constants(ir: Path) -> dict[str, Any]:
    """The IR's named constants (``self.model.fc.weight`` -> its values, as numpy arrays): what the engine serves."""
    import openvino as ov

    model = ov.Core().read_model(str(ir / "openvino_model.xml"))
    return {op.get_friendly_name(): op.get_data() for op in model.get_ordered_ops() if op.get_type_name() == "Constant"
            and op.get_friendly_name().startswith("self.")}
