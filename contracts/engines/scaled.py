"""A real-size draft given to an engine as a copy with every width divided by one factor, the rest kept.

Serves every observation of a draft (and, on llama.cpp, its target) that would not fit the memory a check may take:
an 8B-sized SpecForge drafter beside its target cost llama.cpp 6.1 GB summed (its converter widening the target's 1 GB
bfloat16 embedding and head through float32 temporaries, the draft written as a 1.7 GB float32 GGUF, the load probe
mapping both again), and OpenVINO GenAI's exporter 7.3 GB (the draft loaded in float32 twice and traced). What an
engine decides about a draft does not depend on its widths: which tensors its converter or loader maps, renames or
drops, the ids it writes for ``d2t`` and the aux layers, the shape it demands of each tensor relative to the config,
whether it takes the target's embedding or head, which switches change its outputs. So the copy divides every width
(hidden, intermediate, the heads' product) by one factor, the head count and the head dimension each by a part of
it, and keeps the rest exactly: the tensor names, the vocabularies, ``d2t`` and ``t2d`` whole, the layer counts and
aux ids, every switch. Each tensor is the top-left block of the real one (read by slices, never whole).

Everything read back from the engine's copy is scaled up again (``up``) before a check sees it, so a shape the engine
refuses reads in the checkpoint's numbers, and the values a check fingerprints are the real tensors' (a converter
copies an embedding and a head verbatim). A dimension that is neither a vocabulary nor divisible by the factor is
kept as it is (a tensor of a shape the config does not explain stays one); where that or a vocabulary could be read
back as a width, no copy is made and the draft is judged at full size. forward-parity is not judged on a copy.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from contracts.checkpoint import Checkpoint, text_config

# Above this estimate of what the engine would hold (MB: each engine's cost rule, llama.cpp's converter and loader with
# the target, OpenVINO's exporter), the copy is judged instead; EAGLE3_CONTRACTS_SCALE_ABOVE_MB sets another bound (0:
# every draft that can be scaled is)
BUDGET_MB = 384
CHUNK_BYTES = 32 << 20  # rows of a real tensor read at once while its block is copied
WIDTH_KEYS = ("hidden_size", "intermediate_size", "target_hidden_size")
HEAD_KEYS = ("num_attention_heads", "num_key_value_heads")
# GGUF metadata in widths, head counts and head dimensions (suffixes after "<arch>.")
GGUF_WIDTHS = ("embedding_length", "feed_forward_length", "target_hidden_size")
GGUF_HEADS = ("attention.head_count", "attention.head_count_kv")
GGUF_HEAD_DIMS = ("attention.key_length", "attention.value_length", "rope.dimension_count")
TENSOR_DIMS = re.compile(r"(expected|got)\s+([\d,\s]+?)(?=,\s*got|$|\))")
SHAPE_LIST = re.compile(r"\[(\d+(?:,\s*\d+)*)\]")  # a shape as Python prints it: [64, 256], torch.Size([64, 256])


@dataclass(frozen=True)
class Scale:
    """Widths divided by ``width`` (= ``heads`` x ``head_dim``); ``kept``: the dimensions copied as they are."""

    width: int
    heads: int
    head_dim: int
    kept: frozenset = field(default_factory=frozenset)
    scaled: frozenset = field(default_factory=frozenset)  # every width, after division

    def dim(self, d: int) -> int:
        return d if d in self.kept or d % self.width else d // self.width

    def up(self, d: int) -> int:
        return d * self.width if d in self.scaled else d

    def up_shape(self, shape) -> list[int]:
        return [self.up(int(d)) for d in shape]

    def up_metadata(self, metadata: dict, arch: str | None) -> dict:
        out = dict(metadata)
        for names, factor in ((GGUF_WIDTHS, self.width), (GGUF_HEADS, self.heads), (GGUF_HEAD_DIMS, self.head_dim)):
            for name in names:
                key = f"{arch}.{name}"
                if isinstance(out.get(key), int):
                    out[key] = out[key] * factor
        return out

    def up_text(self, text: str | None) -> str | None:
        """A loader line's shapes ("expected 192, 64, got 128, 64") in the checkpoint's numbers."""
        if not text:
            return text
        return TENSOR_DIMS.sub(lambda m: m.group(1) + " " + ", ".join(
            str(self.up(int(n))) for n in m.group(2).replace(" ", "").split(",") if n), text)

    def up_shapes_in(self, text: str) -> str:
        """Every shape Python or torch printed in TEXT ("[64, 256]", "torch.Size([64, 256])") in the checkpoint's
        numbers."""
        return SHAPE_LIST.sub(lambda m: "[" + ", ".join(str(self.up(int(n))) for n in m.group(1).split(",")) + "]",
                              text)

    def up_config(self, config: dict) -> dict:
        """A config of the copy (what the engine built from it) in the checkpoint's numbers."""
        return _scale_config(config, self, up=True)

    def describe(self) -> str:
        return (f"a copy with every width divided by {self.width} (heads by {self.heads}, head dimension by "
                f"{self.head_dim}); names, vocabularies, d2t, t2d, layer counts, aux ids and switches kept")


def plan(draft_dir: Path, target_dir: Path | None, cost: Callable[[Checkpoint, Checkpoint | None], int],
         target_given: Callable[[str], bool] | None = None) -> Scale | None:
    """The scale an engine is given this draft at, or None when it is judged at full size: COST (what the engine
    would hold of the draft and the target, in bytes, counted before anything is allocated) fits the bound, or no
    faithful copy exists. TARGET_GIVEN: the target's tensors the engine is given a copy of too (None: none; the
    target's config still says which widths are the draft's)."""
    draft = Checkpoint.open(draft_dir)
    target = None
    if target_dir is not None:
        try:
            target = Checkpoint.open_target(target_dir)
        except Exception:  # noqa: BLE001  (an unreadable target: the engine's wiring says so in its own terms)
            target = None
    if cost(draft, target) <= float(os.environ.get("EAGLE3_CONTRACTS_SCALE_ABOVE_MB", BUDGET_MB)) * (1 << 20):
        return None
    configs = [layer_config(draft.config)] + ([text_config(target.config)] if target is not None else [])
    given = [] if target is None or target_given is None else \
        [t for name, t in target.tensors.items() if target_given(name)]
    try:
        return _scale_for(draft, given, configs)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # a config without the widths it needs: full size
        return None


def _scale_for(draft: Checkpoint, target_tensors: list, configs: list[dict]) -> Scale | None:
    heads = [int(c[k]) for c in configs for k in HEAD_KEYS if isinstance(c.get(k), int)]
    head_dims = [int(c["head_dim"]) if isinstance(c.get("head_dim"), int) else
                 int(c["hidden_size"]) // int(c["num_attention_heads"]) for c in configs]
    widths = [int(c[k]) for c in configs for k in WIDTH_KEYS if isinstance(c.get(k), int)]
    vocab = _vocabularies(draft, configs)
    fh = max((f for f in (8, 4, 2, 1) if all(d % f == 0 and d // f >= 8 for d in head_dims)), default=1)
    fn = max((f for f in (8, 4, 2, 1) if all(h % f == 0 for h in heads)), default=1)
    width = fh * fn
    products = [int(c[k]) * d for c, d in zip(configs, head_dims) for k in HEAD_KEYS if isinstance(c.get(k), int)]
    if width == 1 or any(w % width or w in vocab for w in widths + products):
        return None  # a width the factor does not divide, or one a vocabulary equals (its axis is then ambiguous)
    tensors = list(draft.tensors.values()) + list(target_tensors)
    dims = {int(d) for t in tensors for d in t.shape}
    kept = frozenset(d for d in dims if d in vocab or d % width)
    scaled = frozenset(d // width for d in dims | set(widths) if d not in kept)
    if kept & scaled:
        return None  # a kept dimension would be read back as a width
    return Scale(width, fn, fh, kept, scaled)


def _vocabularies(draft: Checkpoint, configs: list[dict]) -> set[int]:
    sizes = {int(c[k]) for c in configs for k in ("vocab_size", "draft_vocab_size") if isinstance(c.get(k), int)}
    sizes |= {int(t.shape[0]) for name, t in draft.tensors.items() if name.split(".")[-1] in ("d2t", "t2d")}
    return sizes


def layer_config(config: dict) -> dict:
    """The draft's layer config: speculators nest it under ``transformer_layer_config``, with the top level's
    ``target_hidden_size`` beside it."""
    layer = config.get("transformer_layer_config")
    if isinstance(layer, dict):
        return {**layer, **{k: config[k] for k in ("target_hidden_size",) if k in config}}
    return config


def _scale_config(config: dict, scale: Scale, up: bool = False) -> dict:
    """CONFIG's widths, head counts and head dimension divided by SCALE's factors (UP: multiplied back)."""
    config = json.loads(json.dumps(config))
    for part in (config, config.get("transformer_layer_config"), config.get("text_config")):
        if not isinstance(part, dict):
            continue
        for key in WIDTH_KEYS:
            if isinstance(part.get(key), int):
                part[key] = part[key] * scale.width if up else part[key] // scale.width
        for key in HEAD_KEYS:
            if isinstance(part.get(key), int):
                part[key] = part[key] * scale.heads if up else part[key] // scale.heads
        if isinstance(part.get("head_dim"), int):
            part["head_dim"] = part["head_dim"] * scale.head_dim if up else part["head_dim"] // scale.head_dim
    return config


def write_copy(source: Path, out: Path, scale: Scale, names=None, vocab_axes: set[int] | None = None) -> Path:
    """OUT: SOURCE's config scaled, its tokenizer files linked, and its tensors (NAMES, or all) as their top-left
    blocks at the scaled shape, in their own dtype (a 1-D vocabulary tensor such as d2t or t2d whole)."""
    from safetensors.torch import save_file

    from contracts.checkpoint import tensor_rows

    out.mkdir(parents=True)
    config = json.loads((source / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(_scale_config(config, scale)))
    for f in source.iterdir():
        if f.is_file() and f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "generation_config")):
            os.symlink(f.resolve(), out / f.name)
    ckpt = Checkpoint.open(source) if names is None else Checkpoint.open_target(source, require_weights=True)
    blocks = {}
    for name, info in ckpt.tensors.items():
        if names is not None and name not in names:
            continue
        blocks[name] = _block(tensor_rows(source / info.file, name), [scale.dim(int(d)) for d in info.shape])
    save_file(blocks, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _block(view, shape: list[int]):
    """The top-left SHAPE block of a lazily sliced tensor, read a bounded number of rows at a time (a slice over
    two dimensions at once reads every row whole)."""
    import torch

    if not shape:
        return view[...].clone()
    step = max(1, CHUNK_BYTES // max(1, 4 * math.prod(view.shape[1:])))
    inner = tuple(slice(0, n) for n in shape[1:])
    return torch.cat([view[a:min(a + step, shape[0])][(slice(None),) + inner].clone()
                      for a in range(0, shape[0], step)]) if shape[0] else view[0:0].clone()
