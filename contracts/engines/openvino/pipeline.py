"""A target and a draft as OpenVINO GenAI pairs them: both IRs from its exporter, the draft's as ``draft_model``
reads it, and ``LLMPipeline(target, "CPU", draft_model=...)`` built, with GenAI's own log of the build.

GenAI decides two things when it builds the pair, in its C++ (``eagle3_model_transforms.cpp``), that no Python call
exposes: which target layers feed the draft (the draft IR's rt_info ``hidden_layers_list``, else ``{2, N/2, N-3}``
of the target's ``num_hidden_layers``, refused under 10 layers) and whether the draft's embedding is replaced by the
target's (``share_vocabulary``, which logs it). A build is therefore observed: its refusal in GenAI's words, and its
log at ``OPENVINO_LOG_LEVEL=3``. Layer ids are written the way GenAI reads them from Python: into a copy of the draft
IR's rt_info (a ``hidden_layers_list`` property passed from Python arrives as 64-bit ints, which GenAI refuses).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LAYERS_KEY = "hidden_layers_list"
# GenAI's own INFO line when ``share_vocabulary`` rewires the draft's embedding to the target's: 2026.0.0.0 words it
# "Sharing embedding weights between main and draft models", 2026.1.0.0 on "Copying embedding weights from main to
# draft model" (read from each tag's eagle3_model_transforms.cpp; the sweep of 2026.0.0.0 called its shared embedding
# random until both were read)
EMBEDDING_SHARED = re.compile(r"Copying embedding weights from main to draft model|"
                              r"Sharing embedding weights between main and draft models")
# GenAI logs what it decides while it builds the pair at OPENVINO_LOG_LEVEL=3 (its INFO lines): the OpenVINO profile's
# process_env sets it in every process that runs OpenVINO (set here, as this module was imported, it leaked into
# the process that merely imported it for a name, e.g. convert's, and from there into every engine worker it started)


@dataclass
class Pair:
    pipeline: Any  # the LLMPipeline (None: GenAI refused the pair)
    refusal: str | None  # GenAI's own error
    log: str  # what GenAI logged while building it
    layers: list[int] | None  # the ids written into the draft IR's rt_info (None: none, GenAI's default)

    @property
    def embedding_copied(self) -> bool:
        return EMBEDDING_SHARED.search(self.log) is not None


@contextmanager
def _captured(path: Path):
    """File descriptors 1 and 2 into PATH while the block runs (GenAI logs from C++ to stdout)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        for fd, kept in zip((1, 2), saved):
            os.dup2(kept, fd)
            os.close(kept)


def with_layers(draft_ir: Path, layers: list[int] | None) -> Path:
    """DRAFT_IR, or a copy of it whose rt_info names LAYERS as GenAI's ``draft_model`` reads them."""
    if layers is None:
        return draft_ir
    import openvino as ov

    from contracts.engines.openvino.export import scratch_for, settle

    out = draft_ir.parent / f"{draft_ir.name}-layers-{'-'.join(map(str, layers))}"
    if not (out / "openvino_model.xml").is_file():
        made = scratch_for(out)
        for f in draft_ir.iterdir():
            if f.is_file() and not f.name.startswith("openvino_model."):
                shutil.copy(f, made / f.name)
        model = ov.Core().read_model(str(draft_ir / "openvino_model.xml"))
        model.set_rt_info(" ".join(map(str, layers)), LAYERS_KEY)
        ov.save_model(model, str(made / "openvino_model.xml"), compress_to_fp16=False)
        settle(made, out)
    return out


def build(target_ir: Path, draft_ir: Path, layers: list[int] | None = None) -> Pair:
    """GenAI's pipeline for the pair on a CPU, or its refusal, with its log."""
    import openvino_genai as ov_genai

    from contracts.engines.openvino.export import scratch_root

    draft_ir = with_layers(draft_ir, layers)
    log = Path(tempfile.mkstemp(prefix="genai-build-", suffix=".log", dir=scratch_root())[1])
    scheduler = ov_genai.SchedulerConfig()
    scheduler.cache_size = 1  # GB of KV cache: the prompts here are short
    scheduler.max_num_batched_tokens = 256
    pipeline, refusal = None, None
    try:
        with _captured(log):
            draft = ov_genai.draft_model(str(draft_ir), "CPU")
            pipeline = ov_genai.LLMPipeline(str(target_ir), "CPU", draft_model=draft, scheduler_config=scheduler)
    except Exception as e:  # noqa: BLE001  (GenAI refused the pair: its own words)
        refusal = " ".join(f"{type(e).__name__}: {e}".split())[:600]
    return Pair(pipeline, refusal, log.read_text(errors="replace"), layers)


def served_layers(draft_dir, ir: Path | None = None) -> list[int] | None:
    """The ids GenAI reads from the draft it is given: the rt_info ``hidden_layers_list`` of the folder's own IR
    (``openvino_model.xml``, as ``convert --to openvino`` writes it), else of IR (the exporter's, which writes none);
    None: GenAI's default."""
    import openvino as ov

    own = Path(draft_dir) / "openvino_model.xml"
    xml = own if own.is_file() else (ir / "openvino_model.xml" if ir is not None else None)
    if xml is None or not xml.is_file():
        return None
    model = ov.Core().read_model(str(xml))
    return [int(i) for i in model.get_rt_info(LAYERS_KEY).astype(str).split()] if model.has_rt_info(LAYERS_KEY) \
        else None


def trained_ids(draft_dir, target_dir) -> tuple[list[int] | None, str]:
    """The ids GenAI needs to feed the draft the layers its trainer trained on (its id k taps the output of target
    layer k: transformers' ``hidden_states[k + 1]``), and where they came from; None when the trainer is unknown."""
    import json

    from contracts.checkpoint import Checkpoint, text_config
    from contracts.conventions import TRAINERS, hf_indices, trainer_layer_ids

    ckpt = Checkpoint.open(Path(draft_dir))
    trainer = ckpt.trainer_format
    if trainer not in TRAINERS:
        return None, "the draft names no trainer this suite knows"
    n = int(text_config(json.loads((Path(target_dir) / "config.json").read_text()))["num_hidden_layers"])
    ids, source = trainer_layer_ids(trainer, ckpt.config, n)
    return [h - 1 for h in hf_indices(trainer, ids)], f"{trainer}'s ids {ids} ({source})"
