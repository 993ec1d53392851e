"""What every trainer's fixture builder shares: the fixed token-frequency table, the tiny target's
geometry, and the manifest that records how each committed fixture was made (trainer, version,
command, sha256 of every file, the vocab ids the trainer selected).

Runs in any fixtures-<trainer> environment; needs only the standard library.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "fixtures"
MANIFEST = FIXTURES / "manifest.json"
TOKEN_FREQ = FIXTURES / "vocab" / "token_freq.json"
PACKAGED_TOKEN_FREQ = Path(__file__).resolve().parents[1] / "data" / "token_freq.json"  # in the wheel (package data)
TARGET_DIR = FIXTURES / "targets" / "llama-tiny"

SEED = 20261130
TARGET_VOCAB = 512
DRAFT_VOCAB = 64
TARGET_GEOMETRY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=TARGET_VOCAB,
    max_position_embeddings=2048,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)


# The same tiny Llama at a head size vLLM's CPU attention kernel takes (32; it has no kernel for 16): two heads of
# 32 instead of four of 16, one KV head instead of two. Its drafts are what forward-parity replays on vLLM.
TARGET_HD32_DIR = FIXTURES / "targets" / "llama-tiny-hd32"
TARGET_HD32_GEOMETRY = {**TARGET_GEOMETRY, "num_attention_heads": 2, "num_key_value_heads": 1}


@dataclass(frozen=True)
class TinyTarget:
    """A tiny target fixture: its manifest name, directory and the geometry its drafts copy."""

    name: str
    directory: Path
    geometry: dict
    stored_as: str | None = None  # how draft configs name it (default: repo-relative, for the fixtures)

    @property
    def path(self) -> str:
        """Repo-relative, as it is written into draft configs (no path of the building machine is stored); a
        target outside the fixtures (``build-tiny``) by the path it was given."""
        return self.stored_as if self.stored_as is not None else os.path.relpath(self.directory, REPO_ROOT)

    @property
    def vocab_size(self) -> int:
        return int(self.geometry["vocab_size"])

    @classmethod
    def from_directory(cls, directory: Path, name: str = "target") -> "TinyTarget":
        """A user's own (small) target: its geometry is its config.json's."""
        config = json.loads((Path(directory) / "config.json").read_text())
        text = config.get("text_config") or config
        keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps",
                "tie_word_embeddings", "head_dim")
        geometry = {k: text[k] for k in keys if text.get(k) is not None}
        return cls(name, Path(directory).resolve(), geometry, stored_as=str(Path(directory).resolve()))


LLAMA_TINY = TinyTarget("target-llama-tiny", TARGET_DIR, TARGET_GEOMETRY)
LLAMA_TINY_HD32 = TinyTarget("target-llama-tiny-hd32", TARGET_HD32_DIR, TARGET_HD32_GEOMETRY)


class TrainerAPIChanged(RuntimeError):
    """A builder step cannot run on the installed trainer release; the message names the function or argument
    (``build-tiny`` says it in one line, exit 2: the news a pre-merge check exists for)."""


def require_parameters(function, label: str, *names: str) -> None:
    """The installed trainer's ``function`` takes every parameter in ``names`` (else ``TrainerAPIChanged``)."""
    import inspect

    params = inspect.signature(function).parameters
    missing = [n for n in names if n not in params]
    if missing:
        raise TrainerAPIChanged(f"{label} takes no {', '.join(missing)} (its parameters: {', '.join(params)})")


def token_frequencies(vocab_size: int = TARGET_VOCAB) -> dict[int, int]:
    """The one fixed token-frequency table every trainer's mapping function is fed.

    Made so that the traps of `d2t` are present: ids 0..19 are among the most frequent (so a correct
    `d2t` starts with twenty zero offsets), some counts tie, and many ids never occur (zeros). Written once to fixtures/vocab/token_freq.json and read from there after.
    A target of another vocabulary size (``build-tiny --target``) gets the same construction over its ids, in memory.
    """
    if vocab_size != TARGET_VOCAB:
        return _synthesized_frequencies(vocab_size)
    for table in (TOKEN_FREQ, PACKAGED_TOKEN_FREQ):  # a checkout's, else the copy installed with the package
        if table.exists():
            return {int(k): v for k, v in json.loads(table.read_text()).items()}
    counts = _synthesized_frequencies(TARGET_VOCAB)
    if FIXTURES.is_dir():  # written into a checkout's fixtures only, never into an installed package's directory
        TOKEN_FREQ.parent.mkdir(parents=True, exist_ok=True)
        TOKEN_FREQ.write_text(json.dumps({str(k): v for k, v in sorted(counts.items())}, indent=0) + "\n")
    return counts


def _synthesized_frequencies(vocab_size: int) -> dict[int, int]:
    rng = random.Random(SEED)
    counts = {}
    for tid in range(vocab_size):
        if tid < 20:
            counts[tid] = 10_000 - 7 * tid
        elif rng.random() < 0.4:
            counts[tid] = 0
        else:
            counts[tid] = int(rng.paretovariate(1.2) * 50)
    for tid in (101, 202, 303, 404):  # a four-way tie (at draft vocab 64 all four are selected; the
        if tid < vocab_size:          # property tests of issue 3 put ties across the cut)
            counts[tid] = 900
    return counts


def sha256_files(directory: Path) -> dict[str, str]:
    out = {}
    for p in sorted(Path(directory).rglob("*")):
        if p.is_file():
            out[str(p.relative_to(directory))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def repo_relative(path: Path) -> str:
    """A fixture's path relative to the repository; anything else (a ``build-tiny`` output) as it is."""
    path = Path(path).resolve()
    return os.path.relpath(path, REPO_ROOT) if path.is_relative_to(REPO_ROOT) else str(path)


def record_fixture(name: str, directory: Path, *, trainer: str, trainer_version: str, command: str,
                   **details) -> dict:
    """Add or replace one fixture's entry in fixtures/manifest.json (paths relative to the repo)."""
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    if trainer != "transformers" and details.get("role") != "target":
        details.setdefault("target", "target-llama-tiny")  # every draft here is paired with the tiny target
    entry = {
        "path": os.path.relpath(directory, REPO_ROOT),
        "trainer": trainer,
        "trainer_version": trainer_version,
        "command": command,
        "seed": SEED,
        "files": sha256_files(directory),
        **details,
    }
    manifest[name] = entry
    MANIFEST.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
    return entry


# --- forward-parity references (issue 6): the inputs every trainer's step-0 forward is fed -------------
# One fixed prompt of T + 1 target-vocab ids goes through the tiny target (transformers, fp32); the draft
# then sees the EAGLE-3 pairing every trainer and SGLang use at a fresh sequence: input_ids[i] =
# prompt[i + 1] embedded together with the target's aux hidden states at position i, positions 0..T-1.

REFERENCES = FIXTURES / "references"
REFERENCE_TOKENS = 8  # T
REFERENCE_ALIGNMENT = (
    "input_ids[i] = prompt[i+1] is embedded together with hidden_states[i], the target's aux hidden states "
    "after reading prompt[0..i] (HF output_hidden_states at the indices in hidden_states_source, concatenated "
    "low..high); positions[i] = i; logits[i] = the trainer's step-0 (first TTT step) draft logits over the "
    "draft vocab (draft id j is target id j + d2t[j])"
)
REFERENCE_STEPS = 3  # K: draft steps a multi-step reference records (the engines' default chain is 3 long)
STEP_ALIGNMENT = (
    "step_logits[k, i] = the trainer's logits at TTT step k of the chain anchored at position i: step 0 is "
    "logits[i]; step k >= 1 embeds input_ids[i+k] (teacher forcing: the token the chain would have drafted) with "
    "the draft's own state from step k-1 at the same anchor, at position positions[i]+k, attending the step-0 keys "
    "of positions 0..i and the chain's own earlier steps; rows i+k >= T have no ground-truth token and are NaN"
)


def reference_prompt(vocab_size: int = TARGET_VOCAB) -> list[int]:
    """T + 1 fixed ids in the target vocab, from the common seed (stdlib only, so identical in every env)."""
    rng = random.Random(SEED)
    return [rng.randrange(vocab_size) for _ in range(REFERENCE_TOKENS + 1)]


def float32_argument() -> dict:
    """``from_pretrained``'s float32 keyword in the installed transformers: ``dtype`` since 4.56, ``torch_dtype``
    before (4.54, which SpecForge 0.1.0 pins, takes ``dtype=`` into the config and fails saving it)."""
    import inspect

    import torch
    import transformers

    params = inspect.signature(transformers.PretrainedConfig.__init__).parameters
    return {"dtype" if "dtype" in params else "torch_dtype": torch.float32}


def target_reference_inputs(hf_hidden_state_indices: list[int], target: TinyTarget = LLAMA_TINY) -> tuple[dict, dict]:
    """The tiny target's real aux hidden states for reference_prompt() at the given HF
    `output_hidden_states` indices (each trainer converts its own aux-id convention to these).

    Returns (tensors, metadata): input_ids int64 [T], positions int64 [T], hidden_states float32
    [T, k*H], and target_logits float32 [T, target vocab] (the target's logits at positions 1..T, the
    teacher a training step is given; not stored in the reference)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    prompt = torch.tensor(reference_prompt(target.vocab_size), dtype=torch.long)
    path = target.path
    model = AutoModelForCausalLM.from_pretrained(str(target.directory), **float32_argument(),
                                                 attn_implementation="sdpa").eval()
    with torch.no_grad():
        out = model(prompt[None], output_hidden_states=True)
    t = REFERENCE_TOKENS
    hidden = torch.cat([out.hidden_states[k][0, :t] for k in hf_hidden_state_indices], dim=-1)
    tensors = {
        "input_ids": prompt[1:].clone(),
        "positions": torch.arange(t, dtype=torch.long),
        "hidden_states": hidden.float().contiguous(),
        "target_logits": out.logits[0, 1:].float().contiguous(),
    }
    metadata = {
        "prompt": json.dumps(prompt.tolist()),
        "hidden_states_source": (
            f"{path} ({type(model).__name__}, transformers {transformers.__version__}, float32, sdpa) "
            f"over prompt[0..T-1]: output_hidden_states{list(hf_hidden_state_indices)}"),
        "alignment": REFERENCE_ALIGNMENT,
    }
    return tensors, metadata


def saved_tensors(directory: Path):
    """Every tensor a draft or target directory saved, as (name, tensor): its safetensors files, sharded or not, or
    its pickle weights through torch's restricted loader (``contracts.checkpoint``: the same bounded, read-only view
    the checks use)."""
    from contracts.checkpoint import Checkpoint

    return Checkpoint.open(Path(directory)).iter_tensors()


def saved_tensor(directory: Path, key: str):
    """One tensor of a directory's saved weights (sharded or not), or None when it has no such tensor."""
    from contracts.checkpoint import Checkpoint

    ckpt = Checkpoint.open(Path(directory))
    return ckpt.load_tensor(key) if key in ckpt.tensors else None


class StopForward(Exception):
    """Raised by a hook once what a trainer's forward was run for is recorded (the rest of its step is not needed)."""


def step_0_and_fed_state(head, first_layer, forward, fed_state) -> tuple:
    """Run a trainer's TTT forward (``forward()``, under no_grad) up to its step 1: the step-0 logits (``head``'s first
    output) and the state the trainer feeds step 1 (``fed_state(args, kwargs)`` of ``first_layer``'s second call)."""
    import torch

    got: dict = {"layer_calls": 0}

    def on_head(_m, _i, out):
        got.setdefault("logits", out.detach().clone())

    def on_layer(_m, args, kwargs):
        got["layer_calls"] += 1
        if got["layer_calls"] == 2:
            got["fed"] = fed_state(args, kwargs).detach().clone()
            raise StopForward

    hooks = [head.register_forward_hook(on_head), first_layer.register_forward_pre_hook(on_layer, with_kwargs=True)]
    try:
        with torch.no_grad():
            forward()
    except StopForward:
        pass
    finally:
        for hook in hooks:
            hook.remove()
    return got["logits"][0], got["fed"][0]


def switch_semantics(run, flips: dict) -> dict:
    """What each EAGLE-3.1 switch means to the trainer, observed on its own forward with the same weights: ``run()``
    returns (the step-0 logits, the state the trainer feeds its step 1); ``flips`` maps a switch to (the draft's
    value, a function that flips it, one that restores it). The same record the engines' ``config`` observation
    makes, so the two meanings can be compared: a switch may change the step-0 logits, the state fed to the next
    step, or both (SpecForge 0.2.0's ``norm_output`` normalises before ``lm_head`` only; the engines' feeds the
    normalised state on)."""
    base_logits, base_fed = run()
    out = {}
    for key, (value, flip, restore) in flips.items():
        flip()
        try:
            logits, fed = run()
        finally:
            restore()
        step_0 = float((logits - base_logits).abs().max())
        fed_back = float((fed - base_fed).abs().max())
        out[key] = {"value": value, "step_0_change": step_0, "fed_back_state_change": fed_back,
                    "first_acts_at_step": 0 if step_0 > 0 else 1 if fed_back > 0 else None}
    return out


def chain_logits(per_step: list, shift_rows: bool = False):
    """``step_logits`` [K, T, V] from the K logits tensors [T(+k), V] a trainer's TTT forward produced, one per
    step, rows past the ground truth set to NaN. ``shift_rows``: the trainer writes step k of the chain anchored at
    i on row i+k (Model Optimizer), not on row i (speculators, SpecForge)."""
    import torch

    t = per_step[0].shape[0]
    out = torch.full((len(per_step), t, per_step[0].shape[-1]), float("nan"))
    for k, step in enumerate(per_step):
        rows = step[k:k + t - k] if shift_rows else step[:t - k]
        out[k, :t - k] = rows.float()
    return out


def write_reference(name: str, inputs: dict, logits, metadata: dict[str, str], path: Path | None = None,
                    step_logits=None, switches: dict | None = None) -> dict:
    """Write fixtures/references/<name>.safetensors, or ``path`` (the reference inputs, the trainer's step-0
    logits and, for a multi-step reference, ``step_logits`` of ``chain_logits``; ``switches``: the trainer's
    ``switch_semantics``) and return the manifest's "reference" field.

    safetensors writes its `__metadata__` map in a per-process random order; the header is rewritten
    with the keys sorted (same length, same tensors) so a rebuild is byte-identical."""
    from safetensors.torch import save

    tensors = {key: inputs[key] for key in ("input_ids", "positions", "hidden_states")}
    tensors["logits"] = logits.float().contiguous()
    if step_logits is not None:
        import torch

        if not torch.equal(step_logits[0], tensors["logits"]):
            raise ValueError("step_logits[0] must be the step-0 logits")
        tensors["step_logits"] = step_logits.float().contiguous()
        metadata = {**metadata, "steps": str(step_logits.shape[0]), "step_alignment": STEP_ALIGNMENT}
    if switches:
        metadata = {**metadata, "switch_semantics": json.dumps(switches, sort_keys=True)}
    if not all(isinstance(v, str) and v.isascii() for v in metadata.values()):
        raise ValueError("reference metadata must be ASCII strings")
    data = bytearray(save(tensors, metadata=metadata))
    n = int.from_bytes(data[:8], "little")
    header = json.loads(bytes(data[8:8 + n]))
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    canon = json.dumps({"__metadata__": header.pop("__metadata__"), **header}, separators=(",", ":"))
    if len(canon) != len(bytes(data[8:8 + n]).rstrip(b" ")):
        raise RuntimeError("could not canonicalise the safetensors header")
    data[8:8 + n] = canon.encode().ljust(n, b" ")
    path = Path(path) if path is not None else REFERENCES / f"{name}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))
    return {
        "path": repo_relative(path),
        "sha256": hashlib.sha256(bytes(data)).hexdigest(),
        "tensors": {k: {"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)}
                    for k, v in sorted(tensors.items())},
        "functions_called": json.loads(metadata["functions_called"]),
        "attn_implementation": metadata["attn_implementation"],
        "dtype": metadata["dtype"],
        **({"switch_semantics": switches} if switches else {}),
    }
