"""Exactly-once state (topology.state.exactly.once): in-band barriers from replayable spouts,
aligned bolts, positions committed with the state, any failure rolls every task back. Counts
must equal the truth, whatever is killed."""

from __future__ import annotations

import os
import signal

import pytest
import redis
from spark_topologies import exactly_once_failing_wordcount, exactly_once_wordcount, wordcount

from examples.stateful_wordcount import counts_in_state
from examples.wordcount import load_sentences, true_counts
from topology_runtime import LocalCluster, TopologyError
from topology_runtime.testing import wait_for

CONF = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
        "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
        "topology.max.spout.pending": 100}  # short queues: barriers do not wait behind a backlog


def _run(redis_url, name, n, kill=None, env=None, monkeypatch=None, tmp_path=None, conf=None, kill_after=200):
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), n))
    if env:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit(name, exactly_once_wordcount(), {"redis.url": redis_url, **CONF, **(conf or {})})
        if kill is not None:
            assert wait_for(lambda: run.status().components["split"].executed > kill_after, 60)
            os.kill(run.pids[kill], signal.SIGKILL)
        status = run.wait(240)
    assert status.state == "completed", status.error
    counts = counts_in_state(redis_url, name, "count")
    return status, counts, truth


def test_exactly_once_without_faults(redis_url):
    status, counts, truth = _run(redis_url, "eo-plain", 1000)
    assert counts == truth
    # The barriers every bolt forwards and acks are the system's, not the bolts' own figures.
    words = sum(truth.values())
    split, count = status.components["split"], status.components["count"]
    assert (split.executed, split.emitted, split.acked) == (1000, words, 1000), split
    assert (count.executed, count.emitted, count.acked) == (words, words, words), count
    assert redis.Redis.from_url(redis_url).keys("topology:{eo-plain:*}:prepare") == []
    # Barriers prove the data complete: the ackers track the barrier trees and no data tuple
    # (per-tuple tracking would be an init per sentence and an ack per tuple, thousands here).
    # The spouts' sentences are acked once the checkpoint after them commits.
    acker = status.system_components["__acker"]
    assert 0 < acker.executed < 400, acker
    assert status.components["sentences"].acked == 1000


@pytest.mark.slow
@pytest.mark.parametrize("victim", [0, 1])
def test_exactly_once_survives_a_killed_worker(redis_url, victim):
    # Killed half-way, with figures reported every 0.1 s: a worker's unreported figures (at most
    # one interval's) die with it, while its tasks' earlier figures must carry over.
    status, counts, truth = _run(redis_url, f"eo-kill{victim}", 1500, kill=victim, kill_after=750,
                                 conf={"topology.stats.interval.secs": 0.1})
    assert status.restarts >= 1
    assert counts == truth  # == , not >=: nothing counted twice
    # The figures are the run's, across incarnations: had the restarted worker's tasks started
    # again from zero, about a quarter of the words' executes would be missing.
    split, count = status.components["split"], status.components["count"]
    words = sum(truth.values())
    assert split.executed >= 0.9 * 1500 and count.executed >= 0.9 * words, (split, count)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["prepare", "between", "commit"])
def test_exactly_once_fault_at_each_phase(redis_url, point, monkeypatch, tmp_path):
    marker = tmp_path / "fired"
    status, counts, truth = _run(redis_url, f"eo-{point}", 1500, env={
        "TOPOLOGY_FAULT": f"{point}:3", "TOPOLOGY_FAULT_ONCE": str(marker)}, monkeypatch=monkeypatch)
    assert marker.exists(), "the fault never fired"
    assert status.restarts >= 1
    assert counts == truth


def test_a_failed_tuple_rolls_everything_back_instead_of_replaying_it(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = true_counts(load_sentences(client, 1000))
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("eo-fail", exactly_once_failing_wordcount(), {"redis.url": redis_url, **CONF})
        status = run.wait(120)
    assert status.state == "completed", status.error
    assert client.get("test:failed-once") == "1" and status.restarts >= 1
    assert counts_in_state(redis_url, "eo-fail", "count") == truth


def test_non_replayable_spout_is_rejected_at_submit(redis_url):
    with LocalCluster(workers=1) as cluster, pytest.raises(TopologyError, match="not ReplayableSpout"):
        cluster.submit("eo-bad", wordcount(), {"redis.url": redis_url, **CONF})
