"""Build the two speculators 0.9.0 EAGLE-3 draft fixtures with the real library, for the tiny target
fixtures/targets/llama-tiny (1 draft decoder layer, draft vocab 64, vocab mapping from
fixtures/vocab/token_freq.json):

  fixtures/drafts/speculators-default  the library's build path with Eagle3SpeculatorConfig's defaults
      (all norm flags false), `Eagle3DraftModel.from_training_args` (config + model + vocab mapping +
      embed_tokens / lm_head[t2d] from the verifier), saved fp32 by `save_pretrained`.
  fixtures/drafts/speculators-train    what `speculators train` builds and writes with its own defaults
      (norm_before_residual, norm_before_fc and norm_output true, sliding-window llama draft layer),
      made by the CLI's own pieces: `TrainConfig.resolve` (its argument parser and defaults),
      `set_seed`, `parse_vocab_mappings`, `build_draft_model`, then the trainer's checkpoint writer
      `SingleGPUCheckpointer.save_checkpoint` (bf16). The training loop is not run: the weights are
      the initial ones.

  fixtures/drafts/speculators-default-hd32, speculators-train-hd32  the same two builds for
      fixtures/targets/llama-tiny-hd32 (head size 32, which vLLM's CPU attention kernel takes), so both engines
      replay their forwards.

  fixtures/drafts/speculators-kimi-k25  the failure this project was born from, replayed at tiny scale: the
      same library build path as speculators-default (layers.0.*, offset d2t, trained head, verifier
      embedding) with the scaled-down Kimi-K2.5 target fixtures/targets/kimi-k25-tiny as its verifier, saved
      by `save_pretrained`. No reference forward (the Kimi target has only its vocabulary tensors).

Each run also writes fixtures/references/<fixture>.safetensors for the `forward-parity` contract: the
committed checkpoint reloaded with speculators' own loader (`Eagle3DraftModel.from_pretrained`, so the
bf16 train fixture is computed from exactly its bf16 weights), float32, `sdpa` attention (the library's
default flex attention needs T % 128 == 0), fed the tiny target's real aux hidden states at the
draft's own aux layer ids, and its training forward (`Eagle3DraftModel.forward`, one TTT step)
observed at `lm_head` with a forward hook (the forward itself returns token ids).

Why: the contract suite judges what these trainers really write (key names, d2t/t2d, dtypes, nested
config, aux layer ids), so the fixtures come from speculators' own code, not a re-implementation.
The verifier is named by the repo-relative path `fixtures/targets/llama-tiny` (the process runs from
the repo root), so no path of the building machine is stored. Seeded and reproducible.

    tox -e fixtures-speculators        (runs contracts.trainers.target first, then this module)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import warnings
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
    TrainerAPIChanged,
    chain_logits,
    record_fixture,
    repo_relative,
    require_parameters,
    saved_tensors,
    step_0_and_fed_state,
    switch_semantics,
    target_reference_inputs,
    token_frequencies,
    write_reference,
)

VERIFIER = LLAMA_TINY.path  # "fixtures/targets/llama-tiny", stored in config.json
DRAFTS = FIXTURES / "drafts"
COMMAND = "tox -e fixtures-speculators"
KEEP = ("config.json", "model.safetensors")  # everything else a writer leaves behind is dropped

# What speculators means by an aux layer id, read from its sources: the ids go to vLLM's hidden-state
# capture, which appends `hidden_states + residual` *before* running decoder layer `idx`
# (vllm/model_executor/models/llama.py); speculators' dflash converter maps z-lab's
# `hidden_states[layer_id + 1]` to speculators id `layer_id + 1` ("speculators uses the layer id
# directly"); resolve_target_layer_ids accepts id == num_layers as "the final hidden state".
AUX_CONVENTION = (
    "id k = the residual stream entering 0-based target decoder layer k (output of layer k-1), "
    "i.e. HF output_hidden_states[k]; k = num_hidden_layers means the final hidden state "
    "(vLLM capture convention; SGLang instead captures hidden_states[k+1] for an explicit id k)"
)


def _clean_dir(directory: Path) -> None:
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)


def _copy_kept(src: Path, dst: Path) -> list[str]:
    """Copy the checkpoint files into the fixture dir; return the names of the files dropped."""
    _clean_dir(dst)
    dropped = []
    for p in sorted(src.iterdir()):
        if p.name in KEEP:
            shutil.copyfile(p, dst / p.name)
        else:
            dropped.append(p.name)
    missing = [n for n in KEEP if not (dst / n).is_file()]
    if missing:
        raise RuntimeError(f"speculators wrote no {missing} in {src}")
    return dropped


def _check_no_local_paths(directory: Path, scratch: str) -> None:
    text = (directory / "config.json").read_text()
    for bad in (str(REPO_ROOT), scratch, tempfile.gettempdir() + os.sep):
        if bad in text:
            raise RuntimeError(f"{directory}/config.json contains a local path ({bad})")


def _details(model, functions: list[str], dropped: list[str], **extra) -> dict:
    import torch

    cfg = model.config
    d2t = model.d2t
    selected = (torch.arange(d2t.shape[0]) + d2t).tolist()
    t2d_ids = torch.nonzero(model.t2d).flatten().tolist()
    if selected != t2d_ids:
        raise RuntimeError("speculators' d2t and t2d disagree")
    aux = getattr(cfg, "eagle_aux_hidden_state_layer_ids", None)  # None where the release writes no ids (0.4)
    return dict(
        selected_target_ids=selected,
        aux_layer_ids=list(aux) if aux is not None else None,
        aux_layer_convention=AUX_CONVENTION,
        config_flags={k: getattr(cfg, k) for k in
                      ("norm_before_residual", "norm_before_fc", "norm_output", "fc_norm") if hasattr(cfg, k)},
        verifier_name_or_path=cfg.speculators_config.verifier.name_or_path,
        functions_called=functions,
        files_dropped=dropped,
        **extra,
    )


def _construct(layer_config, d2t, t2d, verifier: str, ttt_steps: int):
    """The draft, by the construction path the installed release has (detected, not read off its version):
    ``Eagle3DraftModel.from_training_args`` (0.4.0 and later), else the config and constructor by hand, as the
    release's own scripts/train.py does (0.3.0: ``Eagle3DraftModel(config, t2d, d2t)``, which reads the verifier
    itself). Returns the model and the functions the path called."""
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    defaults = Eagle3SpeculatorConfig.model_fields
    if hasattr(Eagle3DraftModel, "from_training_args"):
        model = Eagle3DraftModel.from_training_args(
            verifier_config=layer_config,
            t2d=t2d,
            d2t=d2t,
            verifier_name_or_path=verifier,
            draft_vocab_size=int(d2t.shape[0]),
            # required keyword of from_training_args; the config class's default (False)
            norm_before_residual=defaults["norm_before_residual"].default,
            # required keyword; GreedyTokenProposalConfig's default speculative_tokens (5)
            ttt_steps=ttt_steps,
            # norm_before_fc / fc_norm / norm_output / embed_requires_grad / target_layer_ids left
            # unset: from_training_args falls back to False / False / False / False / the default ids.
        )
        return model, ["speculators.models.eagle3.core.Eagle3DraftModel.from_training_args"]
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    require_parameters(Eagle3DraftModel.__init__, "speculators Eagle3DraftModel.__init__", "config", "t2d", "d2t")
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer_config,
        draft_vocab_size=int(d2t.shape[0]),
        norm_before_residual=defaults["norm_before_residual"].default,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=ttt_steps)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=verifier, architectures=["LlamaForCausalLM"]),
        ),
    )
    return Eagle3DraftModel(config, t2d, d2t), [
        "speculators.models.eagle3.config.Eagle3SpeculatorConfig",
        "speculators.config.SpeculatorsConfig", "speculators.config.VerifierConfig",
        "speculators.models.eagle3.core.Eagle3DraftModel.__init__(config, t2d, d2t)"]


def _library_build(scratch: Path, verifier: str, name: str, geometry: dict = LLAMA_TINY.geometry,
                   directory: Path | None = None):
    """The library's build path with the config class's defaults against ``verifier``, saved by save_pretrained
    (fp32) to fixtures/drafts/<name> (or ``directory``); returns the model, the files the writer left that are not
    kept, and the construction functions the installed release called."""
    import torch
    import transformers
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    torch.manual_seed(SEED)
    vocab = int(geometry["vocab_size"])
    d2t, t2d = build_vocab_mappings_from_distribution(
        token_freq_dict=token_frequencies(vocab), draft_vocab_size=DRAFT_VOCAB, target_vocab_size=vocab,
    )
    # One decoder layer of the target's geometry (LlamaConfig defaults otherwise).
    layer_config = transformers.LlamaConfig(**{**geometry, "num_hidden_layers": 1})
    model, construction = _construct(layer_config, d2t, t2d, verifier,
                                     GreedyTokenProposalConfig.model_fields["speculative_tokens"].default)
    out = scratch / name
    model.save_pretrained(out)
    fixture = directory is None
    directory = directory or DRAFTS / name
    dropped = _copy_kept(out, directory)
    if fixture:  # a build-tiny output names its target by the path it was given
        _check_no_local_paths(directory, str(scratch))
    return model, dropped, construction


LIBRARY_BUILD_FUNCTIONS = [
    "speculators.train.vocab_mapping.build_vocab_mappings_from_distribution",
    "speculators.models.eagle3.core.Eagle3DraftModel.from_training_args",
    "speculators.models.utils.resolve_target_layer_ids",
    "speculators.models.eagle3.config.Eagle3SpeculatorConfig",
    "speculators.config.VerifierConfig.from_pretrained",
    "speculators.models.eagle3.core.Eagle3DraftModel.__init__",
    "speculators.model.DraftVocabMixin.load_vocab_mappings",
    "speculators.models.eagle3.core.Eagle3DraftModel.load_verifier_weights",
    "transformers.PreTrainedModel.save_pretrained",
]


def build_default(scratch: Path, target: TinyTarget = LLAMA_TINY, name: str = "speculators-default",
                  directory: Path | None = None) -> dict:
    """The library's build path with the config class's defaults, saved by save_pretrained (fp32)."""
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    model, dropped, construction = _library_build(scratch, target.path, name, target.geometry, directory)
    functions = LIBRARY_BUILD_FUNCTIONS if construction == LIBRARY_BUILD_FUNCTIONS[1:2] else \
        [LIBRARY_BUILD_FUNCTIONS[0], *construction, "transformers.PreTrainedModel.save_pretrained"]
    return _details(
        model, functions, dropped,
        dtype="float32",
        build="Eagle3SpeculatorConfig defaults; transformer_layer_config = "
              "transformers.LlamaConfig(target geometry, num_hidden_layers=1)",
        ttt_steps=GreedyTokenProposalConfig.model_fields["speculative_tokens"].default,
        **({} if target is LLAMA_TINY else {"target": target.name}),
    )


KIMI_VERIFIER = "fixtures/targets/kimi-k25-tiny"


def build_kimi(scratch: Path) -> dict:
    """speculators-default's build with the Kimi-K2.5-shaped verifier (the draft layer stays Llama-shaped)."""
    model, dropped, _ = _library_build(scratch, KIMI_VERIFIER, "speculators-kimi-k25")
    return _details(
        model, LIBRARY_BUILD_FUNCTIONS, dropped,
        dtype="float32",
        build="as speculators-default, verifier fixtures/targets/kimi-k25-tiny (KimiK25ForConditionalGeneration)",
        target="target-kimi-k25-tiny",
    )


def build_train(scratch: Path, target: TinyTarget = LLAMA_TINY, name: str = "speculators-train") -> dict:
    """`speculators train`'s defaults and model build, written by its trainer's checkpoint writer."""
    import torch
    from speculators.model import SpeculatorModel
    from speculators.train.checkpointer import SingleGPUCheckpointer
    from speculators.train.cli import build_draft_model, parse_vocab_mappings, set_seed
    from speculators.train.config import TrainConfig

    data = scratch / f"{name}-data"
    data.mkdir()
    # The CLI reads token frequencies as a torch.save'd {token_id: count} dict (save_token_frequency_
    # distribution's format) and builds d2t/t2d from it with build_vocab_mappings_from_distribution.
    torch.save(dict(sorted(token_frequencies().items())), data / "token_freq.pt")
    argv = [
        "--verifier-name-or-path", target.path,
        "--data-path", str(data),
        "--save-path", str(scratch / f"{name}-ckpt"),
        "--draft-vocab-size", str(DRAFT_VOCAB),
        "--seed", str(SEED),
        # eagle3 never uses the mask token; without it build_draft_model asks the verifier's
        # tokenizer, which the tiny target does not have.
        "--mask-token-id", "0",
    ]
    cfg = TrainConfig.resolve(argv)
    args = argparse.Namespace(**cfg.flatten())  # what speculators.train.cli.main does
    set_seed(args.seed, args.deterministic_cuda)
    d2t, t2d, draft_vocab_size = parse_vocab_mappings(args)
    model_class = SpeculatorModel.registry[args.speculator_type]
    model = build_draft_model(args, model_class, t2d, d2t, draft_vocab_size)
    # The trainer saves through its checkpointer with the default float_dtype (bf16), no optimizer here.
    checkpointer = SingleGPUCheckpointer(scratch / f"{name}-ckpt")
    checkpointer.save_checkpoint(model, [], 0)
    directory = DRAFTS / name
    dropped = _copy_kept(scratch / f"{name}-ckpt" / "0", directory)
    _check_no_local_paths(directory, str(scratch))
    flags = {k: getattr(args, k) for k in (
        "speculator_type", "num_layers", "draft_arch", "draft_hidden_act", "sliding_window",
        "full_attention_indices", "draft_attn_impl", "target_layer_ids", "norm_before_residual",
        "norm_before_fc", "fc_norm", "norm_output", "embed_requires_grad", "ttt_steps",
        "hidden_states_dtype", "seed")}
    return _details(
        model,
        [
            "speculators.train.config.TrainConfig.resolve",
            "speculators.train.cli.set_seed",
            "speculators.train.cli.parse_vocab_mappings",
            "speculators.train.cli._generate_vocab_mappings",
            "speculators.train.vocab_mapping.build_vocab_mappings_from_distribution",
            "speculators.train.cli.build_draft_model",
            "speculators.train.cli.create_transformer_layer_config",
            "speculators.models.eagle3.core.Eagle3DraftModel.from_training_args",
            "speculators.models.utils.resolve_target_layer_ids",
            "speculators.model.DraftVocabMixin.load_vocab_mappings",
            "speculators.models.eagle3.core.Eagle3DraftModel.load_verifier_weights",
            "speculators.train.checkpointer.SingleGPUCheckpointer.save_checkpoint",
            "speculators.train.checkpointer.convert_float_dtype",
            "transformers.PreTrainedModel.save_pretrained",
            "speculators.train.checkpointer.patch_config_dtype",
        ],
        dropped,
        dtype="bfloat16",
        cli_argv=["speculators", "train", *[a if a not in (str(data), str(scratch / f"{name}-ckpt"))
                                             else "<scratch>" for a in argv]],
        cli_resolved=flags,
        **({} if target is LLAMA_TINY else {"target": target.name}),
    )


REFERENCE_FUNCTIONS = [
    "speculators.models.eagle3.config.Eagle3SpeculatorConfig.from_pretrained",
    "speculators.models.eagle3.core.Eagle3DraftModel.from_pretrained",
    "speculators.model.SpeculatorModel.from_pretrained",
    "speculators.model.DraftVocabMixin.load_vocab_mappings",
    "speculators.models.eagle3.core.Eagle3DraftModel.load_verifier_weights",
    "speculators.models.eagle3.core.Eagle3DraftModel.forward",
    "torch.nn.Module.register_forward_hook(Eagle3DraftModel.lm_head)",
]
REFERENCE_ATTN = "sdpa"


def trained_hidden_states(aux_ids: list[int] | None, num_layers: int) -> tuple[list[int], str]:
    """The transformers ``hidden_states`` indices the installed release trains on, read off its own code: where the
    release carries its own vLLM worker extension for hidden-state generation (0.3.0, 0.4.x:
    ``data_generation/custom_worker.py``), the patched forward appends ``hidden_states + residual`` after running
    layer k, so id k is ``hidden_states[k + 1]``, and its generator's default ids are ``[2, N//2, N-3]`` (the draft
    config records none); later releases use vLLM's own capture, id k = ``hidden_states[k]`` (AUX_CONVENTION)."""
    import importlib.util

    # located through the top package and read, never imported: speculators.data_generation imports vllm
    package = importlib.util.find_spec("speculators")
    locations = (package.submodule_search_locations if package else None) or []
    worker = next((Path(d) / "data_generation" / "custom_worker.py" for d in locations
                   if (Path(d) / "data_generation" / "custom_worker.py").is_file()), None)
    if worker is not None:
        source = worker.read_text()
        run, append = source.find("= layer("), source.find("aux_hidden_states.append((hidden_states + residual)")
        if 0 <= run < append:
            ids = list(aux_ids) if aux_ids is not None else [2, num_layers // 2, num_layers - 3]
            return [k + 1 for k in ids], ("speculators.data_generation.custom_worker appends hidden_states + "
                                          "residual after running layer k: id k is hidden_states[k+1]; ids "
                                          + ("from the config" if aux_ids is not None else
                                             "VllmHiddenStatesGenerator's default [2, N//2, N-3] (none saved)"))
    if aux_ids is None:
        raise TrainerAPIChanged("speculators saved no eagle_aux_hidden_state_layer_ids and has no data-generation "
                                "worker of its own to read its capture from")
    return list(aux_ids), AUX_CONVENTION


def _reload(directory: Path, config):
    """The saved checkpoint as the installed release reloads it: ``Eagle3DraftModel.from_pretrained`` where its
    constructor takes only the config (0.5.0 and later), else the constructor with the saved ``t2d`` / ``d2t`` and
    the saved tensors loaded into it (0.3.0, 0.4.x, whose ``from_pretrained`` passes arguments the constructor does
    not take)."""
    import inspect

    import torch
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3DraftModel

    if "t2d" not in inspect.signature(Eagle3DraftModel.__init__).parameters:
        return Eagle3DraftModel.from_pretrained(directory, config=config, dtype=torch.float32), \
            "Eagle3DraftModel.from_pretrained(dtype=float32)"
    state = load_file(str(directory / "model.safetensors"))
    model = Eagle3DraftModel(config, t2d=state["t2d"], d2t=state["d2t"])
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not k.startswith("verifier_")]:
        raise RuntimeError(f"speculators' draft does not take its own checkpoint: missing {missing}, "
                           f"unexpected {unexpected}")
    return model.to(torch.float32), "Eagle3DraftModel(config, t2d, d2t) + load_state_dict(saved tensors)"


def _switch_semantics(model, forward, inputs: dict, extra: dict) -> dict:
    """speculators' own meaning of each EAGLE-3.1 switch the draft has (``common.switch_semantics``): flipped where
    the release's forward reads it (the config's ``norm_output``, the first layer's ``norm_before_residual``; the
    ``input_norm`` / ``fc_norm`` modules off when present), on the same weights."""
    hidden = int(model.embed_tokens.weight.shape[-1])

    def run():  # step 1's first layer receives cat(embeds, the state fed back)
        return step_0_and_fed_state(
            model.lm_head, model.layers[0],
            lambda: forward(model, hidden_states=inputs["hidden_states"][None], input_ids=inputs["input_ids"][None],
                            **extra, position_ids=inputs["positions"][None], ttt_steps=2),
            lambda args, kwargs: (args[0] if args else kwargs["hidden_states"])[..., -hidden:])

    flips: dict[str, tuple] = {}
    config, first = model.config, model.layers[0]
    for key, owner in (("norm_output", config), ("norm_before_residual", first)):
        if isinstance(getattr(owner, key, None), bool):
            value = getattr(owner, key)
            flips[key] = (value, lambda o=owner, k=key, v=value: setattr(o, k, not v),
                          lambda o=owner, k=key, v=value: setattr(o, k, v))
    for key, attr in (("norm_before_fc", "input_norm"), ("fc_norm", "fc_norm")):
        module = getattr(model, attr, None)
        if module is not None:
            flips[key] = (True, lambda a=attr: setattr(model, a, None), lambda a=attr, m=module: setattr(model, a, m))
    return switch_semantics(run, flips)


def teacher_forced_steps(inputs: dict, fed_ids: list, fed_positions: list) -> int:
    """How many leading TTT steps the release ran as the engines' chain does, read from what it fed: step k embedded
    input_ids shifted left by k (the ground-truth token the chain drafts) at positions + k. A release that feeds its
    own argmax instead (no teacher forcing) keeps step 0 only: its later rows follow tokens no replay can know."""
    import torch

    ids, pos = inputs["input_ids"], inputs["positions"]
    t = ids.shape[0]
    for k, fed in enumerate(fed_ids):
        same_ids = torch.equal(fed.reshape(-1)[:t - k], ids[k:])
        same_pos = k < len(fed_positions) and torch.equal(fed_positions[k].reshape(-1)[:t - k], pos[:t - k] + k)
        if not (same_ids and same_pos):
            return max(k, 1)
    return len(fed_ids)


def reference(name: str, version: str, target: TinyTarget = LLAMA_TINY, directory: Path | None = None,
              path: Path | None = None, verifier: Path | None = None) -> dict:
    """Step-0 logits of speculators' own training forward on the committed checkpoint fixtures/drafts/<name> (or
    ``directory``, written to ``path``), through the reload, attention and forward signature the installed release
    has. ``verifier``: the target the draft's config names as its verifier, where that name is not a local path here
    (a user's draft names its verifier as published, e.g. a hub id)."""
    import inspect

    import torch
    import transformers
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    directory = directory or DRAFTS / name
    config = Eagle3SpeculatorConfig.from_pretrained(directory)
    if verifier is not None:
        config.speculators_config.verifier.name_or_path = str(verifier)
    forward = Eagle3DraftModel.forward
    forward = getattr(forward, "_torchdynamo_orig_callable", forward)  # 0.3.0 compiles it unconditionally
    # Eagle3DraftModel.__init__ forces simple_flex_attention only when this is unset (0.7.0 on) or always (0.5.x,
    # 0.6.x). 0.3.0 and 0.4.x never read it, and their forward always hands the layers a flex BlockMask: there the
    # release's own registered simple_flex_attention is the only attention its forward can run.
    reads_attn = "_attn_implementation" in inspect.getsource(Eagle3DraftModel.__init__)
    block_mask_only = not reads_attn and "create_block_mask" in inspect.getsource(forward)
    config.transformer_layer_config._attn_implementation = "simple_flex_attention" if block_mask_only \
        else REFERENCE_ATTN
    model, reloaded_by = _reload(directory, config)
    model = model.eval()
    # 0.5.x / 0.6.x force simple_flex_attention in __init__ (no switch); later releases honour the layer config's
    attn = getattr(model, "_attn_impl", model.config.transformer_layer_config._attn_implementation)
    if attn != REFERENCE_ATTN and reads_attn and "draft_attn_impl" in Eagle3SpeculatorConfig.model_fields:
        raise RuntimeError(f"speculators runs {attn}, not {REFERENCE_ATTN}")
    # Same weights as the file, bit for bit (bf16 -> fp32 is exact); embed_tokens is the saved one.
    state = model.state_dict()
    saved_dtype = None
    for key, tensor in saved_tensors(directory):
        if not torch.equal(tensor.to(state[key].dtype), state[key]):
            raise RuntimeError(f"{name}: reloaded {key} differs from the checkpoint")
        if key == "fc.weight":
            saved_dtype = str(tensor.dtype).removeprefix("torch.")

    aux_ids = getattr(model.config, "eagle_aux_hidden_state_layer_ids", None)
    hidden_states, convention = trained_hidden_states(aux_ids, int(target.geometry["num_hidden_layers"]))
    inputs, meta = target_reference_inputs(hidden_states, target)
    by_document = "document_ids" in inspect.signature(forward).parameters  # 0.7.0 on; before: lengths
    extra = {"document_ids": torch.zeros_like(inputs["input_ids"])[None]} if by_document else \
        {"lengths": torch.tensor([inputs["input_ids"].shape[0]])}
    captured, fed_ids, fed_positions = [], [], []
    hooks = [model.lm_head.register_forward_hook(lambda _m, _i, out: captured.append(out.detach().clone())),
             model.embed_tokens.register_forward_hook(lambda _m, args, _o: fed_ids.append(args[0].detach().clone()))]
    rotary = getattr(model, "rotary_emb", None)
    if rotary is not None:  # the positions each step's RoPE is given (hidden, position_ids)
        hooks.append(rotary.register_forward_hook(lambda _m, args, _o: fed_positions.append(args[1].detach().clone())))
    try:
        with torch.no_grad():
            forward(
                model,
                hidden_states=inputs["hidden_states"][None],
                input_ids=inputs["input_ids"][None],
                **extra,
                position_ids=inputs["positions"][None],
                ttt_steps=REFERENCE_STEPS,
            )
    finally:
        for hook in hooks:
            hook.remove()
    if len(captured) != REFERENCE_STEPS:
        raise RuntimeError(f"lm_head ran {len(captured)} times in {REFERENCE_STEPS} TTT steps")
    steps = teacher_forced_steps(inputs, fed_ids, fed_positions)
    step_logits = chain_logits([c[0] for c in captured[:steps]]) if steps > 1 else None
    try:  # auxiliary to the reference: a release whose model lacks these seams records none
        switches = _switch_semantics(model, forward, inputs, extra) if steps > 1 else None
    except (AttributeError, IndexError, KeyError, TypeError):
        switches = None
    functions = REFERENCE_FUNCTIONS if reloaded_by.startswith("Eagle3DraftModel.from_pretrained") else \
        ["speculators.models.eagle3.config.Eagle3SpeculatorConfig.from_pretrained",
         "speculators.models.eagle3.core.Eagle3DraftModel.__init__", "torch.nn.Module.load_state_dict",
         *REFERENCE_FUNCTIONS[-2:]]
    metadata = {
        **meta,
        "fixture": name,
        "trainer": "speculators",
        "version": version,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "functions_called": json.dumps(functions),
        "forward_call": (
            "Eagle3DraftModel.forward(hidden_states=[1,T,3H], input_ids=[1,T], "
            + ("document_ids=zeros[1,T], " if by_document else "lengths=[T], ")
            + f"position_ids=positions[None], ttt_steps={REFERENCE_STEPS}) under torch.no_grad; no "
            "verifier_last_hidden_states, so no loss; logits = output of lm_head (hook) at each TTT step, shape "
            f"[1,T,draft_vocab]; {steps} step(s) kept: a step is kept when the ids it embedded (hook on "
            "embed_tokens) are input_ids shifted by the step and its RoPE positions are positions + step"),
        "attn_implementation": attn,
        "dtype": "float32",
        "weights": (f"{repo_relative(directory)}/{_weights_name(directory)} ({saved_dtype} on disk) reloaded by "
                    f"{reloaded_by}; every tensor equal to the file's"),
        "embed_tokens": (f"the checkpoint's embed_tokens ({saved_dtype}), which speculators copied from the "
                         f"verifier {target.path} (load_verifier_weights)"),
        "aux_layer_ids": json.dumps(list(aux_ids) if aux_ids is not None else None),
        "config_flags": json.dumps({k: getattr(model.config, k) for k in
                                    ("norm_before_residual", "norm_before_fc", "norm_output", "fc_norm")
                                    if hasattr(model.config, k)}),
        "positions_note": ("speculators' shift_batch gives this pairing position_ids 1..T in training; the "
                           "reference passes 0..T-1 (SGLang's positions), a uniform RoPE shift"),
    }
    if convention != AUX_CONVENTION:
        metadata["aux_convention_note"] = convention
    out = write_reference(name, inputs, captured[0][0], metadata, path, step_logits=step_logits, switches=switches)
    out["trained_hidden_states"] = hidden_states
    return out


def _weights_name(directory: Path) -> str:
    """How a reference names the weights it was computed from: the one file, or the directory's shards."""
    files = sorted(p.name for p in Path(directory).glob("*.safetensors"))
    return files[0] if len(files) == 1 else f"{{{','.join(files)}}}" if files else "(pickle weights)"


def build_tiny(scratch: Path, target: TinyTarget, draft: Path, reference_path: Path | None) -> dict:
    """``build-tiny --trainer speculators``: speculators-default's build (the library's build path, the config
    class's defaults) with the installed release, into ``draft``, and its reference forward."""
    from importlib.metadata import version

    details = build_default(scratch, target, "tiny", directory=draft)
    if reference_path is not None:
        details["reference"] = reference("tiny", version("speculators"), target, draft, reference_path)
    return details


def main() -> None:
    os.chdir(REPO_ROOT)  # VERIFIER is relative to the repo root
    from speculators.version import version as speculators_version  # the package has no __version__

    warnings.filterwarnings("ignore", message=".*target-layer-ids is not explicitly set.*")
    DRAFTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="speculators-fixtures-") as tmp:
        scratch = Path(tmp)
        hd32 = LLAMA_TINY_HD32
        builds = (("speculators-default", lambda s: build_default(s), LLAMA_TINY),
                  ("speculators-train", lambda s: build_train(s), LLAMA_TINY),
                  ("speculators-kimi-k25", build_kimi, None),
                  ("speculators-default-hd32", lambda s: build_default(s, hd32, "speculators-default-hd32"), hd32),
                  ("speculators-train-hd32", lambda s: build_train(s, hd32, "speculators-train-hd32"), hd32))
        for name, build, target in builds:
            details = build(scratch)
            if target is not None:
                details["reference"] = reference(name, speculators_version, target)
                details["reference"].pop("trained_hidden_states")  # the manifest's convention field says it
            entry = record_fixture(
                name, DRAFTS / name, trainer="speculators", trainer_version=speculators_version,
                command=COMMAND, **details,
            )
            print(f"{name}: {entry['path']} {json.dumps(entry['files'])}", file=sys.stderr)


if __name__ == "__main__":
    main()
