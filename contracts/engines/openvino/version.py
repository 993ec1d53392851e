"""The OpenVINO GenAI release this environment holds, and the OpenVINO and exporter releases beside it."""

from __future__ import annotations


def engine() -> dict:
    from importlib.metadata import version

    return {"name": "openvino", "version": version("openvino-genai"), "openvino": version("openvino"),
            "exporter": f"optimum-intel {version('optimum-intel')}"}
