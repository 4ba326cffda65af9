"""Windowed bolts behind parallel upstream tasks and at the end of bounded runs, on real worker
processes: every tuple that enters a window is evaluated in one, sent to the late tuple stream,
or counted as dropped; watermarks are per upstream task, so a fast task cannot make its slower
sibling's tuples late; a bounded run's last windows are evaluated (event time: the watermark
moves past every tuple), a count window's partial tail is acked and counted, and the run
completes without waiting for a message timeout, in exactly-once mode too."""

from __future__ import annotations

import json
import time

import pytest
import redis
from windowing_components import (
    ClickParse,
    ClickWindowCount,
    CountSum,
    EventSpout,
    LateRecorder,
    PassThrough,
    Sink,
    StatefulWindowRecorder,
    WindowRecorder,
)

from topology_runtime import TopologyBuilder
from topology_runtime.connectors import RedisStreamReplaySpout, RedisStreamSpout
from topology_runtime.control.reporter import summary
from topology_runtime.testing import wait_for
from topology_runtime.windowing import Count, Duration

pytestmark = pytest.mark.slow  # windows held to the pending cap (25 s), exactly-once ends: not in make test-fast

# A timeout the end of a run must never wait for: each run below ends long before it.
TIMEOUT = 60


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def conf(redis_url, **extra):
    return {"test.redis.url": redis_url, "redis.url": redis_url, "test.key": "we",
            "topology.message.timeout.secs": TIMEOUT, **extra}


def records(r, what="windows"):
    return [json.loads(x) for x in r.lrange(f"we:{what}", 0, -1)]


def test_a_slower_upstream_task_loses_nothing(redis_url, r, cluster_factory):
    """3,000 events 10 ms of event time apart through a pass-through bolt x2 whose task 0 is
    slower, into a 5 s event-time tumbling window with a late tuple stream: each window holds
    its 500 events, none is late, none dropped."""
    b = TopologyBuilder()
    b.set_spout("src", EventSpout(3000, 10, t0=10))  # ts 10 .. 30,000: windows (0, 5000], ...
    b.set_bolt("pass", PassThrough(delay=0.0005), 2).shuffle_grouping("src")
    win = (WindowRecorder().with_window(Duration(5)).with_timestamp_field("ts").with_lag(Duration(1))
           .with_late_tuple_stream("late"))
    b.set_bolt("win", win).global_grouping("pass")
    b.set_bolt("late", LateRecorder()).shuffle_grouping("win", "late")
    b.set_bolt("sink", Sink()).shuffle_grouping("win")
    t0 = time.monotonic()
    # A window acks its tuples as they leave it: the spout may have all of a window pending.
    status = cluster_factory(2).run("wslow", b.create_topology(), conf(redis_url, **{"topology.max.spout.pending": 5000}),
                                    timeout=TIMEOUT)
    took = time.monotonic() - t0
    ws = {w["end"]: w["all"] for w in records(r)}
    assert sorted(ws) == list(range(5000, 30_001, 5000))
    assert {end: len(ns) for end, ns in ws.items()} == dict.fromkeys(range(5000, 30_001, 5000), 500)
    assert sorted(n for ns in ws.values() for n in ns) == list(range(3000))
    assert r.llen("we:late") == 0
    st = status.components
    assert st["win"].late == 0 and st["win"].dropped == 0
    assert st["src"].acked == 3000 and st["src"].failed == 0
    assert took < TIMEOUT / 2, took  # ended by end of input, not by a message timeout


def test_clickstream_counts_every_event(redis_url, r, cluster_factory):
    """The user's shape: 3,000 clicks already in a Redis stream, a parse bolt x2 shuffle-grouped
    into a 10 s event-time tumbling window with 1 s lag; a bounded run counts all 3,000."""
    t0 = 1_700_000_000_000  # a multiple of 10 s
    pipe = r.pipeline(transaction=False)
    for i in range(3000):
        pipe.xadd("we:clicks", {"user": f"u{i % 37}", "page": f"/p{i % 11}", "ts": t0 + 10 * i + 10})
    pipe.execute()
    b = TopologyBuilder()
    b.set_spout("clicks", RedisStreamSpout("we:clicks", url=redis_url, fields=["user", "page", "ts"], bounded=True))
    b.set_bolt("parse", ClickParse(), 2).shuffle_grouping("clicks")
    b.set_bolt("count", ClickWindowCount().with_window(Duration(10)).with_timestamp_field("ts")
               .with_lag(Duration(1))).global_grouping("parse")
    status = cluster_factory(2).run("wclicks", b.create_topology(), conf(redis_url, **{"topology.max.spout.pending": 5000}),
                                    timeout=TIMEOUT)
    counts = records(r, "counts")
    assert [c["end"] - t0 for c in counts] == [10_000, 20_000, 30_000]
    assert [c["count"] for c in counts] == [1000, 1000, 1000]
    st = status.components
    assert st["count"].late == 0 and st["count"].dropped == 0 and st["clicks"].acked == 3000


def _one_window_topology(spout, bolt):
    b = TopologyBuilder()
    b.set_spout("src", spout)
    b.set_bolt("win", bolt).global_grouping("src")
    b.set_bolt("sink", Sink()).shuffle_grouping("win")
    return b.create_topology()


def test_count_window_tail_is_acked_and_counted_at_the_end(redis_url, r, cluster_factory):
    """Tumbling Count(5) over 23 tuples: four windows, the last three tuples acked without
    evaluation, counted as dropped and warned about; the run completes at once."""
    t0 = time.monotonic()
    status = cluster_factory(2).run("wtail", _one_window_topology(EventSpout(23, 1), WindowRecorder().with_window(Count(5))),
                                    conf(redis_url), timeout=TIMEOUT)
    assert time.monotonic() - t0 < TIMEOUT / 2
    assert [w["all"] for w in records(r)] == [list(range(i, i + 5)) for i in range(0, 20, 5)]
    st = status.components
    assert st["src"].acked == 23 and st["src"].failed == 0 and st["src"].timed_out == 0
    assert st["win"].dropped == 3 and st["win"].late == 0
    text = summary(status)
    assert "warning: win dropped 3 tuple(s)" in text, text
    assert "dropped" in status.table()


def test_duration_window_is_evaluated_at_the_end(redis_url, r, cluster_factory):
    """A 20 s processing-time window over tuples emitted in well under a second: the run does
    not wait 20 s for the window, nor the message timeout; end of input evaluates it once."""
    t0 = time.monotonic()
    status = cluster_factory(2).run("wdurend", _one_window_topology(EventSpout(40, 1), WindowRecorder().with_window(Duration(20))),
                                    conf(redis_url, **{"topology.message.timeout.secs": 45}), timeout=TIMEOUT)
    assert time.monotonic() - t0 < 15
    ws = records(r)
    assert sorted(n for w in ws for n in w["all"]) == list(range(40))
    st = status.components
    assert st["src"].acked == 40 and st["src"].failed == 0 and st["win"].dropped == 0


def test_event_time_newest_windows_and_a_window_chain(redis_url, r, cluster_factory):
    """Event time: the windows after the last watermark are evaluated at the end, and a window
    downstream of a window gets the upstream one's last results before its own end of input
    (they are not late)."""
    b = TopologyBuilder()
    b.set_spout("src", EventSpout(50, 100, t0=100))  # ts 100 .. 5,000: five 1 s windows
    b.set_bolt("pass", PassThrough(delay=0.001), 2).shuffle_grouping("src")
    b.set_bolt("count", ClickWindowCount().with_window(Duration(1)).with_timestamp_field("ts"), 2
               ).fields_grouping("pass", ["n"])
    b.set_bolt("sum", CountSum().with_window(Duration(10)).with_timestamp_field("end")
               .with_late_tuple_stream("late")).global_grouping("count")
    b.set_bolt("late", LateRecorder()).shuffle_grouping("sum", "late")
    status = cluster_factory(2).run("wchain", b.create_topology(), conf(redis_url), timeout=TIMEOUT)
    counts = records(r, "counts")
    by_end: dict[int, int] = {}
    for c in counts:
        by_end[c["end"]] = by_end.get(c["end"], 0) + c["count"]
    assert by_end == dict.fromkeys(range(1000, 5001, 1000), 10)
    assert [s["sum"] for s in records(r, "sums")] == [50]
    st = status.components
    assert st["sum"].late == 0 and r.llen("we:late") == 0
    assert st["src"].acked == 50 and st["src"].failed == 0


@pytest.mark.slow
@pytest.mark.parametrize("window", ["count", "duration", "event"])
def test_stateful_windows_end_in_exactly_once_mode(window, redis_url, r, cluster_factory):
    """StatefulWindowedBolt, exactly-once, over a bounded replayable stream: each window kind's
    last windows are evaluated (a count window's tail dropped and counted), every entry is in
    exactly one evaluated window (or counted), and the run completes."""
    stream = f"we:events:{window}"
    pipe = r.pipeline(transaction=False)
    for i in range(103):
        pipe.xadd(stream, {"n": i, "ts": 1000 + 10 * i})
    pipe.execute()
    bolt = StatefulWindowRecorder()
    if window == "count":
        bolt = bolt.with_window(Count(10))
    elif window == "duration":
        bolt = bolt.with_window(Duration(20))
    else:
        bolt = bolt.with_window(Duration(0.25)).with_timestamp_field("ts")
    b = TopologyBuilder()
    b.set_spout("src", RedisStreamReplaySpout(stream, fields=["n", "ts"], batch_size=20, bounded=True))
    b.set_bolt("win", bolt).global_grouping("src")
    b.set_bolt("sink", Sink()).shuffle_grouping("win")
    c = conf(redis_url, **{"topology.state.provider": "redis", "topology.state.exactly.once": True,
                           "topology.state.checkpoint.interval.ms": 200})
    t0 = time.monotonic()
    status = cluster_factory(2).run(f"weo{window}", b.create_topology(), c, timeout=TIMEOUT)
    assert time.monotonic() - t0 < TIMEOUT / 2
    ws = records(r)
    seen = sorted(n for w in ws for n in w["all"])
    dropped = status.components["win"].dropped
    if window == "count":
        assert seen == list(range(100)) and dropped == 3
    else:
        assert seen == list(range(103)) and dropped == 0
    if window == "event":
        assert [w["end"] for w in ws] == list(range(1000, 2251, 250))  # ts 1000 .. 2020


def test_spouts_capped_by_pending_tuples_held_in_windows_are_reported(redis_url, r, cluster_factory):
    """A 5 s event-time window over a backlog with the default topology.max.spout.pending
    (1000): the window holds every pending tuple, nothing can move. The run says why, naming
    the spout, the window and the setting, instead of hanging silently."""
    b = TopologyBuilder()
    b.set_spout("src", EventSpout(3000, 10, t0=10))
    # 1,000 pending tuples reach ts 10,000; with 1 s lag the watermark stops at 9,000: the window
    # (0, 5000] is evaluated, but its tuples leave only when (5000, 10000] is.
    b.set_bolt("win", WindowRecorder().with_window(Duration(5)).with_timestamp_field("ts").with_lag(Duration(1))
               ).global_grouping("src")
    run = cluster_factory(1).submit("wstall", b.create_topology(), conf(redis_url))
    try:
        assert wait_for(lambda: any("max.spout.pending" in (e.get("error") or "") for e in run.status().errors), 30), \
            run.status()
        err = next(e["error"] for e in run.status().errors if "max.spout.pending" in (e.get("error") or ""))
        assert "src (1000 pending)" in err and "win (" in err, err
    finally:
        run.kill()
