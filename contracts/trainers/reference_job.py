"""The trainer's reference forward for a draft a user brings, made on the spot in the trainer release's own
environment: the same function that made the bundled drafts' references (``fixtures/references``), run on the user's
weights. ``forward-parity`` then replays it through the engine, so a user's draft is judged by the contract that
catches what names and shapes cannot (an ignored switch, a rope the export changed, the state fed to the next step).

Inputs: the target's real aux hidden states (transformers, float32) when the target has its weights; otherwise a
synthetic target, the target's config with seeded random weights (transformers' own initialisation, so its hidden
states have a trained model's scale) and, where the draft saved one of the target's shape, the draft's own embedding
(the one an engine that shares the target's would hand it). The report says which.

    python -m contracts.trainers.reference_job JOB_JSON     (one JSON line on stdout)

JOB_JSON: {"trainer", "draft", "target", "out" (the reference file to write), "synthetic_target" (a directory to
write the synthetic target into, or null for the target's real states)}. Refusals of the trainer's own code (a
checkpoint its loader does not take) end in one line on stderr, exit 3.
"""

from __future__ import annotations

import json
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from contracts.trainer_profile import PROFILES
from contracts.trainers.common import SEED, TinyTarget, saved_tensors

EMBED_KEYS = ("embed_tokens.weight", "model.embed_tokens.weight")
# what each trainer's package is installed as
DISTRIBUTIONS = {name: p.distribution for name, p in PROFILES.items() if p.makes_references}


def synthetic_target(target_dir: Path, draft_dir: Path, out: Path) -> str:
    """The target's config with seeded random weights, written to OUT (``save_pretrained``, safetensors). Its
    embedding and head are the ones an engine would share into the draft where they can be had: the target's own
    vocabulary tensors when it keeps them, else the draft's own embedding of the target's shape. Returns how it was
    made, for the report."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(target_dir))
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    kept = {n: t for n, t in _saved_if_any(target_dir) if n.endswith(("embed_tokens.weight", "lm_head.weight"))}
    own = {n: t for n, t in saved_tensors(draft_dir) if n in EMBED_KEYS}
    said = []
    for what, param in (("embedding", model.get_input_embeddings().weight),
                        ("head", getattr(model.get_output_embeddings(), "weight", None))):
        suffix = "embed_tokens.weight" if what == "embedding" else "lm_head.weight"
        found = [(f"the target's own {n}", t) for n, t in kept.items() if n.endswith(suffix)]
        if what == "embedding":
            found += [(f"the draft's own {n}", t) for n, t in own.items()]
        source = next(((w, t) for w, t in found if param is not None and tuple(t.shape) == tuple(param.shape)), None)
        if source is not None and param is not None:
            with torch.no_grad():
                param.copy_(source[1].float())
        said.append(f"{what} {source[0] if source else 'random'}")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    return (f"synthetic: {type(model).__name__} of the target's config with seeded random weights (transformers' "
            f"initialisation, seed {SEED}); {', '.join(said)}")


def _saved_if_any(directory: Path):
    """The tensors a target directory keeps, if it keeps any (a config-only target keeps none)."""
    from contracts.checkpoint import Checkpoint

    ckpt = Checkpoint.open(Path(directory), require_weights=False, role="target")
    return ckpt.iter_tensors() if ckpt.has_weights else iter(())


def make(trainer: str, draft: Path, target: TinyTarget, out: Path) -> dict:
    """TRAINER's own reference forward on DRAFT's weights (``reference`` of its fixture builder), written to OUT."""
    with tempfile.TemporaryDirectory(prefix="eagle3-contracts-reference-") as work:
        if trainer == "speculators":
            from contracts.trainers.speculators import reference as speculators_reference

            return speculators_reference("user-draft", version(DISTRIBUTIONS[trainer]), target, directory=draft, path=out,
                             verifier=target.directory)
        if trainer == "specforge":
            from contracts.trainers.common import REFERENCE_STEPS
            from contracts.trainers.specforge import reference as specforge_reference

            return specforge_reference(Path(work), draft / "config.json", None, "user-draft", target, out_dir=draft, path=out,
                             ttt_length=REFERENCE_STEPS)
        if trainer == "modelopt":
            from contracts.trainers.modelopt import load_export, reference as modelopt_reference

            model, _ = load_export(draft, target)
            return modelopt_reference(model, "user-draft", target, version(DISTRIBUTIONS[trainer]), out)
    raise ValueError(f"no reference job for {trainer}")


def main(argv: list[str]) -> int:
    import torch

    torch.set_num_threads(2)
    job = json.loads(argv[0])
    draft, target_dir = Path(job["draft"]), Path(job["target"])
    inputs = "target"
    how = "the target's real aux hidden states (its weights, transformers float32)"
    if job.get("synthetic_target"):
        inputs, target_dir = "synthetic", Path(job["synthetic_target"])
        how = synthetic_target(Path(job["target"]), draft, target_dir)
    target = TinyTarget.from_directory(target_dir)
    try:
        made = make(job["trainer"], draft, target, Path(job["out"]))
    except (RuntimeError, ValueError, KeyError, TypeError, OSError) as e:
        print(f"reference-job: {job['trainer']} {version(DISTRIBUTIONS[job['trainer']])}'s own code did not take "
              f"this draft: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
        return 3
    sys.stdout.write(json.dumps({"trainer": job["trainer"], "version": version(DISTRIBUTIONS[job["trainer"]]),
                                 "inputs": inputs, "inputs_how": how, "functions_called": made["functions_called"],
                                 "steps": (made["tensors"].get("step_logits") or {"shape": [1]})["shape"][0],
                                 "trained_hidden_states": made.get("trained_hidden_states")}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
