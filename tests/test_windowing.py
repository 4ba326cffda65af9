"""Windowed bolts on real worker processes (LocalCluster; the sliding duration window on Spark
too): count and duration windows, event time with out-of-order and late tuples, acking as
tuples leave their windows, a failing evaluation, and the message-timeout check."""

from __future__ import annotations

import json

import pytest
import redis
from windowing_components import LateRecorder, ScriptSpout, Sink, WindowRecorder

from topology_runtime import TopologyBuilder, TopologyError
from topology_runtime.testing import wait_for
from topology_runtime.windowing import Count, Duration, WindowedBolt


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def conf(redis_url, **extra):
    return {"test.redis.url": redis_url, "test.key": "w", **extra}


def windows(r, key="w:windows"):
    return [json.loads(x) for x in r.lrange(key, 0, -1)]


def topology(spout, bolt, late: bool = False):
    b = TopologyBuilder()
    b.set_spout("src", spout)
    b.set_bolt("win", bolt).global_grouping("src")
    b.set_bolt("sink", Sink()).shuffle_grouping("win")
    if late:
        b.set_bolt("late", LateRecorder()).shuffle_grouping("win", "late")
    return b.create_topology()


@pytest.mark.slow
def test_sliding_count_window_acks_what_left_it(redis_url, r, cluster_factory):
    spout = ScriptSpout([(i, 0) for i in range(10)] + [("pause", 3.0)])
    run = cluster_factory(2).submit("wcount", topology(spout, WindowRecorder().with_window(Count(4), Count(2))),
                                    conf(redis_url))
    # While the spout pauses, 0..5 have left every window they were in (acked); 6..9 are still
    # in the last window (pending).
    assert wait_for(lambda: len(windows(r)) == 5 and run.status().components["src"].acked == 6, 30), \
        (windows(r), run.status())
    ws = windows(r)
    assert [w["all"] for w in ws] == [[0, 1], [0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9]]
    assert [w["new"] for w in ws] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert [w["expired"] for w in ws] == [[], [], [0, 1], [2, 3], [4, 5]]
    st = run.status().components
    assert st["src"].acked == 6 and st["src"].failed == 0 and st["sink"].acked == 5
    # End of input: the last window's tuples are acked (they were evaluated: none dropped), and
    # no further window is evaluated.
    status = run.wait(30)
    assert status.state == "completed" and len(windows(r)) == 5
    assert status.components["src"].acked == 10 and status.components["win"].dropped == 0


@pytest.mark.slow
@pytest.mark.spark_subset
def test_sliding_duration_window(redis_url, r, cluster_factory):
    n = 80
    spout = ScriptSpout([(i, None) for i in range(n)], every=0.02)  # ~1.6 s of tuples: >= 3 windows on a loaded machine
    bolt = WindowRecorder().with_window(Duration(0.4), Duration(0.2))
    status = cluster_factory(2).run("wdur", topology(spout, bolt), conf(redis_url, **{"topology.message.timeout.secs": 5}),
                                    timeout=120)
    assert status.state == "completed", status.error
    ws = windows(r)
    assert len(ws) >= 3
    for w in ws:
        assert w["end"] - w["start"] == 400
        # Every tuple of a window was emitted inside it (the window goes by arrival: allow the
        # transfer, which a loaded 2-core machine can stretch to a few hundred ms).
        assert all(w["start"] - 1000 <= ts <= w["end"] for ts in w["ts"]), w
    seen = [x for w in ws for x in w["all"]]
    assert set(seen) == set(range(n))
    # Length 0.4 s sliding 0.2 s: a tuple is in at most 3 windows (2 plus one when a trigger is late).
    assert max(seen.count(i) for i in range(n)) <= 3
    assert all(sum(w["new"].count(i) for w in ws) == 1 for i in range(n))  # new exactly once
    st = status.components
    assert st["src"].acked == n and st["src"].failed == 0


def test_event_time_out_of_order_and_late_tuples(redis_url, r, cluster_factory):
    # Storm's testEventTimeLag: length 20 ms, sliding 10 ms, lag 5 ms, on the tuples' own ts.
    items = [(1, 603), (2, 605), (3, 607), (4, 618), (5, 626), (6, 632), (7, 629), (8, 636),
             ("pause", 0.4), (9, 615), ("pause", 0.2), (10, 700)]
    bolt = (WindowRecorder().with_window(Duration(0.02), Duration(0.01)).with_timestamp_field("ts")
            .with_lag(Duration(0.005)).with_watermark_interval(Duration(0.05)).with_late_tuple_stream("late"))
    run = cluster_factory(2).submit("wevent", topology(ScriptSpout(items), bolt, late=True), conf(redis_url))
    assert wait_for(lambda: r.llen("w:late") == 1 and len(windows(r)) >= 5, 30), (windows(r), run.status())
    ws = {w["end"]: w["all"] for w in windows(r)}
    assert ws[610] == [1, 2, 3] and ws[620] == [1, 2, 3, 4]
    assert ws[630] == [4, 5, 7]  # 7 (ts 629) arrived after 6 (ts 632), within the lag: in its window
    assert ws[640] == [5, 7, 6, 8]  # (620, 640], in timestamp order: 6 (ts 632) waited for this one
    assert json.loads(r.lindex("w:late", 0)) == [9, 615]  # late: behind the watermark (631)
    assert all(9 not in w for w in ws.values())
    # The late tuple is acked at once, the others as they leave their windows; once the spout
    # has emitted everything, end of input evaluates the last window (10, ts 700) and the run
    # completes: nothing failed, nothing waited for a timeout.
    status = run.wait(30)
    assert status.state == "completed", status
    assert {w["end"]: w["all"] for w in windows(r)}[700] == [10]
    st = status.components
    assert st["src"].acked == 10 and st["src"].failed == 0
    assert st["win"].late == 1 and st["win"].dropped == 0  # it went to the late stream


def test_failing_evaluation_fails_its_tuples(redis_url, r, cluster_factory):
    n = 30
    spout = ScriptSpout([(i, None) for i in range(n)], every=0.01)
    bolt = WindowRecorder(fail_on=12).with_window(Duration(0.1))
    status = cluster_factory(2).run("wfail", topology(spout, bolt), conf(redis_url, **{"topology.message.timeout.secs": 5}),
                                    timeout=120)
    assert status.state == "completed", status.error
    failed = json.loads(r.lindex("w:failed", 0))["all"]
    assert 12 in failed
    st = status.components["src"]
    # The window's tuples were failed (once), replayed by the spout, and then acked.
    assert st.failed == len(failed) and st.replayed == len(failed) and st.acked == n
    assert sorted(x for w in windows(r) for x in w["all"]) == list(range(n))  # each counted once in the end


def test_message_timeout_must_exceed_window_length_plus_sliding(redis_url, cluster_factory):
    def build(timeout=None, length=Duration(2), sliding=Duration(1)):
        b = TopologyBuilder()
        b.set_spout("src", ScriptSpout([]))
        d = b.set_bolt("win", WindowRecorder().with_window(length, sliding)).global_grouping("src")
        if timeout is not None:
            d.add_configuration("topology.message.timeout.secs", timeout)
        return b.create_topology()

    with pytest.raises(TopologyError) as e:
        build(timeout=3)
    assert "'win'" in str(e.value) and "(3 s)" in str(e.value) and "2 + 1 = 3 s" in str(e.value)
    build(timeout=3.5)
    topo = build(length=Duration(20), sliding=Duration(15))  # fine with the default until submitted
    with pytest.raises(TopologyError, match=r"'win'.*\(30 s\).*20 \+ 15 = 35 s"):
        cluster_factory(1).submit("wtimeout", topo, conf(redis_url))
    # Storm's rules beside: a late tuple stream needs a timestamp field; with_window is required.
    b = TopologyBuilder()
    b.set_spout("src", ScriptSpout([]))
    b.set_bolt("a", WindowRecorder().with_window(Count(3)).with_late_tuple_stream("late")).global_grouping("src")
    b.set_bolt("b", WindowedBolt()).global_grouping("src")
    with pytest.raises(TopologyError, match=r"(?s)'a': a late tuple stream.*'b': a windowed bolt needs with_window"):
        b.create_topology()


def test_sliding_window_top_n_example(redis_url, r, cluster_factory):
    """examples/window_topn.py on event-time data: each window's ranking equals the truth."""
    import random as _random

    from examples.window_topn import pageview, top_n, topn_topology

    t0, step, n = 1_000_000, 4, 3000  # 12 s of event time
    rng = _random.Random(3)
    events = [(pageview(rng), t0 + step * i) for i in range(n)]
    pipe = r.pipeline(transaction=False)
    for page, ts in events:
        pipe.xadd("test:pageviews", {"page": page, "ts": ts})
    pipe.execute()
    topo = topn_topology("test:pageviews", top=3, length=2, sliding=1, lag=0.1)
    run = cluster_factory(2).submit("wtopn", topo, conf(redis_url, **{"redis.url": redis_url, "topn.prefix": "t",
                                                           "topology.max.spout.pending": 5000}))
    ends = list(range(t0 + 1000, t0 + 10_001, 1000))

    def truth(end):
        views: dict[str, int] = {}
        for page, ts in events:
            if end - 2000 < ts <= end:
                views[page] = views.get(page, 0) + 1
        return sorted(views.items(), key=lambda kv: (-kv[1], kv[0]))[:3]

    # Each task reports a window when its own watermark passes it: wait for the slower one.
    expected = {end: truth(end) for end in ends}
    assert wait_for(lambda: {end: top_n(r, end, 3, prefix="t") for end in ends} == expected, 60), \
        ({end: top_n(r, end, 3, prefix="t") for end in ends}, expected, run.status())
    run.kill()
