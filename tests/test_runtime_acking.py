"""Storm's acking semantics on real worker processes (TopologyIntegrationTest / TestingTest
scenarios, reference §5). Components report through a real Redis (runtime_components.py)."""

from __future__ import annotations

import time

import pytest
import redis
from runtime_components import (
    AckEveryOther,
    Agg,
    BasicFailer,
    Failer,
    FeedSpout,
    Record,
    ResetHolder,
    SelfAnchor,
)

from topology_runtime import TopologyBuilder
from topology_runtime.local_cluster import wait_for


@pytest.fixture
def r(redis_url):
    return redis.Redis.from_url(redis_url, decode_responses=True)


@pytest.fixture
def start(redis_url, make_cluster):
    """start(topology, conf) -> a run on 2 workers of the launcher under test; killed at teardown."""
    cluster = make_cluster(2)

    def _start(topology, conf=None, name="t"):
        c = {"test.redis.url": redis_url, "test.key": "t", **(conf or {})}
        run = cluster.submit(name, topology, c)
        assert wait_for(lambda: run.status().state == "running", 120)
        return run

    return _start


def feed(r, *ids):
    r.rpush("t:feed", *ids)


def events(r):
    return r.lrange("t:events", 0, -1)


@pytest.mark.spark_subset
def test_acking_tree_acks_only_after_the_aggregate_completes(start, r):
    """testAcking: an aggregator anchors one output to 3 inputs from different trees."""
    b = TopologyBuilder()
    b.set_spout("s1", FeedSpout())
    b.set_bolt("agg", Agg(3)).global_grouping("s1")
    b.set_bolt("sink", Record()).shuffle_grouping("agg")
    start(b.create_topology(), {"topology.message.timeout.secs": 30})
    feed(r, 0, 1, 2, 3)
    assert wait_for(lambda: len([e for e in events(r) if e.startswith("ack:")]) == 3, 20)
    time.sleep(0.5)
    ev = events(r)
    assert sorted(e for e in ev if e.startswith("ack:")) == ["ack:0", "ack:1", "ack:2"]  # 3 is still held
    assert ev.index("agg:0,1,2") < min(ev.index(f"ack:{i}") for i in range(3))


def test_ack_branching_needs_both_branches(start, r):
    """testAckBranching: a fan-out of 2 joined by an aggregator of 4."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("left", Record(emit=True)).shuffle_grouping("s")
    b.set_bolt("right", Record(emit=True)).shuffle_grouping("s")
    b.set_bolt("agg", Agg(4)).global_grouping("left").global_grouping("right")
    start(b.create_topology())
    feed(r, 1)
    assert wait_for(lambda: r.llen("t:seen:left") == 1 and r.llen("t:seen:right") == 1, 20)
    time.sleep(0.5)
    assert events(r) == []  # 2 of 4 aggregate inputs: tree 1 cannot complete
    feed(r, 2)
    assert wait_for(lambda: sorted(e for e in events(r) if e.startswith("ack")) == ["ack:1", "ack:2"], 20)


def test_acking_self_anchor(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("self", SelfAnchor()).shuffle_grouping("s")
    b.set_bolt("sink", Record()).shuffle_grouping("self")
    start(b.create_topology())
    feed(r, 7)
    assert wait_for(lambda: events(r) == ["ack:7"], 20)


def test_timeout_fails_unacked_tuples_between_t_and_2t(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("half", AckEveryOther()).shuffle_grouping("s")
    run = start(b.create_topology(), {"topology.message.timeout.secs": 1})
    assert wait_for(lambda: run.status().state == "running", 20)
    t0 = time.monotonic()
    feed(r, 1, 2, 3, 4)
    assert wait_for(lambda: {"ack:1", "ack:3"} <= set(events(r)), 10)
    assert wait_for(lambda: {"fail:2", "fail:4"} <= set(events(r)), 5)
    failed_after = time.monotonic() - t0
    assert 0.9 <= failed_after <= 4.0, failed_after  # spout pending: between T and 2T (plus a tick)
    assert not {"fail:1", "fail:3"} & set(events(r))
    assert wait_for(lambda: run.status().components["s"].timed_out == 2, 3)  # stats lag ~1 s


def test_reset_timeout_keeps_a_tuple_alive(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("hold", ResetHolder(hold_secs=3.0)).shuffle_grouping("s") \
        .add_configuration("topology.tick.tuple.freq.secs", 0.3)
    run = start(b.create_topology(), {"topology.message.timeout.secs": 1})
    assert wait_for(lambda: run.status().state == "running", 20)
    feed(r, 1, 2)
    assert wait_for(lambda: "fail:2" in events(r), 5)  # not reset: fails after T..2T
    assert wait_for(lambda: "ack:1" in events(r), 8)  # reset for 3 s (> 2T), then acked
    assert "fail:1" not in events(r)


def test_disabled_timeouts_never_fail(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("s")
    start(b.create_topology(), {"topology.message.timeout.secs": 1, "topology.enable.message.timeouts": False})
    feed(r, 1)
    assert wait_for(lambda: r.llen("t:seen:hold") == 1, 20)
    time.sleep(3.2)
    assert events(r) == []


def test_zero_ackers_ack_at_emit(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("s")
    start(b.create_topology(), {"topology.acker.executors": 0})
    feed(r, 5)
    assert wait_for(lambda: events(r) == ["ack:5"], 20)


def test_untracked_emit_gets_no_callback(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout(tracked=False))
    b.set_bolt("fail", Failer()).shuffle_grouping("s")
    b.set_bolt("rec", Record()).shuffle_grouping("s")
    start(b.create_topology(), {"topology.message.timeout.secs": 1})
    feed(r, 3)
    assert wait_for(lambda: r.llen("t:seen:rec") == 1, 20)
    time.sleep(2.5)
    assert events(r) == []


def test_unanchored_emit_is_not_part_of_the_tree(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("a", Record(emit=True, anchored=False)).shuffle_grouping("s")
    b.set_bolt("fail", Failer()).shuffle_grouping("a")
    start(b.create_topology())
    feed(r, 4)
    assert wait_for(lambda: events(r) == ["ack:4"], 20)


@pytest.mark.spark_subset
def test_explicit_fail_reaches_spout_fast(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("a", Record(emit=True)).shuffle_grouping("s")
    b.set_bolt("fail", Failer()).shuffle_grouping("a")
    run = start(b.create_topology(), {"topology.message.timeout.secs": 30})
    assert wait_for(lambda: run.status().state == "running", 20)
    t0 = time.monotonic()
    feed(r, 6)
    assert wait_for(lambda: events(r) == ["fail:6"], 5)
    assert time.monotonic() - t0 < 2


def test_basic_bolt_failed_exception_fails_and_auto_anchors(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("basic", BasicFailer()).shuffle_grouping("s")
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("basic")
    start(b.create_topology(), {"topology.message.timeout.secs": 30})
    feed(r, 8)
    assert wait_for(lambda: events(r) == ["fail:8"], 5)
    assert wait_for(lambda: r.llen("t:seen:hold") == 1, 5)  # the emit before the raise went out
    assert r.lindex("t:seen:hold", 0).startswith("8@")


def test_max_spout_pending_caps_tracked_tuples(start, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout(), 2)
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("s")
    run = start(b.create_topology(), {"topology.max.spout.pending": 3})
    feed(r, *range(100))
    assert wait_for(lambda: int(r.get("t:emits") or 0) >= 6, 20)
    time.sleep(1.0)
    assert int(r.get("t:emits")) == 6  # 3 per spout task, then next_tuple is not called
    assert wait_for(lambda: run.status().components["s"].emitted == 6, 3)


@pytest.mark.spark_subset
@pytest.mark.local_cluster
def test_multiple_ackers_and_replay_complete_a_bounded_run(redis_url, r, make_cluster):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout(replay=True), 2)
    b.set_bolt("a", Record(emit=True), 3).shuffle_grouping("s")
    b.set_bolt("b", Record(), 2).fields_grouping("a", ["n"])
    r.rpush("t:feed", *range(200), -1, -1)
    with make_cluster(2) as cluster:
        status = cluster.run("acks3", b.create_topology(),
                             {"test.redis.url": redis_url, "topology.acker.executors": 3}, timeout=60)
    assert status.state == "completed"
    assert sorted(int(e.split(":")[1]) for e in events(r)) == list(range(200))
    assert status.system_components["__acker"].tasks == 3
    assert status.components["s"].acked == 200 and status.components["b"].executed == 200
