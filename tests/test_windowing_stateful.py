"""StatefulWindowedBolt on real workers in exactly-once mode: per-key counts of 100 ms event-time
tumbling windows over a Redis stream, written by a sink that keeps the first value of each
window and records any later emission of it with another value. A worker SIGKILLed mid-run,
then Redis SIGKILLed and restarted from its AOF: every window's count equals the truth, no window
is emitted twice with different values, and the bolts' own committed state (running totals)
is exact too."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest
import redis
from windowing_components import KeyedWindowCount, WindowResultSink

from state.connection import connect
from topology_runtime import LocalCluster, TopologyBuilder
from topology_runtime.connectors import RedisStreamReplaySpout
from topology_runtime.testing import wait_for
from topology_runtime.windowing import Duration

pytestmark = pytest.mark.slow

STREAM = "test:window-events"
T0 = 1_000_000  # ms; a multiple of the window length, so windows end on ..00
STEP = 2        # ms between events: 50 events per window
N = 4000
KEYS = 5
CONF = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
        "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
        "topology.max.spout.pending": 100, "test.key": "sw"}


def events():
    rng = random.Random(7)
    out = [(f"k{rng.randrange(KEYS)}", T0 + STEP * i) for i in range(N)]
    # Far-ahead events of every key move each task's watermark past the last real window.
    out += [(f"k{k}", T0 + STEP * N + 10_000) for k in range(KEYS)]
    return out


def truth():
    windows: dict[str, int] = {}
    totals: dict[str, int] = {}
    for key, ts in events()[:N]:
        end = -(-ts // 100) * 100
        windows[f"{end}:{key}"] = windows.get(f"{end}:{key}", 0) + 1
        totals[key] = totals.get(key, 0) + 1
    return windows, totals


def produce(url, stop):
    """Writes the events over ~3 s, riding out a Redis restart."""
    client = redis.Redis.from_url(url)
    todo = events()
    i = 0
    while i < len(todo) and not stop.is_set():
        try:
            pipe = client.pipeline(transaction=False)
            for key, ts in todo[i:i + 100]:
                pipe.xadd(STREAM, {"key": key, "ts": ts})
            pipe.execute()
            i += 100
            time.sleep(0.075)
        except redis.ConnectionError:
            time.sleep(0.2)  # Redis is down (the restart test): the same chunk again once it is back


def topology():
    b = TopologyBuilder()
    b.set_spout("events", RedisStreamReplaySpout(STREAM, fields=["key", "ts"], batch_size=50))
    win = (KeyedWindowCount().with_window(Duration(0.1)).with_timestamp_field("ts")
           .with_lag(Duration(0.01)).with_watermark_interval(Duration(0.05)))
    b.set_bolt("win", win, 2).fields_grouping("events", ["key"])
    b.set_bolt("sink", WindowResultSink()).shuffle_grouping("win")
    return b.create_topology()


def test_windows_exact_across_a_worker_sigkill_and_a_redis_restart(redis_url, redis_server):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    windows, totals = truth()
    name = "swin"
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(redis_url, stop), daemon=True)
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit(name, topology(), {"redis.url": redis_url, "test.redis.url": redis_url, **CONF})
        producer.start()
        try:
            assert wait_for(lambda: client.hlen("sw:result") >= 40, 60), run.status()
            win_worker = run.plan.task_worker[run.plan.component_tasks["win"][0]]
            os.kill(run.pids[win_worker], signal.SIGKILL)
            assert wait_for(lambda: run.status().restarts >= 1, 60), run.status()
            seen = client.hlen("sw:result")
            assert wait_for(lambda: client.hlen("sw:result") >= seen + 40, 60), run.status()
            redis_server.kill()  # SIGKILL: what the AOF fsynced survives (appendfsync always)
            time.sleep(1.0)
            redis_server.start()
            assert wait_for(lambda: client.hlen("sw:result") >= len(windows), 120), \
                (client.hlen("sw:result"), len(windows), run.status())
            # The bolts' own state (running totals) once a checkpoint covers the last window.
            assert wait_for(lambda: _totals(redis_url, name) == totals, 30), (_totals(redis_url, name), totals)
            status = run.status()
        finally:
            stop.set()
            producer.join(10)
            run.kill()
    assert status.restarts >= 2, status  # one per fault
    assert client.lrange("sw:conflicts", 0, -1) == []  # no window emitted with two values
    assert {k: int(v) for k, v in client.hgetall("sw:result").items()} == windows
    emits = {k: int(v) for k, v in client.hgetall("sw:emits").items()}
    print(f"{len(windows)} windows, {sum(emits.values()) - len(emits)} re-emitted (same values) "
          f"after {status.restarts} restart(s)")


def _totals(url, name):
    """The committed running totals of the two "win" tasks (the window's own keys left out; the
    totals, keyed by the grouping value, live in key groups)."""
    from state.keyed_state import component_state

    out: dict[str, int] = {}
    for k, v in component_state(connect(url), name, "win"):
        if not (isinstance(k, str) and k.startswith("__window")):
            out[k] = out.get(k, 0) + v
    return out
