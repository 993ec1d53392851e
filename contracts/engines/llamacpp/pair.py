"""A draft and its target as llama.cpp serves them, made once per process and shared by every observation.

Both are converted by the release's own converter (``converter``: the draft with ``--target-model-dir``, as a user
runs it; the target alone) into a scratch folder of this process, the draft's GGUF read back, and the pair loaded by
llama.cpp's own loader through the draft-graph replay (``graph.DraftGraph``), as its speculative setup loads it.
Every refusal on the way is kept as the engine's own words: the converter's exception line, or the first error
llama.cpp's loader logged. Nothing is written beside the draft or the target; the scratch folder goes at exit.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from typing import Any
from dataclasses import dataclass
from pathlib import Path

from contracts.engines.errors import EngineBuildError, ReplayError, TargetBuildError
from contracts.engines.scaled import plan, write_copy

# the GGUF tensor a loader error names ("check_tensor_dims: tensor 'output.weight' has wrong shape; ...")
LOADER_TENSOR = re.compile(r"tensor '([^']+)'")
LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")
POSITIONS = 64  # positions one replay may use (a reference holds 8; the draft context's logits buffer is this many
# rows of the whole vocabulary: 35 MB at 128256)
# the target converted in its own dtype, so its embedding and head are its values exactly
GGUF_OUTTYPE = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
PROBE_TIMEOUT_S = 300

_scratch: Path | None = None
_pairs: dict[tuple, "Pair"] = {}  # the last KEEP pairs made, oldest first
_targets: dict[tuple, dict] = {}  # (target folder, its files' stamp) -> convert_target's answer
_refused_targets: dict[str, str] = {}  # draft folder -> the converter's refusal of the target it was given
KEEP = 4  # pairs kept loaded in one worker (a subject asks each of its observations of one pair, in turn)


@dataclass
class Pair:
    draft_dir: Path
    target_dir: Path
    draft: dict  # converter.convert's answer, with read_gguf's when it converted (the GGUF kept in scratch)
    target: dict  # converter.convert_target's answer
    folder: Path
    graph: Any = None  # graph.DraftGraph: the pair loaded by llama.cpp
    loader_error: str | None = None  # the first error llama.cpp's loader logged (the pair did not load)
    scale: Any = None  # scaled.Scale: llama.cpp was given a copy at that scale (a real-size pair), else None
    given_draft: Path | None = None  # the folders the converter was given (the copies when scaled)
    given_target: Path | None = None
    released: bool = False  # the loaded pair was closed for a while (``release_graph``): loaded again on demand

    def close(self) -> None:
        if self.graph is not None:
            self.graph.close()
            self.graph = None
        shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def converter_refusal(self) -> str | None:
        return None if self.draft["converted"] else self.draft["refusal"]

    def release_graph(self) -> None:
        """Close the loaded pair while another of its size is loaded (a config probe's flipped conversion): each holds
        the draft's whole vocabulary, 2,000,000 entries for a hostile config, and two at once doubled the worker.
        ``require_graph`` loads it again from the same GGUFs."""
        if self.graph is not None:
            self.graph.close()
            self.graph = None
            self.released = True

    def require_graph(self):
        """The loaded pair, or the engine's refusal (the converter's or the loader's) as ``EngineBuildError``."""
        if self.converter_refusal:
            raise EngineBuildError(f"llama.cpp's converter refused the draft: {self.converter_refusal}")
        if self.graph is None and self.released:
            from contracts.engines.llamacpp.graph import DraftGraph

            self.graph = DraftGraph(Path(self.target["gguf"]), Path(self.draft["gguf"]), POSITIONS,
                                    self.folder / "llama.log")
            self.released = False
        if self.graph is None:
            raise EngineBuildError(f"llama.cpp's loader refused the converted draft: {self.loader_error}")
        return self.graph

    def gguf_name_of(self, key: str) -> list[str]:
        """The GGUF tensors checkpoint tensor KEY became (the converter's own mapping, traced)."""
        return list(self.draft.get("tensors", {}).get(key, []))


def _folder() -> Path:
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="eagle3-contracts-llamacpp-"))
        atexit.register(close_all)
    return _scratch


def _stamp(folder: Path) -> tuple:
    return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(folder).iterdir()
                        if p.is_file()))


def pair(draft_dir, target_dir) -> Pair:
    """DRAFT_DIR beside TARGET_DIR as llama.cpp serves them (made on first use; remade when a file changed)."""
    from contracts.engines.llamacpp.converter import convert, convert_target
    from contracts.engines.llamacpp.graph import DraftGraph, GraphError

    if target_dir is None:
        raise ReplayError("llama.cpp's converter converts an EAGLE-3 draft only beside its target "
                          "(--target-model-dir): give --target")
    draft_dir, target_dir = Path(draft_dir).resolve(), Path(target_dir).resolve()
    key = (str(draft_dir), str(target_dir), _stamp(draft_dir), _stamp(target_dir))
    if key in _pairs:
        return _pairs[key]
    folder = Path(tempfile.mkdtemp(prefix="pair-", dir=_folder()))
    # a real-size pair: llama.cpp is given a copy at a fraction of its widths
    scale = plan(draft_dir, target_dir, pair_bytes, target_given=lambda name: not later_layer(name))
    given_draft, given_target = (draft_dir, target_dir) if scale is None else \
        scaled_pair(draft_dir, target_dir, scale, folder / "scaled")
    target_key = (str(target_dir), key[3], scale)
    if target_key not in _targets:  # one conversion of a target serves every draft beside it
        scratch = Path(tempfile.mkdtemp(prefix="target-", dir=_folder()))
        first_layer, dtype = first_layer_of(given_target, scratch / "source")
        _targets[target_key] = convert_target(first_layer, scratch, outtype=GGUF_OUTTYPE.get(dtype, "f32"))
    target = _targets[target_key]
    if not target["converted"]:
        shutil.rmtree(folder, ignore_errors=True)
        _refused_targets[str(draft_dir)] = f"llama.cpp's converter refused the target: {target['refusal']}"
        raise TargetBuildError(_refused_targets[str(draft_dir)])
    draft = _read_back(convert(given_draft, given_target, folder / "draft"), scale)
    made = Pair(draft_dir, target_dir, draft, target, folder, scale=scale, given_draft=given_draft,
                given_target=given_target)
    if draft["converted"]:
        made.loader_error = probed(Path(target["gguf"]), Path(draft["gguf"]), folder)
        if scale is not None:
            made.loader_error = scale.up_text(made.loader_error)
    if draft["converted"] and made.loader_error is None:
        try:
            made.graph = DraftGraph(Path(target["gguf"]), Path(draft["gguf"]), POSITIONS, folder / "llama.log")
        except GraphError as e:
            made.loader_error = str(e)
    _pairs[key] = made
    while len(_pairs) > KEEP:  # a sweep judges many drafts in one worker: their GGUFs and graphs are not all kept
        _pairs.pop(next(iter(_pairs))).close()
    return made


def later_layer(name: str) -> bool:
    """A tensor of a decoder layer after the first (a target's, which llama.cpp is not given: see
    ``first_layer_of``)."""
    found = LAYER_INDEX.search(name)
    return found is not None and int(found.group(1)) > 0


def pair_bytes(draft, target) -> int:
    """What the pair costs llama.cpp at full size, roughly: the draft as a float32 GGUF, the target's vocabulary
    tensors and first layer in their own dtype, and the converter's float32 temporaries of the largest tensor (0
    without the target's weights: no pair is made then)."""
    if target is None or not target.has_weights:
        return 0
    kept = [t for name, t in target.tensors.items() if not later_layer(name)]
    tensors = list(draft.tensors.values()) + kept
    return 4 * sum(t.numel for t in draft.tensors.values()) + sum(t.nbytes for t in kept) + \
        8 * max((t.numel for t in tensors), default=0)


def scaled_pair(draft_dir: Path, target_dir: Path, scale, out: Path) -> tuple[Path, Path]:
    """The copies of DRAFT_DIR and TARGET_DIR (its vocabulary tensors and first layer: what llama.cpp converts of
    it) at SCALE, in OUT."""
    from contracts.checkpoint import Checkpoint

    target = Checkpoint.open_target(target_dir, require_weights=True)
    names = {n for n in target.tensors if not later_layer(n)}
    return (write_copy(draft_dir, out / "draft", scale),
            write_copy(target_dir, out / "target", scale, names=names))


def _read_back(result: dict, scale) -> dict:
    """The converter's answer with what its GGUF holds (``read_gguf``: shapes, metadata, d2t), in the checkpoint's
    numbers when it converted a scaled copy."""
    from contracts.engines.llamacpp.converter import read_gguf

    if result["converted"]:
        written = read_gguf(Path(result["gguf"]))
        written["tensors_gguf"] = written.pop("tensors")  # (the draft's "tensors": the converter's mapping)
        if scale is not None:
            written["tensors_gguf"] = {n: {**t, "shape": scale.up_shape(t["shape"])}
                                       for n, t in written["tensors_gguf"].items()}
            written["metadata"] = scale.up_metadata(written["metadata"], written["architecture"])
        result.update(written)
    return result


def first_layer_of(target_dir: Path, out: Path) -> tuple[Path, str]:
    """The target as the draft needs it beside it, in OUT: its vocabulary tensors (embedding, head, final norm) and
    its first layer (a model llama.cpp loads must have one), with its config saying one layer and its tokenizer
    linked. The draft's replay never runs the target's layers (the trainer's reference gives the aux states) and the
    draft's conversion reads the real target's folder (its layer count decides the default aux layers), so the
    target's other layers are not converted: an 8B target would be a 32 GB float32 GGUF. Returns (OUT, the weights'
    dtype)."""
    import json
    import os

    from contracts.checkpoint import Checkpoint, InputError, text_config
    from contracts.hand_conversion import write_selected_safetensors

    try:
        target = Checkpoint.open_target(target_dir, require_weights=True)
    except InputError as e:
        raise TargetBuildError(f"llama.cpp loads a draft beside its target model's weights (the draft's embedding or "
                               f"head may be the target's): {e}", needs="the target's weights") from None
    out.mkdir(parents=True)
    keep = {name: info for name, info in target.tensors.items() if not later_layer(name)}
    if any(not info.file.endswith(".safetensors") for info in keep.values()):
        raise TargetBuildError("llama.cpp's replay takes a target whose weights are safetensors (this one's are "
                               "pickle files)")
    write_selected_safetensors({name: target.path / info.file for name, info in keep.items()},
                               out / "model.safetensors")
    config = json.loads((Path(target_dir) / "config.json").read_text())
    text = text_config(config)
    text["num_hidden_layers"] = 1
    if isinstance(text.get("layer_types"), list):
        text["layer_types"] = text["layer_types"][:1]
    (out / "config.json").write_text(json.dumps(config))
    for f in Path(target_dir).iterdir():
        if f.is_file() and f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
            os.symlink(f.resolve(), out / f.name)
    dtypes = sorted({info.dtype for info in keep.values() if info.dtype in GGUF_OUTTYPE})
    return out, dtypes[0] if len(dtypes) == 1 else "float32"


def probed(target_gguf: Path, draft_gguf: Path, folder: Path) -> str | None:
    """llama.cpp loading the pair in a child process first (``graph.load_probe``): its refusal, or None."""
    from contracts.engines.llamacpp import forked
    from contracts.engines.llamacpp.graph import compiled, load_probe, probe_refusal

    compiled()  # here, not in the child: a release whose headers the replay does not compile against is not judged
    log = folder / f"probe-{draft_gguf.stem}.log"
    code = forked.run(load_probe, (str(target_gguf), str(draft_gguf), str(log)), folder, log, PROBE_TIMEOUT_S)
    return probe_refusal(code, log.read_text(errors="replace") if log.is_file() else "")


def made_for(draft_dir) -> Pair | None:
    """The pair this process made last for DRAFT_DIR (whatever its target), if any and still current."""
    draft_dir = Path(draft_dir).resolve()
    stamp = _stamp(draft_dir)
    found = [p for key, p in _pairs.items() if key[0] == str(draft_dir) and key[2] == stamp]
    if not found and str(draft_dir) in _refused_targets:
        raise TargetBuildError(_refused_targets[str(draft_dir)])
    return found[-1] if found else None


def converted_with(made: Pair, changes: dict, tag: str) -> dict:
    """The draft converted again with CHANGES applied to a copy of its config.json (the tensors linked, not copied):
    what the release's converter writes under another setting. Returns the converter's answer with read_gguf's."""
    import json
    import os

    from contracts.engines.llamacpp.converter import convert

    copy = made.folder / f"draft-{tag}"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    given = made.given_draft or made.draft_dir
    for f in given.iterdir():
        if f.is_file() and f.name != "config.json":
            os.symlink(f.resolve(), copy / f.name)
    config = json.loads((given / "config.json").read_text())
    for key, value in changes.items():
        for nested in ("transformer_layer_config", "eagle_config"):  # wherever the checkpoint sets it,
            if isinstance(config.get(nested), dict) and key in config[nested]:
                config[nested][key] = value
        config[key] = value  # and at the top level, where llama.cpp's converter reads its keys
    (copy / "config.json").write_text(json.dumps(config))
    out = made.folder / f"gguf-{tag}"
    shutil.rmtree(out, ignore_errors=True)  # a second probe of this pair converts again from nothing (its target's
    # tokenizer folder, linked the first time, raised FileExistsError: a worker that had probed the pair once)
    return _read_back(convert(copy, made.given_target or made.target_dir, out), made.scale)


def close_all() -> None:
    global _scratch
    for made in _pairs.values():
        made.close()
    _pairs.clear()
    _targets.clear()
    if _scratch is not None:
        shutil.rmtree(_scratch, ignore_errors=True)
        _scratch = None
