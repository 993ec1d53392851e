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


def test_kept_exports_past_the_bound_go_least_recently_served_first(tmp_path):
    """Every flipped-config probe and every test's broken copy is a kept export of its own: the environment keeps the
    most recently served ``KEPT_MAX``, never one still being written (no record yet), and a day-old folder that never
    got its record (its export was killed) goes too."""
    import os

    kept = tmp_path / export.KEPT
    for i, name in enumerate(["old", "served-again", "new", "newest"]):
        (kept / name).mkdir(parents=True)
        record = kept / name / "eagle3-contracts-export.json"
        record.write_text("{}")
        os.utime(record, (1_000_000 + i, 1_000_000 + i))
    (kept / "being-written").mkdir()  # settled only once its record is there
    (kept / "abandoned").mkdir()  # written into by a process that died before it settled
    os.utime(kept / "abandoned", (1_000_000, 1_000_000))
    export._served(kept / "served-again" / "eagle3-contracts-export.json")
    gone = export.prune(kept, most=2)
    assert sorted(p.name for p in gone) == ["abandoned", "new", "old"]
    assert sorted(p.name for p in kept.iterdir()) == ["being-written", "newest", "served-again"]
