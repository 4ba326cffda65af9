"""Transactional topologies under faults, on real workers and Redis: an emitter failing a batch,
an unreadable opaque partition, SIGKILLed workers during processing and during the commit phase,
with the partitioned (identical replay) and opaque Redis Streams spouts. Counts must be exact."""

from __future__ import annotations

import json
import os
import random
import signal

import pytest
import redis

from examples.redis_streams_count import UpdateOpaqueWordCounts, counting_topology, fill
from examples.transactional_count import UpdateWordCounts
from state.serializer import loads
from state.transactional import current_txid
from topology_runtime import FailedException, LocalCluster
from topology_runtime.testing import maybe_crash, wait_for
from topology_runtime.transactional import (
    MemoryTransactionalSpout,
    RedisStreamsOpaqueTransactionalSpout,
    RedisStreamsTransactionalSpout,
)

STREAMS = [f"words:{p}" for p in range(3)]
CONF = {"topology.max.spout.pending": 3, "topology.message.timeout.secs": 2}


def _counts(client: redis.Redis, key: str = "word-counts") -> dict:
    """Every word in the hash with its count (TransactionalValue value or OpaqueValue curr)."""
    out = {}
    for f, raw in client.hgetall(key).items():
        v = loads(raw)
        n = v[1]  # [txid, value] or [curr_txid, curr, prev]
        if n:
            out[loads(f)] = n
    return out


def _committed(client: redis.Redis, name: str) -> int:
    return (current_txid(client, name) or 1) - 1


def _tx_keys(client: redis.Redis, name: str) -> list[str]:
    return sorted(k.decode() for k in client.keys(f"topology:{{{name}:ctl}}:tx:*"))


# --- spouts with injected faults (forked into the workers; their Redis counters are the record) --

class FailFirstAttempt(MemoryTransactionalSpout):
    """Partitioned: partition 0 of txid ``fail_txid`` emits its rows, then raises, on the first
    attempt only; every attempt of that txid is recorded."""

    def __init__(self, data, fields, take, fail_txid: int) -> None:
        super().__init__(data, fields, take)
        self.fail_txid = fail_txid

    def open(self, conf):
        self.r = redis.Redis.from_url(conf["redis.url"])

    def _check(self, tx, partition):
        if tx.txid == self.fail_txid and partition == 0:
            self.r.sadd("faults:attempts", tx.attempt_id)
            if self.r.set("faults:failed", 1, nx=True):
                raise FailedException(f"injected: batch {tx} fails once")

    def emit_partition_batch_new(self, tx, emit, partition, last_meta):
        meta = super().emit_partition_batch_new(tx, emit, partition, last_meta)
        self._check(tx, partition)
        return meta

    def emit_partition_batch(self, tx, emit, partition, meta):
        super().emit_partition_batch(tx, emit, partition, meta)
        self._check(tx, partition)


class FlakyOpaqueStreams(RedisStreamsOpaqueTransactionalSpout):
    """Opaque: partition 1 is unreadable for the first reads counted down in ``faults:down``;
    partition 0 of txid ``fail_txid`` fails its first attempt after emitting; with ``jitter``
    every read takes a random number of entries, so a replay almost never equals the original."""

    def __init__(self, *a, fail_txid: int | None = None, jitter: bool = False, **kw) -> None:
        super().__init__(*a, **kw)
        self.fail_txid, self.jitter = fail_txid, jitter

    def open(self, conf):
        super().open(conf)
        self.rng = random.Random()

    def _read(self, partition, after_id, count):
        if partition == 1 and int(self.redis.decr("faults:down")) >= 0:
            self.redis.incr("faults:down-hits")
            raise redis.ConnectionError("injected: partition 1 is unreachable")
        return super()._read(partition, after_id, self.rng.randint(1, count) if self.jitter else count)

    def emit_partition_batch(self, tx, emit, partition, last_meta):
        meta = super().emit_partition_batch(tx, emit, partition, last_meta)
        if tx.txid == self.fail_txid and partition == 0:
            self.redis.sadd("faults:attempts", tx.attempt_id)
            if self.redis.set("faults:failed", 1, nx=True):
                raise FailedException(f"injected: batch {tx} fails once")
        return meta


class CrashingOpaqueCounts(UpdateOpaqueWordCounts):
    """Committer that can die (TOPOLOGY_FAULT=tx-committer:<txid>) right after writing its counts,
    before the commit is acked."""

    def finish_batch(self):
        super().finish_batch()
        maybe_crash("tx-committer", self.id.txid)


class CrashingWordCounts(UpdateWordCounts):
    """The same for TransactionalValue counts."""

    def finish_batch(self):
        super().finish_batch()
        maybe_crash("tx-committer", self.id.txid)


def _truth(data: dict) -> dict:
    truth: dict[str, int] = {}
    for rows in data.values():
        for (w,) in rows:
            truth[w] = truth.get(w, 0) + 1
    return truth


# --- a. an emitter fails a batch ------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_emitter_failing_a_batch_replays_it_and_counts_stay_exact(redis_url, seed):
    rng = random.Random(seed)
    words = ["apple", "banana", "cat", "dog", "egg"]
    data = {p: [[rng.choice(words)] for _ in range(60)] for p in range(3)}
    client = redis.Redis.from_url(redis_url)
    spout = FailFirstAttempt(data, ["word"], 10, fail_txid=rng.randint(2, 5))
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("txfail", counting_topology(spout, "txfail", opaque=False),
                             {"redis.url": redis_url, **CONF}, timeout=120)
    assert status.state == "completed", status.error
    assert client.exists("faults:failed")
    assert client.scard("faults:attempts") >= 2  # the failed batch was replayed with a new attempt
    assert _counts(client) == _truth(data)
    # The end is clean (the exhaustion check is re-read after every commit): 6 non-empty batches,
    # at most max.spout.pending - 1 empty ones started before the last metadata was known.
    assert 6 <= _committed(client, "txfail") <= 6 + 2
    assert not [k for k in _tx_keys(client, "txfail") if ":tx:meta:" in k and int(k.rsplit(":", 1)[1]) < 5]


# --- b. an opaque partition unreadable for a while -------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_opaque_streams_with_an_unreadable_partition_count_exactly(redis_url, seed):
    client = redis.Redis.from_url(redis_url)
    truth = fill(client, STREAMS, 150, seed=seed)
    down = 3 + seed  # partition 1 fails this many reads, across first attempts and replays
    client.set("faults:down", down)
    spout = FlakyOpaqueStreams(STREAMS, ["word"], max_entries=20, stop_when_drained=True, fail_txid=2)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("txflaky", counting_topology(spout, "txflaky", opaque=True),
                             {"redis.url": redis_url, **CONF}, timeout=120)
    assert status.state == "completed", status.error
    assert int(client.get("faults:down-hits")) == down  # the partition really was unreadable
    assert client.scard("faults:attempts") >= 2  # and batch 2 was replayed (reading partition 1 anew)
    assert _counts(client) == truth
    # 150 entries / 20 per batch = 8 batches per partition; partition 1 lags by its down reads.
    assert 8 <= _committed(client, "txflaky") <= 8 + down + 2
    keys = _tx_keys(client, "txflaky")
    assert not [k for k in keys if ":tx:ometa:" in k]  # per-attempt metadata is cleaned at commit
    last = {int(p): json.loads(v) for p, v in client.hgetall("topology:{txflaky:ctl}:tx:committed-meta").items()}
    assert sorted(last) == [0, 1, 2]
    for p, (_, _, meta) in last.items():  # each partition's committed metadata ends at its last entry
        assert meta[1] == client.xrevrange(STREAMS[p], count=1)[0][0].decode()


# --- c. SIGKILL of a worker during processing or during the commit phase -----------------------------

KILLS = [("processing", 0), ("processing", 1), ("processing", 2),
         ("tx-commit", 0), ("tx-committer", 1), ("tx-commit", 2)]


@pytest.mark.slow
@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
@pytest.mark.parametrize("phase,seed", KILLS, ids=[f"{p}-{s}" for p, s in KILLS])
def test_killed_worker_keeps_stream_counts_exact(redis_url, tmp_path, monkeypatch, opaque, phase, seed):
    """``processing``: SIGKILL a random worker once a few batches committed (batches are always in
    flight with max.spout.pending 3). ``tx-commit``: the coordinator's worker dies when a commit
    tuple tree completed (every committer wrote its counts) before anything of the commit is
    recorded. ``tx-committer``: a committer's worker dies right after writing its counts. The opaque
    spout reads a random number of entries per attempt, so replays differ from the original."""
    rng = random.Random(seed)
    client = redis.Redis.from_url(redis_url)
    truth = fill(client, STREAMS, 200, seed=seed)
    name = "txkill"
    if opaque:
        spout = FlakyOpaqueStreams(STREAMS, ["word"], max_entries=15, stop_when_drained=True, jitter=True)
        client.set("faults:down", 0)
        topo = counting_topology(spout, name, opaque=True, committer=CrashingOpaqueCounts())
    else:
        spout = RedisStreamsTransactionalSpout(STREAMS, ["word"], max_entries=15, stop_when_drained=True)
        topo = counting_topology(spout, name, opaque=False, committer=CrashingWordCounts())
    fired = tmp_path / "fired"
    if phase != "processing":
        monkeypatch.setenv("TOPOLOGY_FAULT", f"{phase}:{rng.randint(2, 6)}")
        monkeypatch.setenv("TOPOLOGY_FAULT_ONCE", str(fired))
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit(name, topo, {"redis.url": redis_url, **CONF})
        if phase == "processing":
            assert wait_for(lambda: _committed(client, name) >= rng.randint(2, 5), 60)
            os.kill(rng.choice(sorted(run.pids.values())), signal.SIGKILL)
        status = run.wait(120)
    assert status.state == "completed", status.error
    assert phase == "processing" or fired.exists()
    assert status.restarts == 1
    assert _counts(client) == truth


def test_restart_replays_recorded_batches_before_ending_a_drained_stream(redis_url):
    """The state a coordinator crash leaves when the emitters ran ahead to the end of a bounded
    stream: batches 1 and 2 recorded (per-txid metadata and ``last-meta`` at the stream's end),
    nothing committed. The restarted coordinator must replay both before it sees the stream
    drained: judging exhaustion by ``last-meta`` alone ended the run with both batches lost."""
    client = redis.Redis.from_url(redis_url)
    truth = fill(client, STREAMS, 30, seed=7)
    name = "txreplay"
    for txid, (lo, hi) in ((1, (0, 14)), (2, (15, 29))):
        meta = {}
        for p, s in enumerate(STREAMS):
            ids = [i.decode() for i, _ in client.xrange(s)]
            meta[str(p)] = json.dumps([ids[lo], ids[hi], hi - lo + 1])
        client.hset(f"topology:{{{name}:ctl}}:tx:meta:{txid}", mapping=meta)
        client.hset(f"topology:{{{name}:ctl}}:tx:last-meta", mapping=meta)
    spout = RedisStreamsTransactionalSpout(STREAMS, ["word"], max_entries=15, stop_when_drained=True)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run(name, counting_topology(spout, name, opaque=False),
                             {"redis.url": redis_url, **CONF}, timeout=60)
    assert status.state == "completed", status.error
    assert _counts(client) == truth
    assert _committed(client, name) == 2  # the two recorded batches, replayed as they were
    assert not [k for k in _tx_keys(client, name) if ":tx:meta:" in k]
