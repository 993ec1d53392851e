"""SGLang's process context on a CPU: the distributed world of one rank and the published server
topology its layers read at construction (without it: ``parallel name 'pp_group' has not been written in
this process``). One context per process, made on first use; safe under pytest-xdist because every
process binds its own free loopback port instead of a fixed one.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import warnings

from contracts.checkpoint import offline_for_engine

_lock = threading.Lock()
_ready = False
_imported = False  # SGLang's core imported with the shims (``preload``)
_server_args = None  # the ServerArgs published for this process (every release has one; not all keep it)


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quiet() -> None:
    """SGLang logs and warns about every CUDA-only module it skips on a CPU; none of it is about the draft."""
    os.environ.setdefault("SGLANG_LOGGING_LEVEL", "ERROR")
    offline_for_engine()  # everything the engine loads is local; never wait on a model hub
    for name in ("sglang", "sglang.srt", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"sglang\..*")
    warnings.filterwarnings("ignore", message=r".*(CUDA|HIP|XPU|MUSA|NPU).*")


def _import_engine() -> None:
    """SGLang's core imported with the documented shims, nothing started (idempotent; the caller holds the lock)."""
    global _imported
    if _imported:
        return
    _quiet()
    from contracts.engines.sglang import registry_cache, shims

    registry_cache.defer_default_models()
    shims.install()
    shims.amx_probe_under_its_torch_name()
    import torch  # noqa: F401
    import sglang.srt.distributed.parallel_state  # noqa: F401

    shims.select_torch_native_rotary()
    shims.rotary_without_vllm_kernel()
    shims.run_compiled_functions_eagerly()
    _quiet()  # SGLang's import installs its own handlers; quiet them again
    # 0.5.3 binds its custom all-reduce kernels when the process group is made (one rank never uses them)
    shims.import_with_kernel_stand_in("sglang.srt._custom_ops", optional=True)
    _imported = True


def preload() -> None:
    """SGLang's core with the shims, imported as ``ensure_context`` imports it, starting nothing (no thread, no
    process group): what a zygote (``contracts.engines.zygote``) holds before it forks a worker per check."""
    with _lock:
        _import_engine()


def ensure_context(tp: int = 1, rank: int = 0, init_method: str | None = None) -> None:
    """Import SGLang with the documented shims and publish a CPU context (idempotent): one rank, or rank RANK of a
    TP-rank gloo world whose members meet at INIT_METHOD (``contracts.engines.ranks``)."""
    global _ready
    with _lock:
        if _ready:
            return
        _import_engine()
        import torch
        from sglang.srt.distributed.parallel_state import init_distributed_environment

        from contracts.engines.sglang import shims

        if not torch.distributed.is_initialized():
            init_distributed_environment(
                world_size=tp, rank=rank, local_rank=rank, backend="gloo",
                distributed_init_method=init_method or f"tcp://127.0.0.1:{_free_loopback_port()}",
            )
        _publish_server_topology(tp, rank)
        # Releases whose KV-cache modules import CUDA kernels at module level (0.5.9) get the documented
        # sgl_kernel stand-in here, at one fixed point after SGLang's core import; 0.5.23 needs none.
        shims.import_with_kernel_stand_in("sglang.srt.mem_cache.memory_pool_host")
        shims.import_layers_without_vllm()  # 0.5.3 reaches for vllm's layer classes on a CPU without AMX
        _ready = True


def _placeholder_model():
    """A private directory holding a one-layer Llama config.json, removed at exit: the "served model" of the
    published ServerArgs where a release reads its config (the drafts and targets checked bring their own)."""
    import atexit
    import json
    import shutil
    import tempfile
    from pathlib import Path

    directory = Path(tempfile.mkdtemp(prefix="eagle3-contracts-placeholder-"))
    atexit.register(shutil.rmtree, directory, True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 512,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "torch_dtype": "float32"}))
    return directory


def _publish_server_topology(tp: int = 1, rank: int = 0) -> None:
    """Publish the server arguments and parallel groups the layers read, by the recipe of this release.

    device="cpu" is the truth here: SGLang's layers that ask the published device (e.g. DeepSeek's MLA
    rope, via get_rope_wrapper) then take their own CPU code path instead of probing for a GPU.
    """
    from sglang.srt.distributed import parallel_state
    from sglang.srt.server_args import ServerArgs

    global _server_args
    # a local placeholder, never a hub id: 0.5.3 reads the served model's config while making ServerArgs
    args = _server_args = ServerArgs(model_path=str(_placeholder_model()), tp_size=tp, ep_size=1, pp_size=1,
                                     device="cpu")
    try:  # the process-wide runtime context (0.5.17 and later)
        from sglang.srt import runtime_context
    except ImportError:  # the 0.5.x releases before it: module-level state set by the scheduler
        _publish_module_state(args, tp)
        return
    runtime_context.reset_context()
    spawn_ranks = getattr(runtime_context, "SpawnRanks", None)  # 0.5.23 records the spawn ranks; 0.5.17 does not
    if spawn_ranks is None:
        runtime_context.publish(args, role="test")
        _initialize_model_parallel(tp)
        _initialize_dp_attention(args)  # 0.5.17: still ModelRunner's step (0.5.23 derives it from the context)
        return
    runtime_context.publish(args, role="test", ranks=spawn_ranks(world_rank=rank))
    runtime_context.get_parallel().override_permanently(world_group=parallel_state._WORLD)
    _initialize_model_parallel(tp)


def _initialize_model_parallel(tp: int) -> None:
    """SGLang's model-parallel groups over gloo, TP ranks wide: releases whose ``initialize_model_parallel`` reads
    the width from the published context (0.5.17 on) are given none."""
    import inspect

    from sglang.srt.distributed.parallel_state import initialize_model_parallel

    if "tensor_model_parallel_size" in inspect.signature(initialize_model_parallel).parameters:
        initialize_model_parallel(tensor_model_parallel_size=tp, backend="gloo")
    else:
        initialize_model_parallel(backend="gloo")


def _initialize_dp_attention(args) -> None:
    """DP attention's module state, as ``ModelRunner.init_torch_distributed`` makes it (DeepSeek-family layers
    assert it ran). With DP attention off, the model config it takes only sizes a gathered buffer no one-rank
    forward uses (and, on 0.5.17, asks whether the model is a hybrid): the placeholder model's config."""
    import types

    import torch
    from sglang.srt.layers.dp_attention import initialize_dp_attention

    initialize_dp_attention(args, types.SimpleNamespace(hidden_size=1, dtype=torch.float32,
                                                        hf_config=types.SimpleNamespace()))


def _publish_module_state(args, tp: int = 1) -> None:
    """0.5.9/0.5.12: a global ServerArgs (``set_global_server_args_for_scheduler``); 0.5.3: none (layers read
    ``global_server_args_dict``'s defaults). Then the model-parallel groups and DP attention."""
    from sglang.srt import server_args as server_args_module

    publish = getattr(server_args_module, "set_global_server_args_for_scheduler", None)
    if publish is not None:
        publish(args)
    _initialize_model_parallel(tp)
    _initialize_dp_attention(args)


def server_args():
    """The ServerArgs this process published (the scheduler's arguments, as the layers see them)."""
    ensure_context()
    return _server_args


def engine_version() -> str:
    from importlib.metadata import version

    return version("sglang")
