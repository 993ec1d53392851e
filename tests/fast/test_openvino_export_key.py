"""OpenVINO GenAI's exports are kept in the exporter's environment under a key of the draft folder's files: by
content where the folder is small enough to be kept, so every staged copy of one draft (each test and each sweep
item stages one, in a folder of its own) is served the export its first copy made; before, the key held each file's
path and modification time, and every run exported every draft again (620 kept exports, 8 minutes of the sweep)."""

from __future__ import annotations

import shutil

from conftest import DRAFTS

from contracts.engines.openvino import export


def test_two_copies_of_one_draft_share_an_export_and_a_changed_file_does_not(tmp_path):
    a, b, c = (shutil.copytree(DRAFTS["specforge"], tmp_path / name) for name in ("a", "b", "c"))
    assert export._key(a) == export._key(b)
    (c / "config.json").write_text((c / "config.json").read_text() + "\n")  # one byte more: another export
    assert export._key(c) != export._key(a)


def test_a_folder_beyond_the_kept_size_is_keyed_by_its_files_stamps(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "KEPT_BELOW", 0)
    a, b = (shutil.copytree(DRAFTS["specforge"], tmp_path / name) for name in ("a", "b"))
    assert export._key(a) != export._key(b)  # (its export is temporary: made once per worker)
