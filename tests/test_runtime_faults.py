"""Faults on real worker processes: user exceptions, SIGKILLed workers, back-pressure."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import redis
from runtime_components import FlakyOnce, NumberSpout, PingPong, Record

from topology_runtime import LocalCluster, TopologyBuilder
from topology_runtime.local_cluster import wait_for


def test_exception_in_execute_fails_tuple_replays_and_is_logged(redis_url, capfd):
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(20))
    b.set_bolt("flaky", FlakyOnce(), 2).shuffle_grouping("nums")
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("flaky", b.create_topology(), {"test.redis.url": redis_url}, timeout=60)
    assert status.state == "completed"
    # Every id failed once (the planted bug), was replayed, and went through the second time.
    assert sorted(map(int, r.lrange("t:seen:flaky", 0, -1))) == list(range(20))
    assert status.components["nums"].failed == 20 and status.components["nums"].replayed == 20
    assert status.components["nums"].acked == 20
    err = status.errors[0]
    assert err["component"] == "flaky" and err["task"] in (2, 3)
    assert "ZeroDivisionError: planted bug" in err["error"] and "Traceback" in err["traceback"]
    log = capfd.readouterr().err
    assert "flaky task=" in log and "ZeroDivisionError: planted bug" in log and "Traceback (most recent" in log


def test_sigkilled_worker_is_restarted_and_its_tuples_replayed(redis_url):
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(3000))
    b.set_bolt("slow", Record(), 4).shuffle_grouping("nums")  # records before it acks
    conf = {"test.redis.url": redis_url, "topology.message.timeout.secs": 1, "topology.max.spout.pending": 50}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("killme", b.create_topology(), conf)
        assert wait_for(lambda: run.status().components["slow"].executed > 200, 30)
        spout_worker = run.plan.task_worker[run.plan.component_tasks["nums"][0]]
        victim = 1 - spout_worker  # its in-flight tuples time out and the in-memory spout replays
        os.kill(run.pids[victim], signal.SIGKILL)
        status = run.wait(90)
    assert status.state == "completed"
    assert status.restarts == 1
    assert status.components["nums"].acked == 3000
    assert status.components["nums"].timed_out > 0  # what the dead worker held
    got = {int(x.split("@")[0]) for x in r.lrange("t:seen:slow", 0, -1)}
    assert got == set(range(3000))


def test_backpressure_two_workers_flooding_each_other(tmp_path, redis_url):
    """Two workers whose bolts send to each other at full speed with tiny buffers: no deadlock,
    nothing dropped (every tuple emitted is executed)."""
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(400, tracked=False), 2)
    b.set_bolt("a", PingPong(fanout=3), 2).shuffle_grouping("nums").shuffle_grouping("b")
    b.set_bolt("b", PingPong(fanout=3), 2).shuffle_grouping("a")
    conf = {"test.outdir": str(tmp_path), "test.redis.url": redis_url,
            "topology.transfer.buffer.size": 2, "topology.transfer.batch.size": 16,
            "topology.executor.receive.buffer.size": 4, "topology.acker.executors": 0}
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("flood", b.create_topology(), conf, timeout=120)
    assert status.state == "completed"
    executed = {p.name: int(p.read_text()) for p in Path(tmp_path).iterdir()}
    a = sum(v for k, v in executed.items() if k.startswith("a-"))
    bb = sum(v for k, v in executed.items() if k.startswith("b-"))
    # 400 seeds, each: a(3 hops) -> 3 b(2) -> 9 a(1) -> 27 b(0): a gets 400 + 9*400, b 3*400 + 27*400.
    assert a == 400 * (1 + 9) and bb == 400 * (3 + 27)
    assert status.components["a"].executed == a and status.components["b"].executed == bb
