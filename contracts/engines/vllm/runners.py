"""vLLM's two model runners: which one a GPU deployment of a release takes for a draft, and Model Runner V2's own
seams run on a CPU.

Prevents a verdict about a path no GPU server takes. Since Model Runner V2 became the default
(``VllmConfig.use_v2_model_runner``: V2 unless ``VLLM_USE_V2_MODEL_RUNNER`` says otherwise, Triton is missing, or
the config asks for a feature V2 lacks), a GPU server runs V2 and the CPU build (no Triton) runs V1, and the two
disagree on published drafts: V2 reads the aux layer ids from the draft config's top-level
``eagle_aux_hidden_state_layer_ids`` (or ``eagle_config["layer_ids"]``) and never from
``eagle_config["eagle_aux_hidden_state_layer_ids"]``, which V1 reads; V2 decides the capture switch on its own
(0.32.0: every EAGLE-3 draft captures, whatever ``use_aux_hidden_state`` says) and shares the target's embedding
without V1's width check.

The default is the release's own property evaluated as on a CUDA GPU: Triton present (``HAS_TRITON`` in the
module that decides), ``VLLM_USE_V2_MODEL_RUNNER`` unset; everything else it reads is the draft's real
``VllmConfig``. V2 itself is vLLM's own CPU subclass of it (``vllm.v1.worker.cpu.model_runner.CPUModelRunner``),
constructed as vLLM's CPU worker constructs it (after ``vllm.v1.worker.cpu.shm``, vLLM's CPU stand-ins for CUDA
streams, events and pinned buffers, which the CPU worker imports first). Its batch preparation and speculator
kernels are Triton-only, so no step is run; its seams that decide are: the runner's constructor (the capture
switch, ``init_speculator``), its ``load_model`` (``set_eagle3_aux_hidden_state_layers``: the ids V2 reads and
its fallback), and the speculator's ``load_model`` (``load_eagle_model``: the embed/head sharing).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os

V1, V2 = "v1", "v2"
LABEL = {V1: "Model Runner V1", V2: "Model Runner V2"}
ENV = "VLLM_USE_V2_MODEL_RUNNER"


def has_v2() -> bool:
    """This release has Model Runner V2 (and the switch that makes it the default)."""
    from vllm.config import VllmConfig

    return hasattr(VllmConfig, "use_v2_model_runner") and \
        importlib.util.find_spec("vllm.v1.worker.gpu.model_runner") is not None


@contextlib.contextmanager
def as_on_a_gpu():
    """What ``use_v2_model_runner`` reads of the machine, as a CUDA GPU server has it: Triton present and
    ``VLLM_USE_V2_MODEL_RUNNER`` not set. Restored afterwards."""
    import vllm.config.vllm as decides

    saved_flag, saved_env = decides.HAS_TRITON, os.environ.pop(ENV, None)
    decides.HAS_TRITON = True
    try:
        yield
    finally:
        decides.HAS_TRITON = saved_flag
        if saved_env is not None:
            os.environ[ENV] = saved_env


def gpu_default(vc) -> tuple[str, str]:
    """(runner, why): the runner a GPU deployment of this release takes for the draft of ``vc`` (a ``VllmConfig``),
    by the release's own ``VllmConfig.use_v2_model_runner``."""
    from contracts.engines.vllm.context import engine_version

    version = engine_version()
    if not has_v2():
        return V1, f"vLLM {version} has no Model Runner V2"
    with as_on_a_gpu():
        v2 = bool(vc.use_v2_model_runner)
        lacking = list(getattr(vc, "_get_v2_model_runner_unsupported_features", lambda: [])())
    decided = f"vLLM {version}'s VllmConfig.use_v2_model_runner, evaluated with Triton present and {ENV} unset"
    if v2:
        return V2, f"{decided} (as on a GPU server): True"
    return V1, f"{decided}: False" + (f" (V2 does not support {', '.join(lacking)})" if lacking else "")


def v2_runner(vc):
    """vLLM's own Model Runner V2 for the CPU, constructed as its CPU worker constructs it."""
    import torch

    import vllm.v1.worker.cpu.shm  # noqa: F401  (what vLLM's CPU worker imports first: its CPU stand-ins)
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner
    from vllm.v1.worker.cpu_model_runner import _torch_cuda_wrapper

    from contracts.engines.vllm.context import current

    with current(vc), _torch_cuda_wrapper():
        return CPUModelRunner(vc, torch.device("cpu"))


@contextlib.contextmanager
def draft_model_is(draft):
    """V2's ``load_eagle_model`` hands the draft it builds through ``get_model`` to the sharing steps: here it is
    handed the draft this suite built and traced (the same class, from the same config), not a second load."""
    import vllm.v1.worker.gpu.spec_decode.eagle.utils as eagle_utils

    # (an error before the draft is asked for is the engine's, e.g. a target refusing capture in load_model)
    with handed(eagle_utils, "get_model", lambda *args, **kwargs: draft, "load_eagle_model did not ask get_model "
                                                                        "for the draft", unused_error_is_ours=False):
        yield


@contextlib.contextmanager
def target_model_is(target):
    """V2's ``load_model`` loads the target through ``get_model_loader`` (0.29-0.31 take no model argument): here the
    loader hands back the target this suite built (vLLM's own class from the same config), so the rest of the
    runner's own ``load_model`` runs as written: the capture switch, ``set_eagle3_aux_hidden_state_layers``, the
    speculator's load."""
    import types

    import vllm.v1.worker.gpu.model_runner as v2

    loader = types.SimpleNamespace(load_model=lambda *args, **kwargs: target)
    with handed(v2, "get_model_loader", lambda *args, **kwargs: loader, "its load_model did not ask "
                                                                        "get_model_loader for the target"):
        yield


@contextlib.contextmanager
def handed(module, name: str, stand_in, unused: str, unused_error_is_ours: bool = True):
    """MODULE.NAME replaced by STAND_IN while the runner's code runs, restored afterwards. A release whose code never
    called it took another way to the model, which would build a second one beside this suite's (vLLM then raises
    "Duplicate layer name", its own frame, not a verdict): that is this suite's replay failing, said as such. With
    ``unused_error_is_ours=False`` an error raised before the stand-in was needed stays the engine's."""
    from contracts.engines.errors import ReplayError
    from contracts.engines.vllm.context import engine_version

    calls: list[int] = []
    saved = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return stand_in(*args, **kwargs)

    setattr(module, name, counted)
    try:
        yield
    except Exception as e:
        if not calls and unused_error_is_ours:
            raise ReplayError(f"this suite's replay of vLLM {engine_version()}'s Model Runner V2 failed: {unused} "
                              f"({type(e).__name__}: {str(e)[:200]})") from None
        raise
    finally:
        setattr(module, name, saved)
    if not calls:
        raise ReplayError(f"this suite's replay of vLLM {engine_version()}'s Model Runner V2 failed: {unused}")


def v2_aux_ids(vc):
    """The explicit aux ids V2 reads from the draft config (None: its fallback, the target's default)."""
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config

    ids = get_eagle3_aux_layers_from_config(vc.speculative_config)
    return None if ids is None else list(ids)


def resolve(vc, runner: str | None) -> str:
    """The runner to judge: the one asked for, else the GPU default (``gpu_default``)."""
    if runner is None:
        return gpu_default(vc)[0]
    if runner == V2 and not has_v2():
        from contracts.engines.errors import ReplayError
        from contracts.engines.vllm.context import engine_version

        raise ReplayError(f"vLLM {engine_version()} has no Model Runner V2")
    return runner


def observe_path(engine_dir, target_dir=None, runner: str | None = None):
    """Which runner serves the draft in ENGINE_DIR with TARGET_DIR by default on a GPU, and which one is judged
    (``runner``; None: that default). A draft config vLLM refuses is judged on the default of a config without
    it (the refusal itself is the ``config`` contract's finding)."""
    from pathlib import Path

    from contracts.engines.errors import EngineBuildError
    from contracts.engines.vllm.context import draft_configs, engine_version, ensure_context
    from contracts.observations import PathObservation

    try:
        vc = draft_configs(Path(engine_dir), None if target_dir is None else Path(target_dir)).vc
        refused = None
    except EngineBuildError as e:
        from vllm.config import DeviceConfig, VllmConfig

        ensure_context()
        vc, refused = VllmConfig(device_config=DeviceConfig(device="cpu")), str(e)
    default, why = gpu_default(vc)
    if refused:
        why += f" (for a config without this draft: vLLM refused it, {refused[:200]})"
    judged = resolve(vc, runner)
    return PathObservation(engine={"name": "vllm", "version": engine_version()}, kind="runner", judged=judged,
                           label=LABEL[judged], default=default, default_label=LABEL[default], default_why=why,
                           asked=runner, available=[V1, V2] if has_v2() else [V1])
