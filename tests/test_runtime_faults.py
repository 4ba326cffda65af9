"""Faults on real worker processes: a user exception in execute, a SIGKILLed worker, and
back-pressure between two workers flooding each other with tiny buffers."""

from __future__ import annotations

import collections
import os
import re
import signal

import pytest
import redis
from topologies import (
    BasicRaiseOnce,
    NumberSpout,
    PingPong,
    RaiseOnce,
    Record,
    conf_for,
    contexts,
    ids_of,
    pids,
)

from topology_runtime import TopologyBuilder
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow  # SIGKILLed workers, back-pressure floods: not in make test-fast


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def component_tasks(r) -> dict[str, list[int]]:
    out: dict[str, set] = collections.defaultdict(set)
    for c in contexts(r):
        out[c["component"]].add(c["task"])
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("bolt", [RaiseOnce, BasicRaiseOnce], ids=["Bolt", "BasicBolt"])
def test_exception_in_execute_fails_the_tuple_is_replayed_reported_and_logged(redis_url, r, cluster_factory, capfd,
                                                                             bolt):
    """A bolt (plain or basic) raising in execute: that tuple fails at once (no timeout: T = 30 s), the spout
    replays it, the second attempt succeeds; the worker goes on (no restart, no re-prepare); the error
    is in status.errors with component, task and traceback, and the worker logs it to stderr."""
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(20, events=True))
    b.set_bolt("flaky", bolt(), 2).shuffle_grouping("nums")
    with cluster_factory(2) as cluster:
        status = cluster.run("flaky", b.create_topology(),
                             conf_for(redis_url, **{"topology.message.timeout.secs": 30}), timeout=25)
    assert status.state == "completed"
    assert status.restarts == 0
    seen = [int(x.split("@")[0]) for x in r.lrange("t:seen:flaky", 0, -1)]
    assert sorted(seen) == list(range(20))  # each id once, on its replay
    assert sorted(ids_of(r, "fail")) == list(range(20)) and sorted(ids_of(r, "ack")) == list(range(20))
    nums = status.components["nums"]
    assert (nums.failed, nums.replayed, nums.acked) == (20, 20, 20)
    flaky_tasks = component_tasks(r)["flaky"]
    assert len([c for c in contexts(r) if c["component"] == "flaky"]) == 2  # prepared once per task

    assert status.errors, "no error reported in the run status"
    for err in status.errors:
        assert err["component"] == "flaky" and err["task"] in flaky_tasks, err
        assert "ZeroDivisionError" in err["error"] and "planted bug" in err["error"]
        assert "Traceback (most recent call last)" in err["traceback"] and "ZeroDivisionError" in err["traceback"]
    log = capfd.readouterr().err
    for task in {e["task"] for e in status.errors}:
        line = re.search(rf"^.*\bflaky\b.*(task\W*{task}\b|flaky\[{task}\]).*ZeroDivisionError: planted bug.*$",
                         log, re.M)
        assert line, f"no log line naming component 'flaky', task {task} and the error:\n{log[-3000:]}"
        assert "Traceback (most recent call last)" in log[line.end():]


def test_sigkilled_worker_is_restarted_and_its_tuples_replayed(redis_url, r, cluster_factory):
    """SIGKILL the worker that does not host the spout: it is restarted (restarts == 1), the tuples
    it held time out (T = 2 s) and are replayed, and every msg id ends acked."""
    n = 2000
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(n, events=True))
    b.set_bolt("slow", Record(delay=0.0005), 4).shuffle_grouping("nums")
    conf = conf_for(redis_url, **{"topology.message.timeout.secs": 2, "topology.max.spout.pending": 100})
    with cluster_factory(2) as cluster:
        run = cluster.submit("killme", b.create_topology(), conf)
        assert wait_for(lambda: r.llen("t:seen:slow") > 200, 60)
        spout_pid = pids(r)[component_tasks(r)["nums"][0]]
        workers = run.pids
        assert len(workers) == 2 and spout_pid in workers.values()
        victim = next(i for i, p in workers.items() if p != spout_pid)
        os.kill(workers[victim], signal.SIGKILL)
        assert wait_for(lambda: run.status().restarts == 1, 20)
        assert wait_for(lambda: run.pids.get(victim) not in (None, workers[victim]), 20)  # a new process
        status = run.wait(90)
    assert status.state == "completed"
    assert status.restarts == 1
    acked, failed = ids_of(r, "ack"), ids_of(r, "fail")
    assert sorted(acked) == list(range(n))  # every msg id acked, once
    assert failed, "nothing timed out: the killed worker held no tuple?"
    assert status.components["nums"].replayed == len(failed) and status.components["nums"].acked == n
    seen = {int(x.split("@")[0]) for x in r.lrange("t:seen:slow", 0, -1)}
    assert seen == set(range(n))


def test_backpressure_two_workers_flooding_each_other(redis_url, r, cluster_factory):
    """Bolt "a" on one worker and "b" on the other send each other 3 tuples per input, seeded by a
    spout task on each worker, with tiny buffers: the run completes (no deadlock) and every tuple
    emitted was executed (exact counts: nothing dropped)."""
    per_task, fanout, hops = 100, 3, 3
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(2 * per_task, tracked=False), 2)
    b.set_bolt("a", PingPong(fanout, hops)).shuffle_grouping("nums").shuffle_grouping("b")
    b.set_bolt("b", PingPong(fanout, hops)).shuffle_grouping("nums").shuffle_grouping("a")
    conf = conf_for(redis_url, **{"topology.transfer.buffer.size": 2, "topology.transfer.batch.size": 16,
                                  "topology.executor.receive.buffer.size": 4})
    with cluster_factory(2) as cluster:
        status = cluster.run("flood", b.create_topology(), conf, timeout=90)
    assert status.state == "completed"
    tasks, pid = component_tasks(r), pids(r)
    (a,), (bb,) = tasks["a"], tasks["b"]
    # Layout precondition: a spout task on each worker, "a" and "b" on different workers.
    assert len({pid[t] for t in tasks["nums"]}) == 2
    assert pid[a] != pid[bb]
    executed = {int(k): int(v) for k, v in r.hgetall("t:executed").items()}
    emitted = {int(k): int(v) for k, v in r.hgetall("t:emitted").items()}
    seeds = 2 * per_task * 2  # every spout tuple goes to both "a" and "b"
    per_seed = sum(fanout ** h for h in range(hops + 1))  # 1 + 3 + 9 + 27 executions
    assert executed[a] + executed[bb] == seeds + emitted[a] + emitted[bb]  # nothing dropped
    assert executed[a] + executed[bb] == seeds * per_seed
    assert status.components["a"].executed == executed[a] and status.components["b"].executed == executed[bb]
    assert status.components["nums"].emitted == 2 * per_task
