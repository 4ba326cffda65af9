"""End-to-end: the reliable word count over RedisStreamSpout survives SIGKILLs of every worker.

Real worker processes, a real Redis server; nothing is mocked.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis
from spark_topologies import slow_wordcount, wordcount

from examples.wordcount import COUNTS, STREAM, load_sentences
from topology_runtime import LocalCluster
from topology_runtime.testing import wait_for


def _unique_sentences(client: redis.Redis, n: int) -> dict[str, int]:
    truth: dict[str, int] = {}
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        words = [f"id{i}", "the", f"w{i % 50}", "tuple", f"w{(i * 7) % 50}"]
        pipe.xadd(STREAM, {"sentence": " ".join(words)})
        for w in words:
            truth[w] = truth.get(w, 0) + 1
    pipe.execute()
    return truth


def _counts(url: str) -> dict[str, int]:
    c = redis.Redis.from_url(url, decode_responses=True)
    return {k: int(v) for k, v in c.hgetall(COUNTS).items()}


def test_wordcount_exact_without_faults(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    sentences = load_sentences(client, 3000)
    truth: dict[str, int] = {}
    for s in sentences:
        for w in s.split():
            truth[w] = truth.get(w, 0) + 1
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("wc-exact", wordcount(), {"redis.url": redis_url}, timeout=120)
    assert status.state == "completed"
    assert status.components["sentences"].acked == 3000
    assert status.components["sentences"].failed == 0
    # No fault, no replay: at-least-once is exact here.
    assert _counts(redis_url) == truth
    assert client.xpending(STREAM, "topology")["pending"] == 0


@pytest.mark.slow
def test_sigkill_each_worker_in_turn_loses_nothing(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    n = 2000
    truth = _unique_sentences(client, n)
    conf = {"redis.url": redis_url, "topology.message.timeout.secs": 2, "topology.max.spout.pending": 200}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("wc-kill", slow_wordcount(), conf)
        assert wait_for(lambda: run.status().state == "running", 30)
        plan = run.plan
        spout_worker = plan.task_worker[plan.component_tasks["sentences"][0]]
        for victim in (spout_worker, 1 - spout_worker):  # the spout's worker too
            assert wait_for(lambda: run.status().components["split"].executed > 100, 30)
            restarts = run.status().restarts
            os.kill(run.pids[victim], signal.SIGKILL)
            assert wait_for(lambda n=restarts: run.status().restarts == n + 1, 30), "worker was not restarted"
            time.sleep(0.5)
        status = run.wait(timeout=180)
    assert status.state == "completed", status.error
    assert status.restarts == 2
    counts = _counts(redis_url)
    missing = {w: n for w, n in truth.items() if counts.get(w, 0) < n}
    assert not missing, f"{len(missing)} words under-counted, e.g. {list(missing.items())[:5]}"
    # Every sentence went through: each one's unique token was counted at least once.
    assert all(counts.get(f"id{i}", 0) >= 1 for i in range(n))
    assert client.xpending(STREAM, "topology")["pending"] == 0
