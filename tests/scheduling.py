"""How this suite spreads over pytest-xdist workers (``-n 2 --dist loadgroup``, as tox.ini runs it): one unit of work
per test file, per ``xdist_group`` and per engine release of the contract items (a file's engine start and module
fixtures, a group's lock and a release's environment each stay on one worker), handed out longest first.

pytest-xdist hands out units in order of their number of tests, so a file of a few long tests (the training-repository
runs of tests/test_build_tiny.py: 10 tests, 200 s) could start last and leave the other worker idle for minutes, and
``loadfile`` cannot also keep an engine release's contract items together (the per-release sweep was a second pytest
session: its own start, collection and engine imports). The seconds each unit took, measured on a 2-core machine,
are kept in ``scope_seconds.json``; a unit not there is estimated from its number of tests. Refresh them with
``tox -e py311 -- --record-scope-seconds`` (a whole-suite run) after a change moves them.
"""

from __future__ import annotations

import json
from pathlib import Path

from xdist.scheduler import LoadGroupScheduling

SECONDS = Path(__file__).with_name("scope_seconds.json")
UNKNOWN_S_PER_TEST = 1.6  # the suite's mean (1488 s over 942 tests), for a unit the table does not hold


def scope_of(nodeid: str) -> str:
    """The unit NODEID is run in: its group (``...@group``: an ``xdist_group`` or an engine release), else its file."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]
    return nodeid.split("::", 1)[0]


def measured() -> dict[str, float]:
    return json.loads(SECONDS.read_text()) if SECONDS.is_file() else {}


class LongestFirst(LoadGroupScheduling):
    """``--dist loadgroup`` with a file as the unit of an ungrouped test and the longest unit handed out first (the
    longest-processing-time rule: the last unit to start is a short one)."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.seconds = measured()

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _expected_s(self, scope: str) -> float:
        return self.seconds.get(scope, UNKNOWN_S_PER_TEST * len(self.workqueue[scope]))

    def _assign_work_unit(self, node) -> None:
        self.workqueue.move_to_end(max(self.workqueue, key=self._expected_s), last=False)
        super()._assign_work_unit(node)


class ScopeClock:
    """``--record-scope-seconds``: each unit's seconds (setup, call and teardown of its tests, as the controller is told
    them) written to ``scope_seconds.json`` when the session ends."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report):
        scope = scope_of(report.nodeid)
        self.seconds[scope] = self.seconds.get(scope, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        if getattr(session, "testsfailed", 0) or not self.seconds:
            return  # a failed run's units are not what a passing one takes
        SECONDS.write_text(json.dumps({k: round(v, 1) for k, v in sorted(self.seconds.items())}, indent=1) + "\n")
