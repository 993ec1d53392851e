"""Build fixtures/drafts/specforge: an untrained EAGLE-3 draft for the tiny Llama target, written by
the real specforge 0.2.0 SGLang exporter (`specforge export --to sglang`); and fixtures/drafts/specforge-hd32,
the same run for fixtures/targets/llama-tiny-hd32 (head size 32, which vLLM's CPU attention kernel takes).

Why: it is the one committed example of what specforge hands SGLang (flat Llama config, `midlayer.*`,
bf16, `d2t`/`t2d`, no `embed_tokens`, no aux-layer ids), so the contract checks run against bytes the
trainer really produces. Nothing of specforge is re-implemented; this module calls, in the order of
`specforge train` (offline, single process: cli._train -> training.assembly.build_training_run), the
library's own functions, stops before the first optimizer step, saves the checkpoint through its
CheckpointManager and exports it with specforge.export.to_sglang.export_to_sglang.

Deliberate differences from a real run, none of which reaches the exported bytes:
  * the offline TargetHead (target lm_head, used only by the loss) is not loaded: specforge's
    TargetHead.from_pretrained requires a sharded checkpoint (`*.index.json`), the tiny target has one file;
  * specforge's generated draft template (1 layer, target geometry) has draft_vocab_size 32000; it is
    scaled to common.DRAFT_VOCAB and handed back as `model.draft_model_config`, as a user would;
  * the token counts are common.token_frequencies() instead of counts over a dataset.
As in a real run the target is fixtures/targets/llama-tiny (weights included) and
`model.load_target_embedding` is on (the default): the draft's frozen embedding is the target's, which
the trainer's filter and the SGLang export then drop (SGLang shares the target's embedding at serving).

The `forward-parity` reference, fixtures/references/specforge.safetensors: a second run configuration
identical but for `model.draft_checkpoint_path` = the committed export (specforge's own warm start,
`warm_start_draft_model`), `model.torch_dtype` float32 and `training.attention_backend` sdpa (the
default flex_attention is not used on CPU), so the draft is rebuilt by the library from exactly the
exported bf16 weights plus the target's float32 embedding (load_embedding). The tiny target's real
aux hidden states at the draft's capture layers go through the training step itself,
`Eagle3TrainStrategy.forward_loss` -> `OnlineEagle3Model.forward`, and a forward hook on the draft's
lm_head records the step-0 logits and stops the step there (the fused Triton loss that follows needs
a GPU). specforge compiles LlamaRMSNorm.forward with torch.compile; that runs as in training (inductor,
CPU).

Run: `tox -e fixtures-specforge` (python -m contracts.trainers.specforge, PYTHONPATH=repo root).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from contracts.trainers.common import (
    DRAFT_VOCAB,
    FIXTURES,
    LLAMA_TINY,
    LLAMA_TINY_HD32,
    REFERENCE_STEPS,
    REPO_ROOT,
    SEED,
    TinyTarget,
    chain_logits,
    record_fixture,
    repo_relative,
    saved_tensor,
    saved_tensors,
    step_0_and_fed_state,
    switch_semantics,
    target_reference_inputs,
    token_frequencies,
    write_reference,
)

DRAFTS = FIXTURES / "drafts"
RUN_ID = "fixture"
# (fixture name, target, draft config switches, TTT steps): the draft for the tiny Llama, its head-size-32 twin
# (vLLM's CPU kernel), and an EAGLE-3.1 draft trained for two steps: specforge's fc_norm (one RMSNorm per aux
# chunk before fc) and norm_output (in specforge: the final norm before lm_head; the state fed to the next step
# stays raw), both written to the draft config as a user turns them on
BUILDS: tuple[tuple[str, TinyTarget, dict, int | None], ...] = (("specforge", LLAMA_TINY, {}, None), ("specforge-hd32", LLAMA_TINY_HD32, {}, None),
          ("specforge-eagle31-hd32", LLAMA_TINY_HD32, {"fc_norm": True, "norm_output": True}, 2))

FUNCTIONS_CALLED = [
    "accelerate.utils.set_seed",
    "specforge.application.composition.resolve_run",
    "specforge.training.model_loading.resolve_draft_config",
    "specforge.algorithms.model_providers.build_eagle3_draft",
    "specforge.modeling.draft.base.Eagle3DraftModel.load_embedding",
    "specforge.algorithms.eagle3.model.OnlineEagle3Model",
    "specforge.algorithms.model_providers.resolve_eagle_capture_layers",
    "specforge.training.assembly._install_dataset_vocab_mapping",
    "specforge.data.preprocessing.process_token_dict_to_mappings",
    "specforge.training.strategies.base.Eagle3TrainStrategy.checkpoint_state_filter",
    "specforge.training.checkpoint.CheckpointManager.save",
    "specforge.export.to_sglang.export_to_sglang",
]


def online_model(cfg, draft_model):
    """specforge's training wrapper around the draft, configured as its model provider does
    (model_providers.build_eagle3_model, without the offline TargetHead), in the run's dtype."""
    import torch
    from specforge.algorithms.eagle3.model import OnlineEagle3Model

    return OnlineEagle3Model(
        draft_model=draft_model,
        length=cfg.training.ttt_length,
        attention_backend=cfg.training.attention_backend,
        lk_loss_type=cfg.training.lk_loss_type,
        kl_scale=cfg.training.kl_scale,
        kl_decay=cfg.training.kl_decay,
    ).to(dtype=getattr(torch, cfg.model.torch_dtype))


def run_config(work: Path, target: TinyTarget = LLAMA_TINY, ttt_length: int | None = None) -> dict:
    """The run as `specforge train` would be configured (offline data source, eagle3 strategy; ``ttt_length``:
    `training.ttt_length`, else specforge's default)."""
    features_dir = work / "features"  # offline data source of the run; never read (no training step)
    features_dir.mkdir(parents=True, exist_ok=True)
    return {
        "model": {"target_model_path": target.path, "load_target_embedding": True},
        "data": {"hidden_states_path": str(features_dir), "cache_dir": str(work / "cache")},
        "training": {"strategy": "eagle3", "seed": SEED,
                     **({"ttt_length": ttt_length} if ttt_length is not None else {})},
        "run_id": RUN_ID,
        "output_dir": str(work / "output"),
    }


def build(work: Path, target: TinyTarget = LLAMA_TINY, switches: dict | None = None,
          ttt_length: int | None = None) -> dict:
    from accelerate.utils import set_seed
    from transformers import AutoConfig

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

    target_config = AutoConfig.from_pretrained(target.path)
    run = run_config(work, target, ttt_length)
    cfg = Config.model_validate(run)

    # cli._train: seed first (random, numpy, torch).
    set_seed(cfg.training.seed)
    algorithm = resolve_run(cfg).algorithm
    provider = algorithm.providers.model

    # specforge's own draft template generated from the target (1 layer), scaled to DRAFT_VOCAB.
    template = resolve_draft_config(cfg, provider=provider.draft_config).to_dict()
    template["draft_vocab_size"] = DRAFT_VOCAB
    template.update(switches or {})
    draft_config_path = work / "draft_config.json"
    draft_config_path.write_text(json.dumps(template, indent=2, sort_keys=True) + "\n")
    run["model"]["draft_model_config"] = str(draft_config_path)
    cfg = Config.model_validate(run)

    # training.assembly.build_model_bundle -> _load_draft -> provider.build_draft
    # (load_target_embedding: the target's model.embed_tokens.weight is copied in and frozen)
    draft_config = resolve_draft_config(cfg, provider=provider.draft_config)
    draft_model = build_eagle3_draft(cfg, draft_config)
    # provider.build_training_model (model_providers.build_eagle3_model) minus the offline TargetHead.
    model = online_model(cfg, draft_model)
    aux_layer_ids = resolve_eagle_capture_layers(cfg, draft_config, target_config)
    bundle = ModelBundle(
        model=model,
        draft_model=draft_model,
        draft_config=draft_config,
        target_hidden_size=target.geometry["hidden_size"],
        target_vocab_size=target.geometry["vocab_size"],
        draft_vocab_size=int(draft_config.draft_vocab_size),
        capture_layers=aux_layer_ids,
    )

    # build_training_run -> _ensure_offline_vocab_mapping -> _install_dataset_vocab_mapping
    # (process_token_dict_to_mappings on a Counter, then d2t/t2d copied into the draft's buffers).
    _install_dataset_vocab_mapping(
        cfg,
        bundle,
        counts=Counter(token_frequencies(target.vocab_size)),
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
        "draft_config_path": draft_config_path,
        "selected_target_ids": selected,
        "aux_layer_ids": list(aux_layer_ids),
    }


REFERENCE_FUNCTIONS = [
    "accelerate.utils.set_seed",
    "specforge.application.composition.resolve_run",
    "specforge.training.model_loading.resolve_draft_config",
    "specforge.algorithms.model_providers.build_eagle3_draft",
    "specforge.training.model_loading.warm_start_draft_model",
    "specforge.modeling.draft.base.Eagle3DraftModel.load_embedding",
    "specforge.algorithms.eagle3.model.OnlineEagle3Model",
    "specforge.algorithms.eagle3.providers.build_step",
    "specforge.training.strategies.base.Eagle3TrainStrategy.forward_loss",
    "specforge.algorithms.eagle3.model.OnlineEagle3Model.forward",
    "specforge.modeling.draft.llama3_eagle.LlamaForCausalLMEagle3.compute_logits",
    "torch.nn.Module.register_forward_hook(LlamaForCausalLMEagle3.lm_head)",
]
REFERENCE_ATTN = "sdpa"


class _StepsDone(Exception):
    """Raised by the lm_head hook once the recorded steps' logits are in (stops the rest of the step)."""


def training_step(work: Path, draft_config_path: Path, out_dir: Path, target: TinyTarget,
                  ttt_length: int | None = None):
    """SpecForge's own training step with the export in ``out_dir`` warm-started into its draft (float32, sdpa), as
    ``specforge train`` assembles it: (config, draft model, ``OnlineEagle3Model`` in eval mode, the eagle3 step
    strategy)."""
    from accelerate.utils import set_seed

    from specforge.application.composition import resolve_run
    from specforge.config import Config
    from specforge.training.model_loading import resolve_draft_config

    run = run_config(work / "reference", target, ttt_length)
    run["model"].update(draft_model_config=str(draft_config_path), draft_checkpoint_path=str(out_dir),
                        torch_dtype="float32")
    run["training"]["attention_backend"] = REFERENCE_ATTN
    run["output_dir"] = str(work / "reference" / "output")
    cfg = Config.model_validate(run)
    set_seed(cfg.training.seed)
    algorithm = resolve_run(cfg).algorithm
    provider = algorithm.providers.model
    draft_config = resolve_draft_config(cfg, provider=provider.draft_config)
    # build_eagle3_draft: from_config(sdpa, fp32) -> warm_start_draft_model(out_dir) -> load_embedding(target)
    draft_model = provider.build_draft(cfg, draft_config)
    model = online_model(cfg, draft_model).eval()
    strategy = algorithm.providers.step.build(model, target_head=None, **algorithm.providers.step.options(cfg))
    return cfg, draft_model, model, strategy


def reference(work: Path, draft_config_path: Path, aux_layer_ids: list[int] | None, name: str = "specforge",
              target: TinyTarget = LLAMA_TINY, out_dir: Path | None = None, path: Path | None = None,
              ttt_length: int | None = None) -> dict:
    """Step-0 logits of specforge's own training step on the committed export fixtures/drafts/<name> (or
    ``out_dir``, written to ``path``). ``aux_layer_ids`` None: the layers its own training run captures for this
    draft config and target (``resolve_eagle_capture_layers``: the config's ids, else its default)."""
    out_dir = out_dir or DRAFTS / name
    import torch
    import transformers

    from specforge.runtime.contracts import TrainBatch

    cfg, draft_model, model, strategy = training_step(work, draft_config_path, out_dir, target, ttt_length)
    if aux_layer_ids is None:
        from specforge.algorithms.model_providers import resolve_eagle_capture_layers
        from specforge.application.composition import resolve_run
        from specforge.training.model_loading import resolve_draft_config
        from transformers import AutoConfig

        provider = resolve_run(cfg).algorithm.providers.model
        aux_layer_ids = list(resolve_eagle_capture_layers(cfg, resolve_draft_config(cfg, provider=provider.draft_config),
                                                          AutoConfig.from_pretrained(str(target.directory))))

    # Same weights as the export (bf16 -> fp32 exact); the embedding is the target's, bit for bit (load_embedding
    # replaces whatever embedding a checkpoint carries: SpecForge trains with the target's).
    state = draft_model.state_dict()
    exported = set()
    for key, tensor in saved_tensors(out_dir):
        if key not in state:
            raise RuntimeError(f"specforge's draft has no {key} (its own: {', '.join(sorted(state))[:200]})")
        if key != "embed_tokens.weight" and not torch.equal(tensor.to(state[key].dtype), state[key]):
            raise RuntimeError(f"specforge: rebuilt {key} differs from the export")
        exported.add(key)
    embedding = saved_tensor(target.directory, cfg.model.embedding_key)
    if embedding is None or not torch.equal(embedding.to(state["embed_tokens.weight"].dtype),
                                            state["embed_tokens.weight"]):
        raise RuntimeError("specforge: the draft's embedding is not the target's")
    if set(state) - exported - {"embed_tokens.weight"}:
        raise RuntimeError(f"specforge: unexpected tensors outside the export: {set(state) - exported}")

    # specforge's capture id k is HF output_hidden_states[k + 1] (see the manifest's aux_layer_convention)
    inputs, meta = target_reference_inputs([k + 1 for k in aux_layer_ids], target)
    t = inputs["input_ids"].shape[0]
    # An online-capture batch (inputs already shifted; `target` = the target's logits, the teacher).
    batch = TrainBatch(
        sample_ids=["forward-parity-reference"],
        strategy=strategy.name,
        tensors={
            "input_ids": inputs["input_ids"][None],
            "attention_mask": torch.ones(1, t, dtype=torch.long),
            "loss_mask": torch.ones(1, t, 1),
            "hidden_state": inputs["hidden_states"][None],
            "target": inputs["target_logits"][None],
            "position_ids": inputs["positions"][None],
        },
    )
    steps = min(REFERENCE_STEPS, int(cfg.training.ttt_length))
    captured = []

    def record(_module, _inputs, out):
        captured.append(out.detach().clone())
        if len(captured) == steps:
            raise _StepsDone

    def no_loss(**_kwargs):
        # The per-step loss and metrics read the logits and feed nothing back into the chain (the next step's
        # state is set before them); their fused Triton kernel needs a GPU.
        zero = torch.zeros(())
        return (zero,) * 7

    model._acc_and_loss = no_loss
    hook = draft_model.lm_head.register_forward_hook(record)
    try:
        with torch.no_grad():
            strategy.forward_loss(batch)
        raise RuntimeError(f"specforge's training step reached lm_head {len(captured)} times, not {steps}")
    except _StepsDone:
        pass
    finally:
        hook.remove()
    metadata = {
        **meta,
        "fixture": name,
        "trainer": "specforge",
        "version": version("specforge"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "functions_called": json.dumps(REFERENCE_FUNCTIONS),
        "forward_call": (
            "Eagle3TrainStrategy.forward_loss(TrainBatch(input_ids=[1,T], attention_mask=ones, "
            "loss_mask=ones, hidden_state=[1,T,3H], target=target logits [1,T,V], position_ids=positions[None]))"
            " under torch.no_grad -> OnlineEagle3Model.forward: project_hidden_states, "
            "prepare_decoder_attention_mask, then per TTT step embed_input_ids, backbone, compute_logits; logits = "
            f"output of lm_head (hook) at steps 0..{steps - 1}, shape [1,T,draft_vocab]; the step is stopped "
            "there; the per-step loss (_acc_and_loss, a fused Triton kernel) is replaced by zeros"),
        "attn_implementation": (
            f"{REFERENCE_ATTN} (training.attention_backend; specforge's LlamaAttention with cache_hidden: "
            "explicit matmul + additive causal mask + fp32 softmax); LlamaRMSNorm under torch.compile (inductor, CPU)"),
        "dtype": "float32",
        "weights": (f"{repo_relative(out_dir)}/model.safetensors (bfloat16 on disk) warm-started by "
                    "warm_start_draft_model into a float32 draft; every exported tensor equal to the file's"),
        "embed_tokens": (f"the target's {cfg.model.embedding_key} from {target.path} (float32, load_embedding, "
                         "load_target_embedding=true); not in the export, SGLang shares it from the target"),
        "aux_layer_ids": json.dumps(list(aux_layer_ids)),
        "ttt_length": str(cfg.training.ttt_length),
    }
    step_logits = chain_logits([c[0] for c in captured]) if steps > 1 else None
    switches = _switch_semantics(draft_model, strategy, batch) if steps > 1 else None
    return write_reference(name, inputs, captured[0][0], metadata, path, step_logits=step_logits, switches=switches)


def _switch_semantics(draft_model, strategy, batch) -> dict:
    """specforge's own meaning of its EAGLE-3.1 switches (``common.switch_semantics``): ``norm_output`` flipped
    where ``compute_logits`` reads it, ``fc_norm`` off when the draft has it, on the same weights and training step."""

    def run():  # step 1's layer receives the state fed back as hidden_states
        return step_0_and_fed_state(draft_model.lm_head, draft_model.midlayer, lambda: strategy.forward_loss(batch),
                                    lambda _args, kwargs: kwargs["hidden_states"])

    value = bool(draft_model.norm_output)
    flips = {"norm_output": (value, lambda: setattr(draft_model, "norm_output", not value),
                             lambda: setattr(draft_model, "norm_output", value))}
    module = draft_model.fc_norm
    if module is not None:
        flips["fc_norm"] = (True, lambda: setattr(draft_model, "fc_norm", None),
                            lambda: setattr(draft_model, "fc_norm", module))
    return switch_semantics(run, flips)


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
    os.chdir(REPO_ROOT)  # the targets' paths are relative to the repo root
    for name, target, switches, ttt_length in BUILDS:
        build_one(name, target, switches, ttt_length)


def _keep_export(result: dict, out_dir: Path, scratch: str) -> None:
    written = sorted(p.name for p in result["export_dir"].iterdir())
    if written != ["config.json", "model.safetensors"]:
        raise SystemExit(f"export_to_sglang wrote {written}, expected config.json + model.safetensors")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for file in written:
        shutil.copyfile(result["export_dir"] / file, out_dir / file)
    text = (out_dir / "config.json").read_text()
    if out_dir.resolve().is_relative_to(REPO_ROOT) and (str(REPO_ROOT) in text or scratch in text):
        raise SystemExit(f"{out_dir}/config.json contains a local path")


AUX_CONVENTION = (
    "0-based decoder-layer index whose output is captured: specforge passes the ids to "
    "SGLang's set_eagle3_layers_to_capture, which captures the input of layer id+1, "
    "i.e. HF hidden_states[id+1]"
)


def build_tiny(scratch: Path, target: TinyTarget, draft: Path, reference_path: Path | None) -> dict:
    """``build-tiny --trainer specforge``: the fixture's run (``specforge train``'s assembly, its checkpoint
    manager, ``export_to_sglang``) with the installed release, into ``draft``, and its reference forward."""
    import importlib.util

    if importlib.util.find_spec("specforge.export") is None:  # 0.1.0: no run assembly or exporter yet
        from contracts.trainers.specforge_v01 import build_tiny as build_first_release

        return build_first_release(scratch, target, draft, reference_path)
    result = build(scratch, target)
    _keep_export(result, draft, str(scratch))
    details = dict(export="specforge.export.to_sglang.export_to_sglang",
                   selected_target_ids=result["selected_target_ids"], aux_layer_ids=result["aux_layer_ids"],
                   aux_layer_convention=AUX_CONVENTION, dtype=float_dtype(draft / "model.safetensors"),
                   functions_called=FUNCTIONS_CALLED, load_target_embedding=True)
    if reference_path is not None:
        details["reference"] = reference(scratch, result["draft_config_path"], result["aux_layer_ids"], "tiny",
                                         target, out_dir=draft, path=reference_path)
        details["reference"]["trained_hidden_states"] = [k + 1 for k in result["aux_layer_ids"]]
    return details


def build_one(name: str, target: TinyTarget, switches: dict | None = None, ttt_length: int | None = None) -> dict:
    out_dir = DRAFTS / name
    with tempfile.TemporaryDirectory(prefix="specforge-fixture-") as tmp:
        result = build(Path(tmp), target, switches, ttt_length)
        _keep_export(result, out_dir, tmp)
        ref = reference(Path(tmp), result["draft_config_path"], result["aux_layer_ids"], name, target,
                        ttt_length=ttt_length)

    entry = record_fixture(
        name,
        out_dir,
        trainer="specforge",
        trainer_version=version("specforge"),
        command="tox -e fixtures-specforge",
        export="specforge.export.to_sglang.export_to_sglang",
        selected_target_ids=result["selected_target_ids"],
        aux_layer_ids=result["aux_layer_ids"],
        aux_layer_convention=AUX_CONVENTION,
        dtype=float_dtype(out_dir / "model.safetensors"),
        functions_called=FUNCTIONS_CALLED,
        load_target_embedding=True,
        reference=ref,
        **({"config_flags": switches} if switches else {}),
        **({"ttt_length": ttt_length} if ttt_length else {}),
        **({} if target is LLAMA_TINY else {"target": target.name}),
    )
    print(json.dumps(entry, indent=2))
    return entry


if __name__ == "__main__":
    main()
