"""Every worker killed at once, again and again (the chaos run's restart race): a restarted
worker must never be given a dead peer's address, so acks keep flowing and nothing is
dead-lettered or lost (at-least-once word count over RedisStreamSpout, message timeout 3 s)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis

from examples.wordcount import COUNTS, SplitSentence, WordCount, load_sentences, true_counts
from topology_runtime import LocalCluster, TopologyBuilder
from topology_runtime.connectors import RedisStreamSpout
from topology_runtime.launchers.local import LocalRun
from topology_runtime.testing import wait_for

STREAM = "race:sentences"
DEAD = "race:dead"


def _topology():
    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamSpout(STREAM, fields=["sentence"], bounded=True, batch_size=200,
                                              dead_letter=DEAD), 1)
    b.set_bolt("split", SplitSentence(), 2).local_or_shuffle_grouping("sentences")
    b.set_bolt("count", WordCount(COUNTS), 2).fields_grouping("split", ["word"]) \
        .add_configuration("topology.tick.tuple.freq.secs", 0.2)
    return b.create_topology()


@pytest.mark.slow
@pytest.mark.parametrize("pause", [0.0, 0.5], ids=["prompt", "supervisor-paused-after-fork"])
def test_killing_every_worker_at_once_repeatedly_loses_nothing(redis_url, monkeypatch, pause):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    # Enough input that the run outlasts the kills (a faster runtime ended it after one).
    truth = true_counts(load_sentences(client, 20000, stream=STREAM))
    if pause:
        start = LocalRun._start

        def slow_start(self, index, incarnation):  # the supervisor stalls right after each fork
            start(self, index, incarnation)
            if incarnation:
                time.sleep(pause)
        monkeypatch.setattr(LocalRun, "_start", slow_start)
    conf = {"redis.url": redis_url, "topology.message.timeout.secs": 3, "topology.max.spout.pending": 400,
            "topology.max.restarts": 20}
    kills = 0
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("race", _topology(), conf)
        stop = threading.Event()

        def chaos():
            nonlocal kills
            for _ in range(3):
                if stop.wait(1.0) or run.done:
                    return
                pids = run.pids
                if len(pids) < 2:
                    continue
                for pid in pids.values():  # both at once
                    os.kill(pid, signal.SIGKILL)
                kills += 1
                wait_for(lambda: len(run.pids) == 2 or run.done, timeout=10)
        t = threading.Thread(target=chaos)
        t.start()
        try:
            status = run.wait(timeout=150)
        finally:
            stop.set()
            t.join()
    assert kills >= 2, "the run ended before the workers could be killed twice"
    assert status.state == "completed", status.error
    assert client.xlen(DEAD) == 0, "records were dead-lettered"  # 0 for a missing key too
    counts = {k: int(v) for k, v in client.hgetall(COUNTS).items()}
    missing = {w: n for w, n in truth.items() if counts.get(w, 0) < n}
    assert not missing, f"words lost: {missing}"
