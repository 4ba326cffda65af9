"""Storm's acking semantics on real worker processes: TopologyIntegrationTest / TestingTest
scenarios (reference §5) and the acking configuration keys. Components report through a real
Redis (topologies.py); every test goes through ``cluster_factory`` (LocalCluster, and Spark for
the tests marked ``spark_subset``) and the public API only."""

from __future__ import annotations

import time

import pytest
import redis
from topologies import (
    AckEvenFailOdd,
    AckEveryOther,
    Agg,
    BasicFailer,
    BasicPass,
    BasicSelfAck,
    EndlessSpout,
    Failer,
    FeedSpout,
    IterAnchor,
    Record,
    ResetHolder,
    SelfAnchor,
    conf_for,
    contexts,
    events,
    feed,
    ids_of,
    outcomes,
    times,
)

from topology_runtime import TopologyBuilder
from topology_runtime.testing import wait_for


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def start(redis_url, cluster_factory):
    """start(topology, **conf) -> a running run on 2 workers; the cluster kills it at teardown."""
    cluster = cluster_factory(2)

    def _start(topology, name="acking", **conf):
        run = cluster.submit(name, topology, conf_for(redis_url, **conf))
        assert wait_for(lambda: run.status().state == "running", 60), run.status()
        return run

    return _start


def T(secs):
    return {"topology.message.timeout.secs": secs}


@pytest.mark.spark_subset
def test_acking_multi_spout_tree_acks_after_every_aggregate(start, r):
    """testAcking: tuples of two spouts meet in aggregators that anchor one output to several
    inputs of different trees; a spout tuple is acked only when every aggregate it feeds is done."""
    b = TopologyBuilder()
    b.set_spout("s1", FeedSpout())
    b.set_spout("s2", FeedSpout())
    b.set_bolt("ident", Record(emit=True)).shuffle_grouping("s1")
    b.set_bolt("pair", Agg(2)).global_grouping("ident")                              # s1 only
    b.set_bolt("triple", Agg(3)).global_grouping("s1").global_grouping("s2")        # s1 and s2
    b.set_bolt("sink", Record()).shuffle_grouping("pair").shuffle_grouping("triple")
    start(b.create_topology(), **T(30))

    feed(r, "s1", 1, 2)
    assert wait_for(lambda: "agg:pair:1,2" in events(r) and r.llen("t:seen:sink") == 1, 20)
    time.sleep(0.7)
    assert outcomes(r) == []  # the pair completed, but 1 and 2 are still held by "triple"
    feed(r, "s2", 3)
    assert wait_for(lambda: len(outcomes(r)) == 3, 20)
    ev = events(r)
    assert sorted(outcomes(r)) == ["ack:1", "ack:2", "ack:3"]
    assert ev.index("agg:triple:1,2,3") < min(ev.index(f"ack:{i}") for i in (1, 2, 3))

    feed(r, "s1", 4)
    feed(r, "s2", 5)
    assert wait_for(lambda: r.llen("t:seen:ident") == 3, 20)
    time.sleep(0.7)
    assert len(outcomes(r)) == 3  # 4 waits for "pair" and "triple", 5 for "triple"
    feed(r, "s1", 6)
    assert wait_for(lambda: len(outcomes(r)) == 6, 20)
    assert sorted(outcomes(r)[3:]) == ["ack:4", "ack:5", "ack:6"]
    assert not ids_of(r, "fail")


def test_ack_branching_acks_only_after_the_join(start, r):
    """testAckBranching: each spout tuple fans out to 2 bolts joined by an aggregator of 4."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("left", Record(emit=True)).shuffle_grouping("s")
    b.set_bolt("right", Record(emit=True)).shuffle_grouping("s")
    b.set_bolt("agg", Agg(4)).global_grouping("left").global_grouping("right")
    start(b.create_topology(), **T(30))
    feed(r, "s", 1)
    assert wait_for(lambda: r.llen("t:seen:left") == 1 and r.llen("t:seen:right") == 1, 20)
    time.sleep(0.7)
    assert outcomes(r) == []  # 2 of the aggregate's 4 inputs: tree 1 cannot complete
    feed(r, "s", 2)
    assert wait_for(lambda: len(outcomes(r)) == 2, 20)
    assert sorted(outcomes(r)) == ["ack:1", "ack:2"]
    ev = events(r)
    assert ev.index("agg:agg:1,1,2,2") < min(ev.index("ack:1"), ev.index("ack:2"))


def test_acking_self_anchor(start, r):
    """testAckingSelfAnchor: an output anchored twice to the same input; the tree completes when
    the child is acked and fails when the child fails."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("self", SelfAnchor()).shuffle_grouping("s")
    b.set_bolt("sink", AckEvenFailOdd()).shuffle_grouping("self")
    start(b.create_topology(), **T(30))
    feed(r, "s", 2, 3)
    assert wait_for(lambda: len(outcomes(r)) == 2, 20)
    assert sorted(outcomes(r)) == ["ack:2", "fail:3"]


def test_anchors_given_as_an_iterator_anchor_every_target(start, r):
    """``anchors`` may be any iterable of tuples: an output going to two bolts is anchored in both
    copies, so the second copy's fail fails the spout tuple."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("iter", IterAnchor()).shuffle_grouping("s")
    b.set_bolt("ok", Record()).shuffle_grouping("iter")  # first target of each emit
    b.set_bolt("fail", Failer()).shuffle_grouping("iter")  # second target
    start(b.create_topology(), **T(30))
    feed(r, "s", 1)
    assert wait_for(lambda: outcomes(r), 10)
    time.sleep(0.3)
    assert outcomes(r) == ["fail:1"]


def test_tuple_without_subscribers_is_acked_at_once(start, r):
    """A tracked emit that reaches no task (nobody subscribes to the stream) completes at once."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    start(b.create_topology(), **T(30))
    feed(r, "s", 9)
    assert wait_for(lambda: outcomes(r) == ["ack:9"], 10), outcomes(r)


@pytest.mark.slow
def test_timeout_fails_unacked_tuples_between_t_and_2t(start, r):
    """testTimeout, scaled to T = 1 s: the unacked tuples fail between T and 2T after their emit
    (spout pending: 2 buckets rotated every T); the acked ones never fail."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("half", AckEveryOther()).shuffle_grouping("s")
    start(b.create_topology(), **T(1))
    feed(r, "s", 1, 2, 3, 4)
    assert wait_for(lambda: sorted(outcomes(r)) == ["ack:1", "ack:3", "fail:2", "fail:4"], 10), outcomes(r)
    emitted, failed = times(r, "emit"), times(r, "fail")
    for i in (2, 4):
        assert 0.9 <= failed[i] - emitted[i] <= 2.6, (i, failed[i] - emitted[i])
    time.sleep(2.2)  # past 2T: the acked ones are done for good
    assert sorted(outcomes(r)) == ["ack:1", "ack:3", "fail:2", "fail:4"]


@pytest.mark.slow
def test_reset_timeout_keeps_a_tuple_alive(start, r):
    """testResetTimeout, T = 1 s: tuple 1's timeout is reset every 0.3 s for 3 s (> 2T), then it is
    acked and never failed; tuple 2, held without reset, fails after T..2T."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("hold", ResetHolder(hold_secs=3.0)).shuffle_grouping("s") \
        .add_configuration("topology.tick.tuple.freq.secs", 0.3)
    start(b.create_topology(), **T(1))
    feed(r, "s", 1, 2)
    assert wait_for(lambda: "fail:2" in outcomes(r), 5), outcomes(r)
    assert wait_for(lambda: "ack:1" in outcomes(r), 8), outcomes(r)
    emitted, failed, acked = times(r, "emit"), times(r, "fail"), times(r, "ack")
    assert 0.9 <= failed[2] - emitted[2] <= 2.6, failed[2] - emitted[2]
    assert acked[1] - emitted[1] > 2.0  # alive past 2T thanks to the resets
    assert 1 not in failed and sorted(outcomes(r)) == ["ack:1", "fail:2"]


@pytest.mark.slow
def test_ack_after_the_timeout_is_ignored(start, r):
    """A tuple acked after it timed out: the spout saw fail and never sees an ack (as Storm)."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("hold", ResetHolder(hold_secs=2.5, reset=False)).shuffle_grouping("s") \
        .add_configuration("topology.tick.tuple.freq.secs", 0.3)
    start(b.create_topology(), **T(1))
    feed(r, "s", 1)
    assert wait_for(lambda: "bolt_ack:1" in events(r), 10)
    time.sleep(0.5)
    assert outcomes(r) == ["fail:1"]


@pytest.mark.slow
def test_disabled_timeouts_never_fail(start, r):
    """TestingTest.testDisableTupleTimeout: with timeouts off an unacked tuple never fails."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("s")
    start(b.create_topology(), **T(1), **{"topology.enable.message.timeouts": False})
    feed(r, "s", 1)
    assert wait_for(lambda: r.llen("t:seen:hold") == 1, 20)
    time.sleep(3.2)  # > 3T
    assert outcomes(r) == []


@pytest.mark.slow
def test_zero_ackers_ack_at_emit(start, r):
    """topology.acker.executors = 0: the spout's ack runs inside emit, though no bolt acks."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("s")
    start(b.create_topology(), **T(1), **{"topology.acker.executors": 0})
    feed(r, "s", 5)
    assert wait_for(lambda: "emit:5" in events(r), 20)
    ev = events(r)
    assert ev.index("ack:5") < ev.index("emit:5")  # called before emit returned
    assert wait_for(lambda: r.llen("t:seen:hold") == 1, 20)
    time.sleep(2.2)  # > 2T: nothing to time out either
    assert outcomes(r) == ["ack:5"]


@pytest.mark.slow
def test_emit_without_msg_id_is_untracked(start, r):
    """No msg id: no ack or fail callback, whether a bolt fails it, acks it or lets it time out."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout(tracked=False))
    b.set_bolt("fail", Failer()).shuffle_grouping("s")
    b.set_bolt("rec", Record()).shuffle_grouping("s")
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("s")
    start(b.create_topology(), **T(1))
    feed(r, "s", 3)
    assert wait_for(lambda: r.llen("t:seen:rec") == 1 and r.llen("t:seen:hold") == 1, 20)
    time.sleep(2.5)
    assert outcomes(r) == []


def test_unanchored_emit_is_not_part_of_the_tree(start, r):
    """A bolt's unanchored emit: its downstream failure does not fail the spout tuple."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("a", Record(emit=True, anchored=False)).shuffle_grouping("s")
    b.set_bolt("fail", Failer()).shuffle_grouping("a")
    run = start(b.create_topology(), **T(30))
    feed(r, "s", 4)
    assert wait_for(lambda: outcomes(r) == ["ack:4"], 20), outcomes(r)
    assert wait_for(lambda: run.status().components["fail"].failed == 1, 10)  # it did fail downstream
    time.sleep(0.3)
    assert outcomes(r) == ["ack:4"]


@pytest.mark.spark_subset
def test_explicit_fail_reaches_spout_fast(start, r):
    """A bolt's fail() two levels down fails the spout tuple at once, not at the timeout."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("a", Record(emit=True)).shuffle_grouping("s")
    b.set_bolt("fail", Failer()).shuffle_grouping("a")
    start(b.create_topology(), **T(30))
    feed(r, "s", 6)
    assert wait_for(lambda: outcomes(r) == ["fail:6"], 10), outcomes(r)
    assert times(r, "fail")[6] - times(r, "emit")[6] < 1.0


def test_basic_bolt_auto_anchors_acks_and_fails_on_failed_exception(start, r):
    """BasicBolt: emits are anchored to the input (a downstream fail fails the spout tuple), the input
    is acked after execute, and FailedException fails it (the emit before the raise still goes out)."""
    b = TopologyBuilder()
    b.set_spout("s_ok", FeedSpout())
    b.set_spout("s_down", FeedSpout())
    b.set_spout("s_exc", FeedSpout())
    b.set_bolt("pass_ok", BasicPass()).shuffle_grouping("s_ok")
    b.set_bolt("sink", Record()).shuffle_grouping("pass_ok")
    b.set_bolt("pass_down", BasicPass()).shuffle_grouping("s_down")
    b.set_bolt("fail", Failer()).shuffle_grouping("pass_down")
    b.set_bolt("raise", BasicFailer()).shuffle_grouping("s_exc")
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("raise")
    start(b.create_topology(), **T(30))
    feed(r, "s_ok", 1)
    feed(r, "s_down", 2)
    feed(r, "s_exc", 3)
    assert wait_for(lambda: len(outcomes(r)) == 3, 10), outcomes(r)
    assert sorted(outcomes(r)) == ["ack:1", "fail:2", "fail:3"]
    assert wait_for(lambda: r.llen("t:seen:hold") == 1, 5)
    assert r.lindex("t:seen:hold", 0).startswith("3@")
    assert r.lrange("t:seen:sink", 0, -1)[0].startswith("1@")


def test_basic_bolt_explicit_ack_is_harmless(start, r):
    """The runtime acks a BasicBolt's input; an explicit ack on top must not cancel the XOR."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("basic", BasicSelfAck()).shuffle_grouping("s")
    b.set_bolt("sink", Record()).shuffle_grouping("basic")
    start(b.create_topology(), **T(30))
    feed(r, "s", 4)
    assert wait_for(lambda: outcomes(r) == ["ack:4"], 10), outcomes(r)


def test_max_spout_pending_stops_calling_next_tuple(start, r):
    """topology.max.spout.pending = 3 with 2 spout tasks and tuples never acked: each task's
    next_tuple runs (and emits) exactly 3 times, then is no longer called."""
    b = TopologyBuilder()
    b.set_spout("s", EndlessSpout(), 2)
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("s")
    run = start(b.create_topology(), **T(30), **{"topology.max.spout.pending": 3})
    spout_tasks = sorted(c["task"] for c in contexts(r) if c["component"] == "s")

    def calls():
        return [int(r.get(f"t:calls:{t}") or 0) for t in spout_tasks]

    assert wait_for(lambda: sum(calls()) >= 6, 20)
    time.sleep(1.0)
    assert calls() == [3, 3]
    assert wait_for(lambda: r.llen("t:seen:hold") == 6, 5)
    assert wait_for(lambda: run.status().components["s"].emitted == 6, 5)
    time.sleep(0.5)
    assert calls() == [3, 3]


def test_max_spout_pending_has_no_effect_without_ackers(start, r):
    """As Storm: with topology.acker.executors = 0 every emit is acked at once, so max.spout.pending
    never holds the spout back."""
    b = TopologyBuilder()
    b.set_spout("s", EndlessSpout())
    b.set_bolt("hold", Record(ack=False)).shuffle_grouping("s")
    start(b.create_topology(), **{"topology.max.spout.pending": 3, "topology.acker.executors": 0})
    (task,) = [c["task"] for c in contexts(r) if c["component"] == "s"]
    assert wait_for(lambda: int(r.get(f"t:calls:{task}") or 0) > 50, 20)


@pytest.mark.spark_subset
@pytest.mark.local_cluster
def test_multiple_ackers_complete_a_bounded_run(redis_url, r, cluster_factory):
    """topology.acker.executors = 3 on 2 workers: trees spread over the three ackers all complete."""
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout(replay=True), 2)
    b.set_bolt("a", Record(emit=True), 3).shuffle_grouping("s")
    b.set_bolt("b", Record(), 2).fields_grouping("a", ["n"])
    feed(r, "s", *range(200), -1, -1)
    with cluster_factory(2) as cluster:
        status = cluster.run("acks3", b.create_topology(),
                             conf_for(redis_url, **{"topology.acker.executors": 3}), timeout=60)
    assert status.state == "completed"
    assert sorted(ids_of(r, "ack")) == list(range(200))
    assert ids_of(r, "fail") == []
    acker = status.system_components["__acker"]
    assert acker.tasks == 3 and "__acker" not in status.components
    assert status.components["s"].acked == 200 and status.components["b"].executed == 200
