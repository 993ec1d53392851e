"""Build fixtures/drafts/specforge: an untrained EAGLE-3 draft for the tiny Llama target, written by
the real specforge 0.2.0 SGLang exporter (`specforge export --to sglang`).

Why: it is the one committed example of what specforge hands SGLang (flat Llama config, `midlayer.*`,
bf16, `d2t`/`t2d`, no `embed_tokens`, no aux-layer ids), so the contract checks run against bytes the
trainer really produces. Nothing of specforge is re-implemented; this module calls, in the order of
`specforge train` (offline, single process: cli._train -> training.assembly.build_training_run), the
library's own functions, stops before the first optimizer step, saves the checkpoint through its
CheckpointManager and exports it with specforge.export.to_sglang.export_to_sglang.

Deliberate differences from a real run, none of which reaches the exported bytes:
  * the target is a config-only directory written from common.TARGET_GEOMETRY (no weights), so
    `model.load_target_embedding` is off (the export drops embed_tokens anyway) and the offline
    TargetHead (target lm_head, used only by the loss) is not loaded;
  * specforge's generated draft template (1 layer, target geometry) has draft_vocab_size 32000; it is
    scaled to common.DRAFT_VOCAB and handed back as `model.draft_model_config`, as a user would;
  * the token counts are common.token_frequencies() instead of counts over a dataset.

Run: `tox -e fixtures-specforge` (python -m contracts.trainers.specforge, PYTHONPATH=repo root).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from contracts.trainers.common import (
    DRAFT_VOCAB,
    FIXTURES,
    SEED,
    TARGET_GEOMETRY,
    record_fixture,
    token_frequencies,
)

OUT_DIR = FIXTURES / "drafts" / "specforge"
RUN_ID = "fixture"

FUNCTIONS_CALLED = [
    "accelerate.utils.set_seed",
    "specforge.application.composition.resolve_run",
    "specforge.training.model_loading.resolve_draft_config",
    "specforge.algorithms.model_providers.build_eagle3_draft",
    "specforge.algorithms.eagle3.model.OnlineEagle3Model",
    "specforge.algorithms.model_providers.resolve_eagle_capture_layers",
    "specforge.training.assembly._install_dataset_vocab_mapping",
    "specforge.data.preprocessing.process_token_dict_to_mappings",
    "specforge.training.strategies.base.Eagle3TrainStrategy.checkpoint_state_filter",
    "specforge.training.checkpoint.CheckpointManager.save",
    "specforge.export.to_sglang.export_to_sglang",
]


def build(work: Path) -> dict:
    import torch
    from accelerate.utils import set_seed
    from transformers import LlamaConfig

    from specforge.algorithms.eagle3.model import OnlineEagle3Model
    from specforge.algorithms.model_providers import (
        build_eagle3_draft,
        resolve_eagle_capture_layers,
    )
    from specforge.application.composition import resolve_run
    from specforge.config import Config
    from specforge.export.to_sglang import export_to_sglang
    from specforge.training.assembly import ModelBundle, _install_dataset_vocab_mapping
    from specforge.training.checkpoint import CheckpointManager
    from specforge.training.model_loading import resolve_draft_config

    # The tiny target, config only (architecture fields are all specforge reads from it here).
    target_dir = work / "target"
    target_config = LlamaConfig(architectures=["LlamaForCausalLM"], **TARGET_GEOMETRY)
    target_config.save_pretrained(target_dir)
    features_dir = work / "features"  # offline data source of the run; never read (no training step)
    features_dir.mkdir()

    run = {
        "model": {"target_model_path": str(target_dir), "load_target_embedding": False},
        "data": {"hidden_states_path": str(features_dir), "cache_dir": str(work / "cache")},
        "training": {"strategy": "eagle3", "seed": SEED},
        "run_id": RUN_ID,
        "output_dir": str(work / "output"),
    }
    cfg = Config.model_validate(run)

    # cli._train: seed first (random, numpy, torch).
    set_seed(cfg.training.seed)
    algorithm = resolve_run(cfg).algorithm
    provider = algorithm.providers.model

    # specforge's own draft template generated from the target (1 layer), scaled to DRAFT_VOCAB.
    template = resolve_draft_config(cfg, provider=provider.draft_config).to_dict()
    template["draft_vocab_size"] = DRAFT_VOCAB
    draft_config_path = work / "draft_config.json"
    draft_config_path.write_text(json.dumps(template, indent=2, sort_keys=True) + "\n")
    run["model"]["draft_model_config"] = str(draft_config_path)
    cfg = Config.model_validate(run)

    # training.assembly.build_model_bundle -> _load_draft -> provider.build_draft
    draft_config = resolve_draft_config(cfg, provider=provider.draft_config)
    draft_model = build_eagle3_draft(cfg, draft_config)
    # provider.build_training_model (model_providers.build_eagle3_model) minus the offline TargetHead.
    model = OnlineEagle3Model(
        draft_model=draft_model,
        length=cfg.training.ttt_length,
        attention_backend=cfg.training.attention_backend,
        lk_loss_type=cfg.training.lk_loss_type,
        kl_scale=cfg.training.kl_scale,
        kl_decay=cfg.training.kl_decay,
    ).to(dtype=getattr(torch, cfg.model.torch_dtype))
    aux_layer_ids = resolve_eagle_capture_layers(cfg, draft_config, target_config)
    bundle = ModelBundle(
        model=model,
        draft_model=draft_model,
        draft_config=draft_config,
        target_hidden_size=TARGET_GEOMETRY["hidden_size"],
        target_vocab_size=TARGET_GEOMETRY["vocab_size"],
        draft_vocab_size=int(draft_config.draft_vocab_size),
        capture_layers=aux_layer_ids,
    )

    # build_training_run -> _ensure_offline_vocab_mapping -> _install_dataset_vocab_mapping
    # (process_token_dict_to_mappings on a Counter, then d2t/t2d copied into the draft's buffers).
    _install_dataset_vocab_mapping(
        cfg,
        bundle,
        counts=Counter(token_frequencies()),
        dataset_identity="contracts.trainers.common.token_frequencies",
    )

    # TrainerController.save_checkpoint: the strategy's filter (drops the frozen embedding).
    strategy = algorithm.providers.step.build(model, target_head=None)
    shared = {
        "draft_state_dict": strategy.checkpoint_state_filter(model.state_dict()),
        "global_step": 0,
        "epoch": 0,
        "strategy": strategy.name,
        "run_id": RUN_ID,
        "world_size": 1,
    }
    ckpt_dir = CheckpointManager(cfg.output_dir, RUN_ID).save(shared, 0)

    # `specforge export --to sglang --checkpoint CKPT --draft-config JSON --output-dir DIR`
    export_dir = work / "export"
    export_to_sglang(ckpt_dir, str(draft_config_path), str(export_dir))

    d2t = draft_model.d2t.tolist()
    selected = [i + off for i, off in enumerate(d2t)]
    assert draft_model.t2d.nonzero().flatten().tolist() == selected
    return {
        "export_dir": export_dir,
        "selected_target_ids": selected,
        "aux_layer_ids": list(aux_layer_ids),
    }


def float_dtype(safetensors_file: Path) -> str:
    """The one floating dtype of the exported tensors (d2t/t2d are int64/bool)."""
    from safetensors import safe_open

    with safe_open(str(safetensors_file), framework="pt") as f:
        dtypes = {str(f.get_slice(k).get_dtype()) for k in f.keys()}
    floats = sorted(d for d in dtypes if d.startswith(("F", "BF")))
    if len(floats) != 1:
        raise SystemExit(f"expected one float dtype in the export, found {floats}")
    return {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[floats[0]]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="specforge-fixture-") as tmp:
        result = build(Path(tmp))
        written = sorted(p.name for p in result["export_dir"].iterdir())
        if written != ["config.json", "model.safetensors"]:
            raise SystemExit(f"export_to_sglang wrote {written}, expected config.json + model.safetensors")
        if OUT_DIR.exists():
            shutil.rmtree(OUT_DIR)
        OUT_DIR.mkdir(parents=True)
        for name in written:
            shutil.copyfile(result["export_dir"] / name, OUT_DIR / name)

    entry = record_fixture(
        "specforge",
        OUT_DIR,
        trainer="specforge",
        trainer_version=version("specforge"),
        command="tox -e fixtures-specforge",
        export="specforge.export.to_sglang.export_to_sglang",
        selected_target_ids=result["selected_target_ids"],
        aux_layer_ids=result["aux_layer_ids"],
        aux_layer_convention=(
            "0-based decoder-layer index whose output is captured: specforge passes the ids to "
            "SGLang's set_eagle3_layers_to_capture, which captures the input of layer id+1, "
            "i.e. HF hidden_states[id+1]"
        ),
        dtype=float_dtype(OUT_DIR / "model.safetensors"),
        functions_called=FUNCTIONS_CALLED,
    )
    print(json.dumps(entry, indent=2))


if __name__ == "__main__":
    main()
