"""The only stand-ins this suite puts under SGLang, all for CUDA-only or vision-only imports or calls that
block a CPU code path which never uses them. Each entry says what it replaces, on which releases, and why the
checked path is unaffected. ``context.ensure_context`` installs them once per process, each at the point its
release needs it (``install()`` before SGLang is imported, the release-specific ones right after its core
import); ``cuda_synchronize_is_a_no_op`` only spans the worker wiring.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
import types


class _Unavailable:
    """A placeholder that lets module-level names resolve but fails loudly if anything really uses it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a stand-in (eagle3-contracts shims): the checked path must not call it")

    def __mro_entries__(self, bases):  # allow `class X(torchvision.Foo)` at import time
        return (object,)


class _StandInModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self.__name__}.{attr}")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a stand-in module (and every submodule) for each top-level name in ``names``."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        module.__eagle3_contracts_stand_in__ = True
        return module

    def exec_module(self, module):
        pass


# Replaces: ``torchvision`` (every submodule).
# Why: SGLang imports torchvision at module level (``srt/multimodal/internvl_utils.py``, reached from
# ``srt/configs/__init__``), but nothing on the EAGLE-3 path (config, draft model, load_weights, worker
# wiring, draft forward) calls it. PyPI's torchvision beside the CPU torch 2.13.0 fails to import
# (``operator torchvision::nms does not exist``) and installing a matching one swaps torch for a CUDA build
#. Any real use raises ``RuntimeError`` naming the stand-in, so a path that starts needing
# torchvision fails loudly instead of silently.
_TORCHVISION = _StandInFinder(("torchvision",))

# Replaces: ``sgl_kernel`` (SGLang's CUDA kernel package), only on releases that need it at module level, and
# only once that import has failed (0.5.9: ``mem_cache/memory_pool_host`` imports ``sgl_kernel.kvcacheio``, the
# host KV-cache copy kernels of hierarchical caching, reached from ``model_runner``, ``radix_cache`` and
# ``eagle_worker_v2``; 0.5.3: ``srt/_custom_ops.py`` binds ``sgl_kernel.allreduce``, the custom all-reduce of
# multi-GPU tensor parallelism, when the process group is made). Installed by ``context.ensure_context`` after
# SGLang's core import, so the modules that probe for sgl_kernel to pick a kernel (``utils.common``,
# ``quantization.fp8_kernel``) have already seen the truth. Why the checked path is unaffected: nothing here
# uses a host KV cache (the wiring runs ``EagleDraftWorker.init_lm_head`` on a stand-in worker; forwards use
# the device pools and the torch-native backend); any call into a stand-in raises ``RuntimeError``.
# 0.5.23 imports nothing from it on these paths and never gets it.
_SGL_KERNEL = _StandInFinder(("sgl_kernel",))


def import_with_kernel_stand_in(module: str, optional: bool = False):
    """Import ``module``; if it fails only because ``sgl_kernel`` is absent, stand it in and import again.

    Absent shows two ways: ``No module named 'sgl_kernel'`` (0.5.9's memory_pool_host), or 0.5.3's
    ``srt/_custom_ops.py``, which swallows the ImportError and then fails with ``name 'sgl_kernel' is not
    defined``. ``optional``: a release without ``module`` at all needs nothing (returns None).
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if optional and e.name and module.startswith(e.name):
            return None
        if e.name is None or e.name.split(".")[0] != "sgl_kernel" or _SGL_KERNEL in sys.meta_path:
            raise
    except NameError as e:
        if "sgl_kernel" not in str(e) or _SGL_KERNEL in sys.meta_path:
            raise
    sys.meta_path.append(_SGL_KERNEL)  # (a failed import leaves no half-made module behind)
    return importlib.import_module(module)


_installed = False


def install() -> None:
    """Install the stand-ins needed by SGLang's EAGLE-3 path on a CPU-only machine (idempotent)."""
    global _installed
    if _installed:
        return
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is None:
        # transformers asks once (lru_cache) whether torchvision is installed; let it hear the truth
        # (no) before the stand-in exists, so it never takes torchvision code paths of its own.
        from transformers.utils import import_utils

        import_utils.is_torchvision_available()
        sys.meta_path.append(_TORCHVISION)
        _without_image_processor_registry()
    _installed = True


class _NoImageProcessors:
    """Replaces: ``transformers.AutoImageProcessor`` where transformers itself made it a placeholder that needs
    torchvision (transformers 5.6.0, SGLang 0.5.12's pin).

    Why: SGLang registers its vision configs' image processors at import time (``srt/configs/janus_pro.py``
    -> ``configs/utils.register_image_processor``); with no torchvision, transformers' placeholder raises
    ``ImportError`` there and SGLang cannot be imported at all. Registering an image processor only matters
    for preprocessing images; the EAGLE-3 path never does. ``register`` is a no-op; anything else raises.
    """

    @staticmethod
    def register(*args, **kwargs):
        return None

    def __init_subclass__(cls, **kwargs):
        raise RuntimeError("transformers.AutoImageProcessor is a stand-in (eagle3-contracts shims)")

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        raise RuntimeError("transformers.AutoImageProcessor is a stand-in (eagle3-contracts shims): "
                           "the checked path must not load image processors")


def _without_image_processor_registry() -> None:
    import sglang  # noqa: F401  (its package import may re-bind `transformers` in sys.modules: swap after it)

    transformers = sys.modules["transformers"]
    try:
        transformers.AutoImageProcessor.register  # noqa: B018  (transformers 5.19: a real class)
    except ImportError:  # a placeholder that needs torchvision
        transformers.AutoImageProcessor = _NoImageProcessors  # type: ignore[attr-defined]  # (installed on import)


def run_compiled_functions_eagerly() -> None:
    """Replaces: ``torch.compile`` JIT compilation (``torch._dynamo.config.disable = True``).

    Why: SGLang compiles a few helpers on the target paths observed here (e.g. DeepSeek-V3's
    ``_biased_grouped_topk_postprocess`` MoE routing); on a CPU the first call compiles for seconds in every
    process (measured: 7.3 s of hidden-width's 7.3 s on a Kimi-K2.5-shaped target, 0.9 s without). Eager
    execution runs the same Python code, so the widths, captured layers and logits observed are the same;
    nothing here measures the engine's speed.
    """
    import torch._dynamo

    torch._dynamo.config.disable = True


def select_torch_native_rotary() -> None:
    """Replaces: the platform probe ``sglang.srt.layers.rotary_embedding.base._is_cpu`` (set True).

    Why: on a platform that is neither CUDA nor SGLang's CPU engine, ``RotaryEmbedding.__init__`` imports
    ``vllm._custom_ops``. With the flag set, SGLang takes its own pure-torch rotary path
    (``forward_native``), which computes the same rotation; measured: the draft forward then matches an
    independent pure-torch EAGLE-3 reference exactly. Weight loading is not affected.
    """
    try:
        import sglang.srt.layers.rotary_embedding.base as rotary_base
    except ImportError:  # before the rotary package was split (a single module, e.g. 0.5.9)
        import sglang.srt.layers.rotary_embedding as rotary_base

    rotary_base._is_cpu = True
    # 0.5.3's RotaryEmbedding.__init__ imports vllm's CUDA rotary kernel unless `_is_cpu and
    # _is_cpu_amx_available`; the kernel is stored for forward_cuda only, and forward dispatch reads
    # srt/custom_op.py's own platform flags (no AMX here: forward_native). So the rotary module's AMX flag is
    # set too, where its constructor reads it; the rotation computed is forward_native's either way.
    init = getattr(getattr(rotary_base, "RotaryEmbedding", None), "__init__", None)
    if init is not None and "_is_cpu_amx_available" in inspect.getsource(init):
        rotary_base._is_cpu_amx_available = True


class _KernelModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``vllm`` and ``vllm._custom_ops`` whose names are stand-ins that raise if called."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in ("vllm", "vllm._custom_ops"):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname == "vllm")
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def rotary_without_vllm_kernel() -> None:
    """Replaces: ``vllm._custom_ops.rotary_embedding`` with a stand-in that raises if called, only while SGLang
    constructs a ``RotaryEmbedding``, on releases whose constructor imports it (0.5.5: for a float32 cache on any
    platform but CUDA/NPU/XPU; 0.5.9 and later do not).

    Why the checked path is unaffected: the kernel is only stored (``self.vllm_rotary_embedding``) for
    ``forward_cuda``; on a CPU SGLang's dispatch runs ``forward_native``, the pure-torch rotation (with
    ``select_torch_native_rotary``). The stand-in modules are removed from ``sys.modules`` right after, so no
    ``import vllm`` probe elsewhere sees a vllm.
    """
    try:
        import sglang.srt.layers.rotary_embedding.base as rotary_base
    except ImportError:  # a single rotary module (0.5.9 and earlier)
        import sglang.srt.layers.rotary_embedding as rotary_base
    cls = getattr(rotary_base, "RotaryEmbedding", None)
    if cls is None or getattr(cls.__init__, "__eagle3_contracts_stand_in__", False) \
            or "vllm._custom_ops" not in inspect.getsource(cls.__init__) or importlib.util.find_spec("vllm"):
        return
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        finder = _KernelModules()
        sys.meta_path.insert(0, finder)
        try:
            original(self, *args, **kwargs)
        finally:
            sys.meta_path.remove(finder)
            for name in ("vllm._custom_ops", "vllm"):
                sys.modules.pop(name, None)

    __init__.__eagle3_contracts_stand_in__ = True  # type: ignore[attr-defined]  # (a mark on the function)
    cls.__init__ = __init__


class _NamesFrom(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``vllm`` package stand-ins whose names resolve to attributes of an SGLang module."""

    def __init__(self, leaves: dict[str, str]):
        self.leaves = leaves  # "vllm.model_executor.layers.layernorm" -> "sglang.srt.layers.layernorm"

    def find_spec(self, fullname, path=None, target=None):
        if any(leaf == fullname or leaf.startswith(fullname + ".") for leaf in self.leaves):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname not in self.leaves)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        source = self.leaves.get(spec.name)
        if source is not None:
            module.__getattr__ = lambda name: getattr(sys.modules[source], name)
        else:
            module.__path__ = []
        return module

    def exec_module(self, module):
        pass


# Replaces: vllm's ``RMSNorm``, ``GemmaRMSNorm`` (``vllm.model_executor.layers.layernorm``) and ``SiluAndMul``,
# ``GeluAndMul`` (``...layers.activation``) with SGLang's own classes of the same names, only while SGLang 0.5.3
# imports ``srt/layers/layernorm.py`` and ``srt/layers/activation.py``.
# Why: on a CPU without AMX, 0.5.3 replaces its own layer classes with vllm's (``from vllm... import RMSNorm``)
# at the end of those modules; vllm drags in a CUDA torch. Pointing the names back at the
# classes SGLang defined just above keeps SGLang's own layers (their pure-torch ``forward_native`` on a CPU).
# The ``vllm`` stand-ins are removed from ``sys.modules`` right after, so every later ``import vllm`` probe
# (e.g. ``compressed_tensors_moe``'s ``VLLM_AVAILABLE``) still sees no vllm. 0.5.9 and later need none.
_VLLM_LAYER_NAMES = {"vllm.model_executor.layers.layernorm": "sglang.srt.layers.layernorm",
                     "vllm.model_executor.layers.activation": "sglang.srt.layers.activation"}


def import_layers_without_vllm() -> None:
    """Import SGLang's layernorm/activation modules; on a release that reaches for vllm there, with the
    stand-ins above, for the duration of that import only."""
    for module in _VLLM_LAYER_NAMES.values():
        try:
            importlib.import_module(module)
            continue
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] != "vllm":
                raise
        finder = _NamesFrom(_VLLM_LAYER_NAMES)
        sys.meta_path.insert(0, finder)
        try:
            importlib.import_module(module)
        finally:
            sys.meta_path.remove(finder)
            for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
                del sys.modules[name]


def fast_topk_stand_in() -> None:
    """Replaces: ``fast_topk`` in the speculative helpers module (``spec_utils``, before it ``eagle_utils``) where a
    release defines it only on CUDA/HIP (``from sgl_kernel import fast_topk`` under ``if is_cuda()``) while its
    EAGLE workers and CUDA-graph runners import it unconditionally (0.5.3-0.5.4.post1).

    Why the checked path is unaffected: ``fast_topk`` picks draft tokens during decoding; the wiring run here never
    calls it, and the stand-in raises if anything does.
    """
    for module in ("sglang.srt.speculative.spec_utils", "sglang.srt.speculative.eagle_utils"):
        found = import_with_kernel_stand_in(module, optional=True)
        if found is not None and not hasattr(found, "fast_topk"):
            found.fast_topk = _Unavailable("sgl_kernel.fast_topk")


def import_eagle_worker_v1():
    """0.5.3's ``speculative/eagle_worker.py`` (whose ``__init__`` holds the embed/head wiring), importable on a CPU
    (see ``fast_topk_stand_in``)."""
    fast_topk_stand_in()
    return import_with_kernel_stand_in("sglang.srt.speculative.eagle_worker")


def amx_probe_under_its_torch_name() -> None:
    """Replaces: ``torch._C._cpu._is_amx_tile_supported``, which SGLang 0.4.9.post1-0.5.1.post3 call at import
    (``cpu_has_amx_support``) and torch 2.13 no longer has under that private name, with torch's own
    ``torch.cpu._is_amx_tile_supported`` (the same CPU feature probe, under its current name).

    Why the checked path is unaffected: SGLang asks whether to use its AMX CPU kernels; the answer is the machine's
    own (no AMX here), so its pure-torch paths run as on any CPU without AMX. Not a CUDA stand-in: the one
    bridge this suite needs between an older release and the only CPU torch on this machine.
    """
    import torch

    cpu = getattr(torch._C, "_cpu", None)
    if cpu is not None and not hasattr(cpu, "_is_amx_tile_supported") and hasattr(torch.cpu, "_is_amx_tile_supported"):
        cpu._is_amx_tile_supported = torch.cpu._is_amx_tile_supported


@contextlib.contextmanager
def cuda_synchronize_is_a_no_op():
    """Replaces: ``torch.cuda.synchronize`` with a no-op, only while the engine's worker wiring runs.

    Why: 0.5.9's (and 0.5.3's) ``LlamaForCausalLM.set_embed`` / ``set_embed_and_head`` end with
    ``torch.cuda.empty_cache(); torch.cuda.synchronize()`` after swapping the parameters; on a CPU build of torch
    the second raises ``AssertionError: Torch not compiled with CUDA enabled`` (the swap has already happened).
    Synchronising waits for queued GPU kernels; there are none here, so which tensors the draft holds is
    unaffected. 0.5.23's wiring does not call it.
    """
    import torch

    if torch.cuda.is_available():
        yield
        return
    original = torch.cuda.synchronize
    torch.cuda.synchronize = lambda device=None: None
    try:
        yield
    finally:
        torch.cuda.synchronize = original
