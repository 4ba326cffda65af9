"""Trident word counts stay exact under real faults, for every spout/state pairing that Storm's
table calls exactly-once (transactional spout with a transactional or an opaque map, opaque spout
with an opaque map): a worker SIGKILLed mid-run, Redis SIGKILLed and restarted from its AOF, and
an opaque spout whose replays differ from their first attempts. A non-transactional map under the
same replays over-counts, so a broken exactly-once would not go unnoticed. A replay after a
commit-phase failure that leaves out keys its first attempt wrote (where Storm's opaque map
over-counts) is exact too: the map sets those keys back."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter

import pytest
import redis

from state.transactional import current_txid
from topology_runtime import FailedException, LocalCluster
from topology_runtime.connectors import RedisStreamsOpaqueTransactionalSpout, RedisStreamsTransactionalSpout
from topology_runtime.testing import wait_for
from topology_runtime.transactional import OpaquePartitionedTransactionalSpout
from topology_runtime.trident import Count, Function, RedisMapState, TridentTopology

pytestmark = pytest.mark.slow

TXID = "tx-words"
STREAMS = [f"tri:sentences:{p}" for p in range(3)]
CLOSED = "tri:input-closed"  # set once every sentence was added: the gated spouts may drain then
VOCAB = ["apple", "banana", "cat", "dog", "egg", "fig", "grape", "ham", "ink", "jam", "kiwi", "lime"]
CONF = {"topology.max.spout.pending": 3, "topology.message.timeout.secs": 2}


class Split(Function):
    def execute(self, tup, collector):
        for w in tup["sentence"].split():
            collector.emit([w])


class GatedTransactionalStreams(RedisStreamsTransactionalSpout):
    """Identical replays; exhausted only once the test closed the input, so the run cannot end
    before its fault."""

    def exhausted(self, metas):
        return bool(self.redis.exists(CLOSED)) and super().exhausted(metas)


class GatedOpaqueStreams(RedisStreamsOpaqueTransactionalSpout):
    """Opaque: every attempt reads up to ``max_entries`` after the partition's previous batch, so
    a replay after the second half of the input came reads more than its first attempt; gated
    as above."""

    def exhausted(self, metas):
        return bool(self.redis.exists(CLOSED)) and super().exhausted(metas)


PAIRINGS = {
    "transactional-spout/transactional-map": (GatedTransactionalStreams, RedisMapState.transactional),
    "transactional-spout/opaque-map": (GatedTransactionalStreams, RedisMapState.opaque),
    "opaque-spout/opaque-map": (GatedOpaqueStreams, RedisMapState.opaque),
}


def add_sentences(client: redis.Redis, n_per_stream: int, rng: random.Random) -> Counter:
    """Appends random sentences to every stream; returns their word counts."""
    truth: Counter = Counter()
    for s in STREAMS:
        pipe = client.pipeline(transaction=False)
        for _ in range(n_per_stream):
            words = [rng.choice(VOCAB) for _ in range(rng.randint(3, 8))]
            truth.update(words)
            pipe.xadd(s, {"sentence": " ".join(words)})
        pipe.execute()
    return truth


def word_count(spout, factory):
    t = TridentTopology()
    (t.new_stream(TXID, spout).parallelism_hint(2)
      .each(["sentence"], Split(), ["word"])
      .group_by(["word"])
      .persistent_aggregate(factory, Count(), ["count"]).parallelism_hint(2))
    return t.build()


def counts(factory, url: str) -> dict:
    """Every word of the state's two partitions with its current count."""
    out = {}
    for i in range(2):
        state = factory.make_state({"redis.url": url}, i, 2)
        try:
            for word, n in state.get_tuples():
                assert word not in out, f"{word!r} in two partitions"
                out[word] = n
        finally:
            state.close()
    return out


def diff(got: dict, truth: dict) -> dict:
    """word -> (counted, true) where they differ."""
    return {w: (got.get(w), truth.get(w)) for w in sorted(set(got) | set(truth)) if got.get(w) != truth.get(w)}


def committed(client: redis.Redis) -> int:
    return (current_txid(client, TXID) or 1) - 1


def _run_with_fault(redis_url, name, pairing, fault, seed, monkeypatch=None, env=None, spout_cls=None):
    """Half the input, the fault once a few batches committed, the other half, then the input
    closes; the run must complete. ``env``: the workers' fault injection (set before they start)."""
    rng = random.Random(seed)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    client = redis.Redis.from_url(redis_url)
    default_spout, make_factory = PAIRINGS[pairing]
    spout_cls = spout_cls or default_spout
    factory = make_factory(key_prefix=name)
    truth = add_sentences(client, 1000, rng)
    topology = word_count(spout_cls(STREAMS, ["sentence"], max_entries=8, stop_when_drained=True), factory)
    started = time.monotonic()
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit(name, topology, {"redis.url": redis_url, **CONF})
        assert wait_for(lambda: committed(client) >= rng.randint(5, 30), 60), run.status()
        assert not run.status().done
        fault(run, rng)
        truth += add_sentences(client, 1000, rng)
        client.set(CLOSED, 1)
        status = run.wait(60)
    print(f"{name}: {time.monotonic() - started:.1f} s, {committed(client)} batches, restarts {status.restarts}")
    assert status.state == "completed", status.error
    return status, counts(factory, redis_url), dict(truth)


# --- a worker SIGKILLed mid-run ------------------------------------------------------------------

# Every pairing meets a kill at commit and a kill mid-run (of the coordinator's worker or the
# other one, alternating), and the opaque pairing all three: seven runs rather than nine keep
# the suite's time down.
KILLS = [(pairing, victim) for i, pairing in enumerate(PAIRINGS)
         for victim in ("at-commit", ("coordinator", "other")[i % 2])] + [("opaque-spout/opaque-map", "other")]


@pytest.mark.parametrize(("pairing", "victim"), KILLS)
def test_killed_worker_keeps_trident_counts_exact(redis_url, tmp_path, monkeypatch, pairing, victim):
    """SIGKILL of the batch coordinator's worker (the batches in flight are replayed) or of the
    other one (emitter, segment and state tasks lost mid-batch or mid-commit), at a random point
    of the run; ``at-commit``: the coordinator's worker dies once every state partition wrote a
    batch, before its commit is recorded, so the replay meets its own txid in the state."""
    fired = tmp_path / "fired"
    env = {"TOPOLOGY_FAULT": "tx-commit:8", "TOPOLOGY_FAULT_ONCE": str(fired)} if victim == "at-commit" else None

    def kill(run, rng):
        if victim == "at-commit":
            assert wait_for(fired.exists, 30), run.status()
        else:
            coordinator = run.plan.task_worker[run.plan.component_tasks[f"coord-{TXID}"][0]]
            os.kill(run.pids[coordinator if victim == "coordinator" else 1 - coordinator], signal.SIGKILL)
        assert wait_for(lambda: run.status().restarts >= 1, 30), run.status()

    status, got, truth = _run_with_fault(redis_url, f"tri-kill-{victim}", pairing, kill, seed=len(victim),
                                         monkeypatch=monkeypatch, env=env)
    assert status.restarts >= 1
    assert got == truth, diff(got, truth)  # == , not >=: nothing counted twice, nothing lost


# --- Redis SIGKILLed and restarted from its AOF mid-run ------------------------------------------

@pytest.mark.parametrize("pairing", list(PAIRINGS))
def test_redis_restarted_from_aof_keeps_trident_counts_exact(redis_server, redis_url, pairing, capfd):
    def restart_redis(run, rng):
        redis_server.kill()  # SIGKILL: only what the AOF fsynced survives (appendfsync always)
        time.sleep(1.0)
        redis_server.start()

    before = redis.Redis.from_url(redis_url).info("server")["run_id"]
    status, got, truth = _run_with_fault(redis_url, "tri-aof", pairing, restart_redis, seed=7)
    assert redis.Redis.from_url(redis_url).info("server")["run_id"] != before  # a new server, from the AOF
    # The outage hit the run: batches failed and were replayed, or the coordinator's commit record
    # failed and it read the current txid back before going on (it starts no batch meanwhile).
    workers_log = capfd.readouterr().err
    assert (status.components[f"coord-{TXID}"].failed >= 1 or "failed (attempt" in workers_log
            or "recording the commit of txid" in workers_log), workers_log[-3000:]
    assert got == truth, diff(got, truth)


# --- Redis unreachable from the coordinator alone ------------------------------------------------

class DrainCheckUnreachable(GatedTransactionalStreams):
    """The coordinator's "anything left?" check fails with a Redis error while the test's
    counter ``tri:check-down`` is positive."""

    def exhausted(self, metas):
        if int(self.redis.decr("tri:check-down")) >= 0:
            self.redis.incr("tri:check-down-hits")
            raise redis.ConnectionError("injected: Redis unreachable from the coordinator")
        return super().exhausted(metas)


def test_redis_error_in_the_coordinators_drain_check_does_not_stall_the_run(redis_url):
    """The check runs after every ack, where a commit was just decided: the error must cost at
    most a new batch, never that commit."""
    client = redis.Redis.from_url(redis_url)
    client.set("tri:check-down", -1_000_000)

    def unreachable(run, rng):
        client.set("tri:check-down", 30)
        assert wait_for(lambda: int(client.get("tri:check-down-hits") or 0) >= 30, 30), run.status()

    status, got, truth = _run_with_fault(redis_url, "tri-check", "transactional-spout/transactional-map",
                                         unreachable, seed=5, spout_cls=DrainCheckUnreachable)
    assert got == truth, diff(got, truth)


# --- an opaque spout whose replays differ from their first attempts --------------------------------

FIRST = "tri:first-attempt"  # "txid:partition" -> the attempt id that emitted it first
EMITS = "tri:emits"  # one JSON [txid, partition, attempt id, start, count] per emit, in order
FAULT_SENTENCES = ["apple fault banana", "cat fault dog"]


class ResizingReplays(OpaquePartitionedTransactionalSpout):
    """Opaque, in memory: the first attempt of a batch emits ``take`` sentences of each
    partition, every later attempt of the same txid ``replay_take`` (what a smaller replay leaves
    out goes into later batches; a larger one takes some of theirs). Attempt ids are random, so
    "first" is the attempt Redis saw first; every emit is recorded."""

    fields = ["sentence"]

    def __init__(self, data: list[list[list]], take: int, replay_take: int) -> None:
        self.data, self.take, self.replay_take = data, take, replay_take

    def open(self, conf):
        self.redis = redis.Redis.from_url(conf["redis.url"])

    def num_partitions(self):
        return len(self.data)

    @staticmethod
    def _next(meta) -> int:
        return 0 if meta is None else meta[0] + meta[1]

    def exhausted(self, metas):
        return all(self._next(metas.get(p)) >= len(rows) for p, rows in enumerate(self.data))

    def emit_partition_batch(self, tx, emit, partition, last_meta):
        key = f"{tx.txid}:{partition}"
        first = self.redis.hsetnx(FIRST, key, tx.attempt_id) or int(self.redis.hget(FIRST, key)) == tx.attempt_id
        start = self._next(last_meta)
        rows = self.data[partition][start:start + (self.take if first else self.replay_take)]
        self.redis.rpush(EMITS, json.dumps([tx.txid, partition, tx.attempt_id, start, len(rows)]))
        for r in rows:
            emit(r)
        return [start, len(rows)]


class SplitFailingOnce(Split):
    """Fails its batch (FailedException) the first time it sees each of ``FAULT_SENTENCES``."""

    def prepare(self, conf, context):
        self.redis = redis.Redis.from_url(conf["redis.url"])

    def execute(self, tup, collector):
        s = tup["sentence"]
        if s in FAULT_SENTENCES and self.redis.set(f"tri:failed:{s}", 1, nx=True):
            raise FailedException(f"injected: the batch of {s!r} fails once")
        super().execute(tup, collector)


def _words(rows) -> Counter:
    return Counter(w for (s,) in rows for w in s.split())


def _resizing_replays_run(redis_url, tmp_path, monkeypatch, factory, replay_take, kill_at_commit):
    """Two partitions of sentences, 8 per batch and partition; two batches fail in processing
    (FailedException), and with ``kill_at_commit`` the coordinator's worker is SIGKILLed once
    every state partition wrote batch 20 (or the first after it), before its commit is recorded.
    Every replay emits ``replay_take`` sentences per partition. Returns (status, counts, truth,
    the words of the killed commit's first attempt)."""
    rng = random.Random(11)
    data = [[[" ".join(rng.choice(VOCAB) for _ in range(rng.randint(3, 8)))] for _ in range(1500)] for _ in range(2)]
    data[0][3 * 8 + 2] = [FAULT_SENTENCES[0]]  # in txid 4's first attempt
    data[1][10 * 8 + 5] = [FAULT_SENTENCES[1]]  # around txid 11
    truth = _words(row for part in data for row in part)
    fired = tmp_path / "fired"
    if kill_at_commit:
        monkeypatch.setenv("TOPOLOGY_FAULT", "tx-commit:20")
        monkeypatch.setenv("TOPOLOGY_FAULT_ONCE", str(fired))
    t = TridentTopology()
    (t.new_stream(TXID, ResizingReplays(data, take=8, replay_take=replay_take)).parallelism_hint(2)
      .each(["sentence"], SplitFailingOnce(), ["word"])
      .group_by(["word"])
      .persistent_aggregate(factory, Count(), ["count"]).parallelism_hint(2))
    client = redis.Redis.from_url(redis_url)
    started = time.monotonic()
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("tri-resize", t.build(), {"redis.url": redis_url, **CONF}, timeout=60)
    print(f"tri-resize ({factory.state_type}, replays of {replay_take}): {time.monotonic() - started:.1f} s, "
          f"{committed(client)} batches, restarts {status.restarts}")
    assert status.state == "completed", status.error
    assert all(client.get(f"tri:failed:{s}") == b"1" for s in FAULT_SENTENCES)
    emits = [json.loads(e) for e in client.lrange(EMITS, 0, -1)]
    first: dict = {}
    resized = set()
    for txid, p, attempt, start, n in emits:
        f = first.setdefault((txid, p), (attempt, start, n))
        if f[0] != attempt and n != f[2]:
            resized.add(txid)
    assert len(resized) >= 2, emits  # the failed batches were replayed, and differently
    lost_commit: Counter = Counter()
    if kill_at_commit:
        assert fired.exists(), "the commit-phase kill never fired"
        assert status.restarts >= 1
        killed = int(fired.read_text().split()[0].split(":")[1])
        assert killed in resized
        lost_commit = _words(row for (txid, p), (_, start, n) in first.items() if txid == killed
                             for row in data[p][start:start + n])
    return status, counts(factory, redis_url), dict(truth), lost_commit


def test_opaque_map_exact_when_failed_batches_replay_smaller(redis_url, tmp_path, monkeypatch):
    factory = RedisMapState.opaque(key_prefix="tri-resize")
    _, got, truth, _ = _resizing_replays_run(redis_url, tmp_path, monkeypatch, factory, 4, kill_at_commit=False)
    assert got == truth, diff(got, truth)


def test_opaque_map_exact_when_a_killed_commit_replays_larger(redis_url, tmp_path, monkeypatch):
    """The state holds the killed commit's first attempt under its txid: the replay, a
    different batch, is recomputed from the values before it."""
    factory = RedisMapState.opaque(key_prefix="tri-resize")
    _, got, truth, _ = _resizing_replays_run(redis_url, tmp_path, monkeypatch, factory, 16, kill_at_commit=True)
    assert got == truth, diff(got, truth)


def test_non_transactional_map_over_counts_the_same_replays(redis_url, tmp_path, monkeypatch):
    """The negative control: a non-transactional map keeps the killed commit's first attempt and
    adds its replay on top, so the counts exceed the truth by exactly that attempt's words."""
    factory = RedisMapState.non_transactional(key_prefix="tri-resize")
    _, got, truth, lost_commit = _resizing_replays_run(redis_url, tmp_path, monkeypatch, factory, 16,
                                                       kill_at_commit=True)
    assert sum(lost_commit.values()) > 0
    assert got == dict(Counter(truth) + lost_commit), diff(got, dict(Counter(truth) + lost_commit))


def test_opaque_map_exact_when_a_killed_commit_replays_fewer_keys(redis_url, tmp_path, monkeypatch):
    factory = RedisMapState.opaque(key_prefix="tri-resize")
    _, got, truth, _ = _resizing_replays_run(redis_url, tmp_path, monkeypatch, factory, 1, kill_at_commit=True)
    assert got == truth, diff(got, truth)
