"""topology_runtime.testing: what users get for their own tests."""

from __future__ import annotations

import pytest

from topology_runtime import BasicBolt, FailedException, LocalCluster, TopologyBuilder
from topology_runtime.testing import FAULT_ENV, FAULT_ONCE_ENV, FixedTupleSpout, crash_at, wait_for


class FailFirstTime(BasicBolt):
    outputs = ["n"]

    def prepare(self, conf, context):
        self.seen = set()

    def execute(self, tup):
        n = tup["n"]
        if n % 3 == 0 and n not in self.seen:
            self.seen.add(n)
            raise FailedException(f"first try of {n}")
        self.emit([n])


def test_fixed_tuple_spout_replays_failures_and_ends_the_run():
    builder = TopologyBuilder()
    builder.set_spout("fixed", FixedTupleSpout([[i] for i in range(30)], ["n"]), parallelism=2)
    builder.set_bolt("flaky", FailFirstTime()).shuffle_grouping("fixed")
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("fixed-tuples", builder.create_topology(), {}, timeout=60)
    fixed = status.components["fixed"]
    assert fixed.acked == 30  # every tuple completed, the ten multiples of 3 after one replay
    assert fixed.failed == 10 and fixed.replayed == 10
    assert status.components["flaky"].executed == 40


def test_crash_at_names_the_environment_and_refuses_unknown_points(tmp_path):
    assert crash_at("prepare", 3) == {FAULT_ENV: "prepare:3"}
    assert crash_at("commit", 2, tmp_path / "once") == {FAULT_ENV: "commit:2", FAULT_ONCE_ENV: str(tmp_path / "once")}
    with pytest.raises(ValueError, match="unknown fault point 'prepar'"):
        crash_at("prepar")


def test_wait_for_returns_the_last_answer():
    calls = []
    assert wait_for(lambda: calls.append(1) or len(calls) >= 3, timeout=5, interval=0.001)
    assert not wait_for(lambda: False, timeout=0.05, interval=0.01)
