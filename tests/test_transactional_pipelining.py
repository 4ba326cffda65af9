"""Pipelining a transactional topology past a slow committer (Design 3): the committer's
finish_batch runs off the worker's event loop, so later batches keep processing on the same
worker while a commit is in progress; commits stay strictly in txid order; a commit that raises
fails and replays its batch; a worker SIGKILLed in a slow commit still ends with exact counts.

Orderings are read from one Redis list that every component appends to (RPUSH is atomic and
ordered), not from timing thresholds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest
import redis

from examples.transactional_count import KeyedCount, UpdateWordCounts
from state.values import ValueMap
from topology_runtime import FailedException, LocalCluster
from topology_runtime.testing import wait_for
from topology_runtime.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder

pytestmark = pytest.mark.slow  # workers SIGKILLed mid-commit: not in make test-fast


def _ev(client: redis.Redis, key: str, *values) -> None:
    client.rpush(key, json.dumps(values))


class RecordingCount(KeyedCount):
    """KeyedCount that records when it finished processing a batch (on the event loop)."""

    def prepare(self, conf, context, batch_id):
        super().prepare(conf, context, batch_id)
        self.events = conf["test.events"]
        self.r = redis.Redis.from_url(conf["redis.url"])

    def finish_batch(self):
        super().finish_batch()
        _ev(self.r, self.events, "processed", self.id.txid)


class SlowCommitter(UpdateWordCounts):
    """A slow sink: sleeps around the write. ``test.fail`` maps a txid to how its first commit
    attempt fails: "raise-before" (nothing written), "fail-after" (written, then FailedException)."""

    def prepare(self, conf, context, batch_id):
        super().prepare(conf, context, batch_id)
        self.events = conf["test.events"]
        self.sleep = float(conf.get("test.commit.sleep", 0.05))
        self.fail = conf.get("test.fail", {})
        self.r = self.values.redis

    def finish_batch(self):
        txid = self.id.txid
        _ev(self.r, self.events, "commit-start", txid, os.getpid())
        time.sleep(self.sleep / 2)
        mode = self.fail.get(str(txid))
        first = bool(mode) and bool(self.r.set(f"{self.events}:failed:{txid}", 1, nx=True))
        if first and mode == "raise-before":
            _ev(self.r, self.events, "commit-raised", txid)
            raise RuntimeError(f"sink unavailable for txid {txid}")
        super().finish_batch()
        _ev(self.r, self.events, "commit-written", txid)
        time.sleep(self.sleep / 2)
        if first and mode == "fail-after":
            _ev(self.r, self.events, "commit-raised", txid)
            raise FailedException(f"ack lost for txid {txid}")
        _ev(self.r, self.events, "commit-end", txid)


def _data(rows: int, seed: int = 7) -> dict:
    rng = random.Random(seed)
    words = ["ant", "bee", "cow", "dog", "eel", "fox", "gnu"]
    return {p: [[rng.choice(words)] for _ in range(rows)] for p in range(3)}


def _truth(data: dict) -> dict:
    out: dict[str, int] = {}
    for rows in data.values():
        for (w,) in rows:
            out[w] = out.get(w, 0) + 1
    return out


def _topology(name: str, data: dict, take: int):
    b = TransactionalTopologyBuilder(name, "spout", MemoryTransactionalSpout(data, ["word"], take), 2)
    b.set_bolt("count", RecordingCount(), 2).fields_grouping("spout", ["word"])
    b.set_committer_bolt("update", SlowCommitter(), 1).fields_grouping("count", ["word"])
    return b.create_topology()


def _conf(redis_url: str, name: str, **extra) -> dict:
    return {"redis.url": redis_url, "count.key": f"wc:{name}", "test.events": f"events:{name}", **extra}


def _events(client: redis.Redis, name: str) -> list[list]:
    return [json.loads(x) for x in client.lrange(f"events:{name}", 0, -1)]


def _counts(client: redis.Redis, name: str, truth: dict) -> dict:
    return {w: v.value for w, v in ValueMap(client, f"wc:{name}").get(list(truth)).items() if v is not None}


def _assert_commits_in_order(events: list[list]) -> None:
    """Commit attempts never overlap, and successful commits go 1, 2, 3, ... exactly once each."""
    open_txid = None
    done: list[int] = []
    for e in events:
        if e[0] == "commit-start":
            assert open_txid is None, f"commit {e[1]} started while commit {open_txid} was running"
            open_txid = e[1]
        elif e[0] in ("commit-end", "commit-raised"):
            assert open_txid == e[1]
            open_txid = None
            if e[0] == "commit-end":
                done.append(e[1])
    assert done == list(range(1, len(done) + 1)), done


def test_slow_commit_does_not_block_later_batches_on_the_same_worker(redis_url):
    client = redis.Redis.from_url(redis_url)
    data = _data(60)  # 6 batches of 30
    truth = _truth(data)
    name = "txpipe"
    # One worker: the committer, the counting tasks and the emitters share one event loop.
    with LocalCluster(workers=1) as cluster:
        status = cluster.run(name, _topology(name, data, take=10),
                             _conf(redis_url, name, **{"topology.max.spout.pending": 3}), timeout=120)
    assert status.state == "completed", status.error
    events = _events(client, name)
    # While commit N ran, the same worker finished processing a later batch M > N. With the
    # commit on the event loop this cannot happen: nothing else runs during a finish_batch.
    overlapped = []
    running = None
    for e in events:
        if e[0] == "commit-start":
            running = e[1]
        elif e[0] in ("commit-end", "commit-raised"):
            running = None
        elif e[0] == "processed" and running is not None and e[1] > running:
            overlapped.append((running, e[1]))
    assert overlapped, events
    _assert_commits_in_order(events)
    assert [e[1] for e in events if e[0] == "commit-end"] == list(range(1, 7))
    assert _counts(client, name, truth) == truth


def test_a_commit_that_raises_off_the_loop_fails_and_replays_the_batch(redis_url):
    client = redis.Redis.from_url(redis_url)
    data = _data(60)
    truth = _truth(data)
    name = "txpipefail"
    conf = _conf(redis_url, name, **{"topology.max.spout.pending": 3,
                                     "test.fail": {"2": "raise-before", "4": "fail-after"}})
    with LocalCluster(workers=2) as cluster:
        status = cluster.run(name, _topology(name, data, take=10), conf, timeout=120)
    assert status.state == "completed", status.error
    events = _events(client, name)
    _assert_commits_in_order(events)
    raised = [e[1] for e in events if e[0] == "commit-raised"]
    assert raised == [2, 4]
    for txid in raised:  # the batch was replayed and committed after its failed attempt
        i = events.index(["commit-raised", txid])
        assert ["commit-end", txid] in events[i:]
    # txid 4 was written before it failed: the replay must not count it twice.
    assert _counts(client, name, truth) == truth
    assert any("sink unavailable for txid 2" in e["error"] for e in status.errors)


@pytest.mark.parametrize("when", ["commit-start", "commit-written"])
def test_worker_killed_during_a_slow_commit_still_counts_exactly(redis_url, when):
    client = redis.Redis.from_url(redis_url)
    data = _data(80)  # 8 batches
    truth = _truth(data)
    name = f"txpipekill-{when}"
    conf = _conf(redis_url, name, **{"topology.max.spout.pending": 3, "topology.message.timeout.secs": 2,
                                     "test.commit.sleep": 0.6})

    def in_commit():
        # Commit 3 is in progress (before or after its write) on the committer's worker.
        for e in _events(client, name):
            if e[0] == when and e[1] == 3:
                return True
        return False

    with LocalCluster(workers=2) as cluster:
        run = cluster.submit(name, _topology(name, data, take=10), conf)
        assert wait_for(in_commit, 60, interval=0.01)
        pid = next(e[2] for e in _events(client, name) if e[0] == "commit-start" and e[1] == 3)
        assert ["commit-end", 3] not in _events(client, name)  # killed mid-commit, not after it
        os.kill(pid, signal.SIGKILL)
        status = run.wait(120)
    assert status.state == "completed", status.error
    assert status.restarts == 1
    events = _events(client, name)
    assert [e[1] for e in events if e[0] == "commit-end"] == list(range(1, 9))
    assert _counts(client, name, truth) == truth
