"""llama.cpp's EAGLE-3 contract surface in one release, read from its own tree and library: what drift between
releases would change under a draft (the converter's EAGLE-3 keys and tensor names, the GGUF keys the loader reads).

Contract served: the surface drift report (``contracts.engines.surface_drift``)."""

from __future__ import annotations

import re

from contracts.engines.llamacpp.tree import converter_dir
from contracts.engines.llamacpp.version import engine
from contracts.observations import SurfaceObservation

CONFIG_KEY = re.compile(r"""eagle3_raw_config\.get\(["'](\w+)["']""")
SPECIAL_TENSOR = re.compile(r"""name (?:==|\.endswith\()\s*["']([\w.]+)["']""")


def observe_surface() -> SurfaceObservation:
    source = (converter_dir() / "conversion" / "llama.py")
    text = source.read_text() if source.is_file() else ""
    eagle = text[text.find("is_eagle3"):] if "is_eagle3" in text else ""
    return SurfaceObservation(engine=engine(), converter=str(source.relative_to(converter_dir())) if text else None,
                              config_keys=sorted(set(CONFIG_KEY.findall(text))),
                              special_tensors=sorted(set(SPECIAL_TENSOR.findall(eagle))))
