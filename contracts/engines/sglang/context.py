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

_lock = threading.Lock()
_ready = False


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quiet() -> None:
    """SGLang logs and warns about every CUDA-only module it skips on a CPU; none of it is about the draft."""
    os.environ.setdefault("SGLANG_LOGGING_LEVEL", "ERROR")
    for name in ("sglang", "sglang.srt", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"sglang\..*")
    warnings.filterwarnings("ignore", message=r".*(CUDA|HIP|XPU|MUSA|NPU).*")


def ensure_context() -> None:
    """Import SGLang with the documented shims and publish a one-rank CPU context (idempotent)."""
    global _ready
    with _lock:
        if _ready:
            return
        _quiet()
        from contracts.engines.sglang import shims

        shims.install()
        import torch
        from sglang.srt.distributed.parallel_state import init_distributed_environment

        shims.select_torch_native_rotary()
        shims.run_compiled_functions_eagerly()
        _quiet()  # SGLang's import installs its own handlers; quiet them again
        if not torch.distributed.is_initialized():
            init_distributed_environment(
                world_size=1, rank=0, local_rank=0, backend="gloo",
                distributed_init_method=f"tcp://127.0.0.1:{_free_loopback_port()}",
            )
        _publish_server_topology()
        # Releases whose KV-cache modules import CUDA kernels at module level (0.5.9) get the documented
        # sgl_kernel stand-in here, at one fixed point after SGLang's core import; 0.5.23 needs none.
        shims.import_with_kernel_stand_in("sglang.srt.mem_cache.memory_pool_host")
        _ready = True


def _publish_server_topology() -> None:
    """Publish the server arguments and parallel groups the layers read, by the recipe of this release.

    device="cpu" is the truth here: SGLang's layers that ask the published device (e.g. DeepSeek's MLA
    rope, via get_rope_wrapper) then take their own CPU code path instead of probing for a GPU.
    """
    from sglang.srt.distributed import parallel_state
    from sglang.srt.distributed.parallel_state import initialize_model_parallel
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path="dummy", tp_size=1, ep_size=1, pp_size=1, device="cpu")
    try:  # the process-wide runtime context (0.5.23; 0.5.17/0.5.20 lack SpawnRanks and are not supported)
        from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
    except ImportError:  # a global ServerArgs, set by the scheduler (the 0.5.x releases before it)
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        import types

        import torch
        from sglang.srt.layers.dp_attention import initialize_dp_attention

        set_global_server_args_for_scheduler(args)
        initialize_model_parallel(backend="gloo")
        # what ModelRunner.init_torch_distributed does next (DeepSeek-family layers assert it ran); with DP
        # attention off, the model config only sizes a gathered buffer that no one-rank forward uses
        initialize_dp_attention(args, types.SimpleNamespace(hidden_size=1, dtype=torch.float32))
        return
    reset_context()
    publish(args, role="test", ranks=SpawnRanks(world_rank=0))
    get_parallel().override_permanently(world_group=parallel_state._WORLD)
    initialize_model_parallel(backend="gloo")


def engine_version() -> str:
    from importlib.metadata import version

    return version("sglang")
