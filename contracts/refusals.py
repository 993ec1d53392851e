"""What to do when the engine's own code refuses a checkpoint: the fix, read from the engine's error.

An engine refusing a readable checkpoint is a verdict (exit 1), never an input error or an internal error
of this suite. Prevents a refusal reported without a way out: SGLang 0.5.23 raises
``AttributeError: 'LlamaConfig' object has no attribute 'draft_vocab_size'`` while building a draft whose
config lacks the key (published SpecForge-style configs written by hand do), and the fix is to add it, not
to rename the architecture.
"""

from __future__ import annotations

import re


class EngineRefused(Exception):
    """The engine's own code refused to build the draft for this checkpoint (an observation, not a crash)."""


class NotADraft(EngineRefused):
    """The engine dispatches the draft config to a class that is no EAGLE-3 draft (e.g. a draft published under
    ``LlamaForCausalLM``): judged by ``config``; the contracts that read the loaded draft would only restate it."""


class TargetRefused(Exception):
    """The engine's own code refused to build the target model (the contracts that need it skip; ``needs``: the input
    the user could give that would let it, as the engine said)."""

    def __init__(self, message: str, needs: str | None = None):
        super().__init__(message)
        self.needs = needs

# how a contract's failure begins when the engine refused to build the draft (config's, or, when config is not
# judged, the first contract that met the refusal: the same finding under another contract's name)
REFUSED = "the engine cannot build this draft"
DRAFT_ARCHITECTURE_FIX = ('write architectures: ["LlamaForCausalLMEagle3"] in config.json (a speculators checkpoint, or '
                          "NeMo Automodel's LlamaEagle3DraftModel: eagle3-contracts convert --to sglang|vllm SRC DST)")
_MISSING_CONFIG_KEY = re.compile(r"'(\w*Config\w*)' object has no attribute '(\w+)'")
_UNMAPPED_TENSOR = re.compile(r"Can not map tensor '([^']+)'")  # llama.cpp's converter
_UNKNOWN_ARCH = ("not a registered model", "are not supported", "not supported for now", "Model architectures")


def _suggested_value(key: str, config: dict, tensors: dict) -> str:
    """The value the checkpoint itself implies for a missing key, when it implies one."""
    if key == "draft_vocab_size":
        head = tensors.get("lm_head.weight")
        d2t = next((t for name, t in tensors.items() if name.endswith("d2t")), None)
        if head is not None and head.shape:
            return f"{head.shape[0]} (the rows of lm_head.weight)"
        if d2t is not None and d2t.shape:
            return f"{d2t.shape[0]} (the length of d2t)"
        if isinstance(config.get("vocab_size"), int):
            return f"{config['vocab_size']} (vocab_size: a full-vocabulary draft)"
    return ""


def fix_for_refusal(engine_error: str, config: dict, tensors: dict) -> str:
    """The change to the checkpoint that the engine's refusal asks for (``tensors``: name -> TensorInfo)."""
    missing = _MISSING_CONFIG_KEY.search(engine_error)
    if missing:
        key = missing.group(2)
        value = _suggested_value(key, config, tensors)
        return (f"add `{key}` to config.json{': ' + value if value else ''}; the engine reads it while building "
                f"the draft and has no default for it")
    if any(marker in engine_error for marker in _UNKNOWN_ARCH):
        return DRAFT_ARCHITECTURE_FIX
    unmapped = _UNMAPPED_TENSOR.search(engine_error)
    if unmapped:
        return (f"the converter has no place for `{unmapped.group(1)}` in the draft it builds: remove the tensor if the "
                f"draft does not use it, or serve the draft with an engine that implements it; a config the converter "
                f"does not take for an EAGLE-3 draft is converted as a plain model, which has no place for d2t")
    return ("make config.json describe a draft this engine builds: the engine's own error (engine_error) names "
            "what it could not read")
