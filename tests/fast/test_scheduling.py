"""The suite's xdist schedule (tests/scheduling.py): a file, an xdist_group or an engine release per unit, and the
longest unit handed out first, through pytest-xdist's own hand-out (``LoadScopeScheduling._assign_work_unit``)."""

from __future__ import annotations

from collections import OrderedDict

from tests.scheduling import LongestFirst, scope_of


def test_a_unit_is_a_group_where_the_node_id_names_one_else_its_file():
    assert scope_of("tests/test_vllm.py::test_x[specforge]") == "tests/test_vllm.py"
    assert scope_of("tests/test_vllm.py::TestA::test_x") == "tests/test_vllm.py"
    assert scope_of("tests/test_build_tiny.py::test_x@trainer-builds") == "trainer-builds"
    assert scope_of("contracts::d2t-semantics[specforge@sglang==0.5.9]@sglang==0.5.9") == "sglang==0.5.9"
    assert scope_of("tests/test_x.py::test_y[a@b]") == "tests/test_x.py"  # an @ in a parameter names no group


class Worker:
    def __init__(self):
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes):
        self.sent.append(list(indexes))


def _scheduler(units: dict[str, list[str]], seconds: dict[str, float]) -> tuple[LongestFirst, Worker, list[str]]:
    collection = [nodeid for ids in units.values() for nodeid in ids]
    sched = LongestFirst.__new__(LongestFirst)  # no session: the state the hand-out reads, as schedule() leaves it
    sched.seconds = seconds
    sched.workqueue = OrderedDict((scope, dict.fromkeys(ids, False)) for scope, ids in units.items())
    worker = Worker()
    sched.assigned_work, sched.registered_collections = {}, {worker: collection}
    return sched, worker, collection


def test_the_longest_unit_is_handed_out_first_and_an_unmeasured_one_by_its_number_of_tests():
    units = {"tests/test_many_short.py": [f"tests/test_many_short.py::t{i}" for i in range(40)],
             "trainer-builds": ["tests/test_build_tiny.py::a@trainer-builds", "tests/test_build_tiny.py::b@trainer-builds"],
             "tests/test_new.py": [f"tests/test_new.py::t{i}" for i in range(30)]}
    sched, worker, collection = _scheduler(units, {"tests/test_many_short.py": 20.0, "trainer-builds": 180.0})
    order = []
    while sched.workqueue:
        sched._assign_work_unit(worker)
        order.append({scope_of(collection[i]) for i in worker.sent[-1]})
    # 180 s, then 30 unmeasured tests (estimated at the suite's mean per test: 48 s), then 20 s
    assert order == [{"trainer-builds"}, {"tests/test_new.py"}, {"tests/test_many_short.py"}]
    assert worker.sent[0] == [40, 41]  # the worker is sent the unit's tests by their index in its collection
