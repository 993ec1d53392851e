"""The conversion a user would otherwise write by hand (``convert --verbatim``): a speculators checkpoint (nested
config, architecture ``Eagle3Speculator``/``Eagle3DraftModel``) into the flat config SGLang reads.

It flattens ``transformer_layer_config``, names SGLang's draft class, puts the aux layer ids under
``eagle_config`` verbatim, and carries over every key that changes the math (norm flags, rope, dtype) so
the contracts can judge whether the engine honours them. It renames no tensor and changes no value: this is the
form ``check`` judges a speculators checkpoint in on SGLang, so a report shows what a hand conversion gets wrong.
The copy to deploy is ``contracts.convert_command``'s, which also uses the header-only tensor renames below. SRC is
never written.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from contracts.checkpoint import Checkpoint, InputError
from contracts.trainer_profile import nested

SGLANG_DRAFT_ARCH = "LlamaForCausalLMEagle3"
# Top-level speculators keys that change the draft's math; carried over verbatim when present.
MATH_KEYS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output", "use_aux_norm",
             "draft_vocab_size", "tie_word_embeddings", "head_dim", "bias")
ROPE_KEYS = ("rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings")
DTYPE_KEYS = ("dtype", "torch_dtype")


def speculators_to_sglang_config(cfg: dict) -> dict:
    """The flat SGLang config for a speculators config (pure function of the nested config)."""
    layer = cfg.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise InputError("config.json: speculators config without a transformer_layer_config object")
    flat = dict(layer)
    flat["architectures"] = [SGLANG_DRAFT_ARCH]
    flat.setdefault("model_type", "llama")
    for key in MATH_KEYS + ROPE_KEYS:
        if cfg.get(key) is not None:
            flat[key] = cfg[key]
    for key in DTYPE_KEYS:
        value = cfg.get(key) or layer.get(key)
        if value is not None:
            flat[key] = value
    target_hidden = cfg.get("target_hidden_size")
    if target_hidden is not None and target_hidden != flat.get("hidden_size"):
        flat["target_hidden_size"] = target_hidden
    eagle_config = {}
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        eagle_config["eagle_aux_hidden_state_layer_ids"] = list(ids)
    if eagle_config:
        flat["eagle_config"] = eagle_config
    return flat


def check_destination(src: Path, dst: Path, target: Path | None = None) -> None:
    """DST must be outside SRC and outside the target, new or empty, and creatable by this user (raises
    InputError before anything is written, and before any engine work)."""
    if dst == src or src in dst.parents:
        raise InputError(f"{dst}: the destination must be outside the source checkpoint")
    if target is not None and (dst == target or target in dst.parents):
        raise InputError(f"{dst}: the destination must be outside the target model directory {target}")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise InputError(f"{dst}: destination exists and is not an empty directory")
    existing = dst
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{dst}: cannot be created: {existing} is not a directory this user may write")


def files_to_copy(src: Path) -> tuple[list[Path], list[str]]:
    """SRC's files a copy carries (besides config.json) and a note for each one left out: regular files inside
    SRC; a link is followed out of SRC only for the weight files and index the engine reads (a Hugging Face cache
    snapshot links them into its blob store), so a ``notes.txt -> /etc/passwd`` never becomes a copy of it."""
    ckpt = Checkpoint.open(src)
    engine_reads = {info.file for info in ckpt.tensors.values()} | {
        n for n in ("model.safetensors.index.json", "pytorch_model.bin.index.json") if (src / n).is_file()}
    files, skipped = [], []
    for item in sorted(src.iterdir()):
        if item.name == "config.json":
            continue
        if not item.is_file():
            if not item.is_dir():
                skipped.append(f"{item.name} (not a regular file)")
            continue
        inside = src.resolve() in item.resolve().parents
        if not inside and item.name not in engine_reads:
            skipped.append(f"{item.name} (a link to {item.resolve()}, outside the checkpoint)")
            continue
        files.append(item)
    return files, skipped


def write_copy(src: Path, cfg: dict, into: Path, *, link: bool, renames: dict[str, str] | None = None) -> Path:
    """A directory holding CFG as config.json and SRC's other files (``files_to_copy``: symlinked, or copied with
    ``link=False``); the weight files that hold a tensor in RENAMES (old -> new) and the safetensors index are
    rewritten with the new names."""
    into.mkdir(parents=True, exist_ok=True)
    renames = renames or {}
    rewritten = {Checkpoint.open(src).tensors[k].file for k in renames} if renames else set()
    for item in files_to_copy(src)[0]:
        if item.name in rewritten:
            write_renamed_safetensors(item, into / item.name, renames)
            continue
        if renames and item.name.endswith(".safetensors.index.json"):
            write_renamed_index(item, into / item.name, renames)
            continue
        if link:
            try:
                os.symlink(item.resolve(), into / item.name)
                continue
            except OSError:
                pass
        shutil.copy2(item, into / item.name)
    (into / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return into


def convert_to_sglang(src, dst, *, link: bool = True) -> Path:
    """Write the SGLang-loadable copy of speculators checkpoint SRC into DST (new or empty directory).

    Weight and other files are symlinked (or copied with ``link=False``) unchanged; only config.json
    is new. Raises InputError for anything it cannot convert, before writing anything.
    """
    src, dst = Path(src).resolve(), Path(dst).resolve()
    ckpt = Checkpoint.open(src)
    if not nested(ckpt.trainer_format):
        raise InputError(f"{src}: not a speculators checkpoint (its config is already flat); nothing to convert")
    check_destination(src, dst)
    return write_copy(src, speculators_to_sglang_config(ckpt.config), dst, link=link)


def write_renamed_safetensors(src: Path, dst: Path, renames: dict[str, str]) -> None:
    """Copy safetensors file SRC to DST with tensors renamed (old -> new): only the header changes (its
    ``data_offsets`` are relative to the data section, so the data bytes are streamed over unchanged, in bounded
    memory, whatever the file's size)."""
    with src.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        raw = json.dumps({renames.get(k, k): v for k, v in header.items()}, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # the data section stays 8-byte aligned, as safetensors writes it
        with dst.open("wb") as g:
            g.write(struct.pack("<Q", len(raw)))
            g.write(raw)
            shutil.copyfileobj(f, g, 16 << 20)


def write_selected_safetensors(sources: dict[str, Path], dst: Path, chunk: int = 16 << 20) -> None:
    """One safetensors file DST holding the tensors SOURCES names (tensor -> the safetensors file holding it), their
    bytes streamed over in CHUNK-sized pieces (bounded memory whatever their size); a chunk of zeros is skipped over
    rather than written, so a sparse source stays sparse."""
    headers, files = {}, {}
    for name, path in sources.items():
        if path not in files:
            with path.open("rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                files[path] = (8 + n, json.loads(f.read(n)))
        headers[name] = files[path][1][name]
    out: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, entry in headers.items():
        size = entry["data_offsets"][1] - entry["data_offsets"][0]
        out[name] = {"dtype": entry["dtype"], "shape": entry["shape"], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(out, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with dst.open("wb") as g:
        g.write(struct.pack("<Q", len(raw)))
        g.write(raw)
        for name, path in sources.items():
            start, end = headers[name]["data_offsets"]
            with path.open("rb") as f:
                f.seek(files[path][0] + start)
                left = end - start
                while left:
                    piece = f.read(min(chunk, left))
                    left -= len(piece)
                    if piece.count(0) == len(piece):
                        g.seek(len(piece), 1)
                    else:
                        g.write(piece)
        g.truncate()


def write_renamed_index(src: Path, dst: Path, renames: dict[str, str]) -> None:
    """A ``*.index.json`` with its ``weight_map`` keys renamed (old -> new)."""
    index = json.loads(src.read_text())
    index["weight_map"] = {renames.get(k, k): v for k, v in index.get("weight_map", {}).items()}
    dst.write_text(json.dumps(index, indent=2) + "\n")
