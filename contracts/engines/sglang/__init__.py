"""SGLang adapter: the engine's own config handling, draft class, ``load_weights`` and wiring, on a CPU.

Entry points return plain observations (``contracts.observations``); shims live in ``shims.py``.
"""

from contracts.engines.errors import EngineBuildError
from contracts.engines.sglang.loader import observe_load

__all__ = ["EngineBuildError", "observe_load"]
