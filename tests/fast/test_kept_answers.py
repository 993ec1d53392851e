"""A trainer job's answer (``accept``'s expectation) is kept by the content of the files it was made from, and a
job that failed is not kept (``contracts.references.kept_answer``)."""

from __future__ import annotations

import shutil

from contracts.bundled import FIXTURES
from contracts.references import kept_answer


def test_an_answer_is_made_once_per_content_and_a_failure_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE3_CONTRACTS_ENVS", str(tmp_path / "cache" / "envs"))
    draft = shutil.copytree(FIXTURES / "drafts" / "specforge", tmp_path / "draft")
    target = FIXTURES / "targets" / "llama-tiny"
    calls = []

    def job():
        calls.append(1)
        return {"mean_acceptance_length": 3.82}

    assert kept_answer("expectations", ["job"], draft, target, job) == ({"mean_acceptance_length": 3.82}, False)
    copy = shutil.copytree(draft, tmp_path / "elsewhere")  # the same files in another folder: the same answer
    assert kept_answer("expectations", ["job"], copy, target, job) == ({"mean_acceptance_length": 3.82}, True)
    assert len(calls) == 1
    (copy / "config.json").write_text((copy / "config.json").read_text().replace("}", ', "x": 1}', 1))
    assert kept_answer("expectations", ["job"], copy, target, job)[1] is False  # other files: made again
    assert kept_answer("expectations", ["another job"], draft, target, job)[1] is False
    assert kept_answer("expectations", ["failing"], draft, target, lambda: None) == (None, False)
    assert kept_answer("expectations", ["failing"], draft, target, job) == ({"mean_acceptance_length": 3.82}, False)
