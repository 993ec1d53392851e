"""The trainer's expectation: the acceptance a draft would reach if it were served exactly as its trainer computes it.

``accept`` measures acceptance on vLLM's serving loop; this is the number to set beside it. It runs, in the trainer's
own environment, greedy speculative decoding of the same prompts: the target in transformers (float32) verifies,
and the draft proposes through the trainer's own training forward, fed its own proposals. A gap between the two is
what the engine does differently from the trainer; the contracts say where.

Greedy decoding, as vLLM's loop runs it: after the prompt the target emits a token; every round the draft proposes
``tokens`` ids from the target's aux hidden states of the verified sequence and that token; the target keeps the
longest prefix equal to its own greedy choices and adds one token of its own. Mean acceptance length = 1 + accepted
draft tokens per round, counted until each prompt has ``max_tokens`` new tokens (as vLLM's counters count them).

    python -m contracts.trainers.expectation DRAFT_DIR TARGET_DIR JSON_OPTIONS     (one JSON line on stdout)
"""

from __future__ import annotations

import json
import pkgutil
import sys
from pathlib import Path

from contracts.trainer_profile import PROFILES


def speculate(propose, target, prompts: list[list[int]], tokens: int, max_tokens: int) -> dict:
    """Greedy speculative decoding of ``prompts``: ``target(ids)`` returns the target's logits [len(ids), V] and its
    aux hidden states [len(ids), k*H]; ``propose(seq, states, bonus, k)`` returns k target ids drafted after
    ``seq + [bonus]`` from ``states`` (the aux states of ``seq``). One target forward per round: it verifies the
    drafted ids and, the model being causal, its states for the kept prefix are the next round's."""
    rounds = accepted = 0
    per_position = [0] * tokens
    for prompt in prompts:
        seq = list(prompt)
        logits, states = target(seq)
        bonus = int(logits[-1].argmax())
        generated = 1
        while generated < max_tokens:
            k = min(tokens, max_tokens - generated)
            drafted = propose(seq, states[:len(seq)], bonus, k)
            logits, states = target(seq + [bonus] + drafted)
            greedy = logits[len(seq):].argmax(dim=-1).tolist()  # the target's choice after bonus, d1, ...
            a = 0
            while a < k and drafted[a] == greedy[a]:
                per_position[a] += 1
                a += 1
            rounds += 1
            accepted += a
            seq = seq + [bonus] + drafted[:a]
            bonus = greedy[a]
            generated += a + 1
    return {"mean_acceptance_length": 1 + accepted / rounds if rounds else None,
            "acceptance_rate_per_position": [p / rounds for p in per_position] if rounds else [],
            "rounds": rounds, "accepted_tokens": accepted}


def _hf_target(target_dir: str, hidden_state_indices: list[int]):
    """The target in transformers (float32): ``target(ids)`` -> its logits and the hidden states the trainer was
    trained on (HF ``hidden_states`` at ``hidden_state_indices``, concatenated low..high, [len(ids), k*H])."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32, attn_implementation="sdpa").eval()

    def target(ids):
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_hidden_states=True)
        return out.logits[0], torch.cat([out.hidden_states[k][0] for k in hidden_state_indices], dim=-1)

    return target


def speculators_proposer(draft_dir: str, target_dir: str):
    """speculators' own ``Eagle3DraftModel.forward`` (reloaded as the release reloads it), run with ``ttt_steps`` = 1..k
    on the verified sequence, its own earlier proposals written where its teacher forcing reads the next token: the
    chain it trains, fed its own argmax, as an engine feeds it. Returns (propose, target, description)."""
    import inspect

    import torch
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    from contracts.trainers.speculators import REFERENCE_ATTN, _reload, trained_hidden_states

    config = Eagle3SpeculatorConfig.from_pretrained(draft_dir)
    config.transformer_layer_config._attn_implementation = REFERENCE_ATTN
    # the verifier it reads its loss-only tensors from: the target given (the saved name may be a hub id or relative)
    config.speculators_config.verifier.name_or_path = target_dir
    model, _ = _reload(Path(draft_dir), config)
    model = model.eval()
    layers = json.loads((Path(target_dir) / "config.json").read_text()).get("num_hidden_layers")
    indices, _ = trained_hidden_states(getattr(model.config, "eagle_aux_hidden_state_layer_ids", None), int(layers))
    target = _hf_target(target_dir, indices)
    forward = Eagle3DraftModel.forward
    by_document = "document_ids" in inspect.signature(forward).parameters
    d2t = model.d2t.long()

    def propose(seq, states, bonus, k):
        n = len(seq)
        states = torch.cat([states, states.new_zeros(k - 1, states.shape[-1])])[None]
        ids = torch.tensor([seq[1:] + [bonus] + [0] * (k - 1)])
        extra = {"document_ids": torch.zeros_like(ids)} if by_document else {"lengths": torch.tensor([ids.shape[1]])}
        drafted = []
        for step in range(k):
            with torch.no_grad():
                draft = forward(model, hidden_states=states, input_ids=ids, **extra, ttt_steps=step + 1)
            j = int(draft[step][0, n - 1])  # the draft-vocab argmax of step ``step`` at the last anchor
            drafted.append(j + int(d2t[j]))
            if n + step < ids.shape[1]:
                ids[0, n + step] = drafted[-1]
        return drafted

    return propose, target, (f"speculators Eagle3DraftModel.forward (ttt_steps 1..k, its own proposals fed back), "
                             f"target in transformers float32, hidden_states{indices}")


def modelopt_proposer(draft_dir: str, target_dir: str):
    """Model Optimizer's own speculative generation, ``HFEagleModel.pseudo_speculative_generate`` (what its
    ``AcceptanceRateValidation`` runs): the target converted with its EAGLE-3 module as a user's training run
    converts it (``EAGLE3_DEFAULT_CFG`` with the export's geometry, aux ids and draft vocabulary; the rope it trains
    with, not the one its export declares), the exported weights loaded into that module. Each round it recomputes
    the target's next token and drafts ``k`` from it. Returns (propose, target, description)."""
    import torch

    from contracts.trainers.common import TinyTarget
    from contracts.trainers.modelopt import load_export

    target_model = TinyTarget.from_directory(Path(target_dir))
    model, draft_vocab = load_export(Path(draft_dir), target_model)
    model = model.eval()
    target = _hf_target(target_dir, [0])  # it verifies; the module captures its own aux states

    def propose(seq, _states, bonus, k):
        with torch.no_grad():
            base, drafted = model.pseudo_speculative_generate(torch.tensor([seq]), steps=k)
        if int(base[0, 0]) != bonus:
            raise RuntimeError(f"Model Optimizer's base forward chose {int(base[0, 0])}, the target {bonus}")
        return [int(t) for t in drafted[0]]

    ids = list(model.eagle_config.eagle_aux_hidden_state_layer_ids)
    return propose, target, (f"Model Optimizer HFEagleModel.pseudo_speculative_generate (EAGLE3_DEFAULT_CFG, aux ids "
                             f"{ids}, draft vocab {draft_vocab}, its training rope), target in transformers float32")


def specforge_proposer(draft_dir: str, target_dir: str):
    """SpecForge's own training step (``Eagle3TrainStrategy.forward_loss`` -> ``OnlineEagle3Model.forward``, the
    export warm-started into the draft ``specforge train`` builds, float32, sdpa) on the verified sequence, stopped
    after the step wanted, its own earlier proposals written where its TTT shift reads the next token: the chain it
    trains, fed its own argmax. Its capture id k is HF ``hidden_states[k + 1]``. Returns (propose, target,
    description)."""
    import tempfile

    import torch
    from specforge.algorithms.model_providers import resolve_eagle_capture_layers
    from specforge.application.composition import resolve_run
    from specforge.runtime.contracts import TrainBatch
    from specforge.training.model_loading import resolve_draft_config
    from transformers import AutoConfig

    from contracts.trainers.common import TinyTarget
    from contracts.trainers.specforge import _StepsDone, training_step

    found = TinyTarget.from_directory(Path(target_dir))
    target_model = TinyTarget(found.name, found.directory, found.geometry, stored_as=str(Path(target_dir).resolve()))
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-specforge-expectation-") as work:
        cfg, draft_model, model, strategy = training_step(Path(work), Path(draft_dir) / "config.json",
                                                          Path(draft_dir), target_model)
    # the layers it captures, as its own training run resolves them
    provider = resolve_run(cfg).algorithm.providers.model
    capture = resolve_eagle_capture_layers(cfg, resolve_draft_config(cfg, provider=provider.draft_config),
                                           AutoConfig.from_pretrained(target_dir))
    indices = [k + 1 for k in capture]
    target = _hf_target(target_dir, indices)
    d2t = draft_model.d2t.long()
    model._acc_and_loss = lambda **_kw: (torch.zeros(()),) * 7  # the loss reads the logits, feeds nothing back

    def propose(seq, states, bonus, k):
        n = len(seq)
        ids = torch.tensor([seq[1:] + [bonus] + [0] * (k - 1)])
        hidden = torch.cat([states, states.new_zeros(k - 1, states.shape[-1])])[None]
        t = ids.shape[1]
        drafted = []
        for step in range(k):
            captured = []

            def record(_module, _inputs, out, wanted=step + 1):
                captured.append(out.detach())  # noqa: B023  (the hook runs within this iteration)
                if len(captured) == wanted:  # noqa: B023
                    raise _StepsDone

            hook = draft_model.lm_head.register_forward_hook(record)
            batch = TrainBatch(sample_ids=["expectation"], strategy=strategy.name, tensors={
                "input_ids": ids, "attention_mask": torch.ones(1, t, dtype=torch.long),
                "loss_mask": torch.ones(1, t, 1), "hidden_state": hidden,
                "target": torch.zeros(1, t, int(found.vocab_size)), "position_ids": torch.arange(t)[None]})
            try:
                with torch.no_grad():
                    strategy.forward_loss(batch)
            except _StepsDone:
                pass
            finally:
                hook.remove()
            j = int(captured[step][0, n - 1].argmax())  # step ``step`` of the chain anchored at the last row
            drafted.append(j + int(d2t[j]))
            if n + step < t:
                ids[0, n + step] = drafted[-1]
        return drafted

    return propose, target, (f"SpecForge Eagle3TrainStrategy.forward_loss (TTT steps 1..k, its own proposals fed "
                             f"back), target in transformers float32, hidden_states{indices}")


def expectation(trainer: str, draft_dir: str, target_dir: str, *, tokens: int, n_prompts: int, max_tokens: int,
                prompts: list[list[int]]) -> dict:
    """TRAINER's expectation (its profile's ``proposer``) for the draft in DRAFT_DIR speculating for TARGET_DIR."""
    propose, target, how = pkgutil.resolve_name(str(PROFILES[trainer].proposer))(draft_dir, target_dir)
    result = speculate(propose, target, prompts[:n_prompts], tokens, max_tokens)
    return {**result, "how": how}


def main(argv: list[str]) -> int:
    draft_dir, target_dir, options = argv
    import torch

    torch.set_num_threads(2)
    result = expectation(**json.loads(options), draft_dir=draft_dir, target_dir=target_dir)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
