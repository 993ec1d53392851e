"""The only stand-ins this suite puts under SGLang, all for CUDA-only or vision-only imports that block
a CPU code path which never uses them. Each entry says what it replaces and why the checked path is
unaffected. Installed once per process by ``install()`` before SGLang is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
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


class _TorchvisionStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Replaces: ``torchvision`` (every submodule).

    Why: SGLang imports torchvision at module level (``srt/multimodal/internvl_utils.py``, reached from
    ``srt/configs/__init__``), but nothing on the EAGLE-3 path (config, draft model, load_weights,
    worker wiring, draft forward) calls it. PyPI's torchvision beside the CPU torch 2.13.0 fails to import
    (``operator torchvision::nms does not exist``) and installing a matching one swaps torch for a CUDA
    build (FIELD-NOTES §1). Any real use raises ``RuntimeError`` naming the stand-in, so a path that
    starts needing torchvision fails loudly instead of silently.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        module.__eagle3_contracts_stand_in__ = True
        return module

    def exec_module(self, module):
        pass


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
        sys.meta_path.append(_TorchvisionStandIn())
    _installed = True


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
    independent pure-torch EAGLE-3 reference exactly (FIELD-NOTES §1). Weight loading is not affected.
    """
    import sglang.srt.layers.rotary_embedding.base as rotary_base

    rotary_base._is_cpu = True
