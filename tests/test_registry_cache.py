"""SGLang's registry at start-up: a check imports only the model modules it asks for, and every dispatch is
still the registry's own answer (the cached map is what SGLang's ``import_model_classes`` returns)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import DRAFTS, TARGET

PROBE = """
import json, sys
from contracts.cli import main
code = main(["check", sys.argv[1], "--target", sys.argv[2], "--only", "key-naming,hidden-width", "--format", "json"])
from sglang.srt.models.registry import ModelRegistry
print(json.dumps({"code": code, "deferred": not ModelRegistry._default_models_loaded,
                  "model_modules": sorted(m for m in sys.modules if m.startswith("sglang.srt.models."))}))
"""


def _fresh_check(draft, target) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(draft), str(target)], capture_output=True, text=True,
                         timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_check_imports_only_the_model_modules_it_needs():
    _fresh_check(DRAFTS["specforge"], TARGET)  # the first check of a release may compute the map
    seen = _fresh_check(DRAFTS["specforge"], TARGET)
    assert seen["code"] == 0 and seen["deferred"]
    modules = set(seen["model_modules"])
    assert {"sglang.srt.models.llama_eagle3", "sglang.srt.models.llama"} <= modules
    assert "sglang.srt.models.deepseek_v2" not in modules and len(modules) < 30, modules


def test_the_cached_map_is_the_registry_own_answer():
    from contracts.engines.sglang.context import ensure_context

    ensure_context()
    from sglang.srt.models.registry import import_model_classes

    from contracts.engines.sglang.registry_cache import _architecture_map, all_models

    engine = import_model_classes("sglang.srt.models")
    cached = _architecture_map()
    assert cached == {arch: cls.__module__ for arch, cls in engine.items()}
    assert all_models()["LlamaForCausalLMEagle3"] is engine["LlamaForCausalLMEagle3"]


def test_an_architecture_outside_the_map_gets_the_registry_own_fallback(broken, capsys):
    from contracts.cli import main

    path = broken("specforge", config={"architectures": ["NoSuchDraftForCausalLM"]})
    assert main(["check", str(path), "--only", "config", "--format", "json"]) == 1
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["status"] == "fail" and "NoSuchDraftForCausalLM" in result["summary"]
