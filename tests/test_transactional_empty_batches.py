"""A batch bolt task that receives no tuple of a batch still runs ``finish_batch`` for it, as in
Storm (its BatchBoltExecutor creates the bolt on finish). An opaque committer depends on it: a
replay may read less than the failed attempt did, and a committer task that gets nothing of the
replay must still undo what the failed attempt wrote for its keys, or the next txid adds onto it."""

from __future__ import annotations

from collections import Counter

import pytest
import redis

from examples.redis_streams_count import UpdateOpaqueWordCounts, counting_topology
from state.serializer import loads
from topology_runtime import FailedException, LocalCluster
from topology_runtime.transactional import MemoryTransactionalSpout, OpaquePartitionedTransactionalSpout

CONF = {"topology.max.spout.pending": 3, "topology.message.timeout.secs": 5}
WORDS = ["fig", "cat", "fig", "dog", "fig", "egg", "cat", "fig", "apple", "fig"]


def _counts(client: redis.Redis, key: str = "word-counts") -> dict:
    return {loads(f): v for f, raw in client.hgetall(key).items() if (v := loads(raw)[1])}


class RecordingCommitter(UpdateOpaqueWordCounts):
    """Records (task index, txid) of every finish_batch it runs."""

    def prepare(self, conf, context, batch_id):
        super().prepare(conf, context, batch_id)
        self.r = redis.Redis.from_url(conf["redis.url"])
        self.task_index = context.task_index

    def finish_batch(self):
        super().finish_batch()
        self.r.sadd(f"finished:{self.task_index}", self.id.txid)


def test_every_committer_task_finishes_every_batch_even_with_no_tuple_of_it(redis_url):
    client = redis.Redis.from_url(redis_url)
    # One word only: the fields grouping sends every row to one of the two committer tasks.
    spout = MemoryTransactionalSpout({0: [["fig"]] * 12, 1: [["fig"]] * 12}, ["word"], 3)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("txempty", counting_topology(spout, "txempty", opaque=True,
                                                          committer=RecordingCommitter()),
                             {"redis.url": redis_url, **CONF}, timeout=120)
    assert status.state == "completed", status.error
    assert _counts(client) == {"fig": 24}
    per_task = [{int(t) for t in client.smembers(f"finished:{i}")} for i in (0, 1)]
    assert per_task[0] and per_task[0] == per_task[1], per_task  # the idle task finished each batch too


class ShrinkingReplay(OpaquePartitionedTransactionalSpout):
    """One partition over WORDS, two entries a batch; every replay of txid 2 reads nothing (its
    source was unreadable then), as an opaque spout may."""

    fields = ["word"]

    def open(self, conf):
        self.r = redis.Redis.from_url(conf["redis.url"])

    def num_partitions(self):
        return 1

    def exhausted(self, metas):
        return (metas.get(0) or 0) >= len(WORDS)

    def emit_partition_batch(self, tx, emit, partition, last_meta):
        start = last_meta or 0
        first_read = self.r.incr(f"reads:{tx.txid}") == 1
        n = 0 if tx.txid == 2 and not first_read else 2
        for w in WORDS[start:start + n]:
            emit([w])
        return start + len(WORDS[start:start + n])


class FailsTxid2OnceAfterWriting(UpdateOpaqueWordCounts):
    """Writes txid 2's counts, then fails that attempt once: as a worker dying between writing
    the counts and the commit being recorded."""

    def prepare(self, conf, context, batch_id):
        super().prepare(conf, context, batch_id)
        self.r = redis.Redis.from_url(conf["redis.url"])

    def finish_batch(self):
        super().finish_batch()
        if self.id.txid == 2 and self.counts and self.r.set("failed-after-writing", 1, nx=True):
            raise FailedException("injected: the commit of txid 2 fails after its counts were written")


def test_an_opaque_replay_without_a_key_undoes_the_failed_attempts_write(redis_url):
    client = redis.Redis.from_url(redis_url)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("txshrink", counting_topology(ShrinkingReplay(), "txshrink", opaque=True,
                                                           committer=FailsTxid2OnceAfterWriting()),
                             {"redis.url": redis_url, **CONF}, timeout=120)
    assert status.state == "completed", status.error
    assert client.exists("failed-after-writing")  # the fault fired
    assert int(client.get("reads:2")) >= 2  # and txid 2 was replayed, reading nothing
    assert _counts(client) == dict(Counter(WORDS))


def test_a_commit_whose_reply_was_lost_is_not_replayed(redis_url, monkeypatch):
    """Redis applies the coordinator's commit of txid 3, then the reply is lost (Redis killed
    after applying it). Replaying the committed batch would bring its committers an empty batch
    (the emitters skip a committed txid), and an opaque committer would undo what txid 3 wrote.
    The coordinator reads the current txid back instead and goes on."""
    from examples.redis_streams_count import fill
    from state.transactional import TransactionalState
    from topology_runtime.connectors import RedisStreamsTransactionalSpout

    client = redis.Redis.from_url(redis_url)
    streams = [f"lost-reply:{p}" for p in range(2)]
    truth = fill(client, streams, 60, seed=3)
    commit = TransactionalState.commit

    def commit_then_lose_the_reply(self, txid, current):  # runs in the forked workers
        commit(self, txid, current)
        if txid == 3 and self.client.set("reply-lost", 1, nx=True):
            raise redis.ConnectionError("injected: the commit was applied, its reply lost")
    monkeypatch.setattr(TransactionalState, "commit", commit_then_lose_the_reply)
    spout = RedisStreamsTransactionalSpout(streams, ["word"], max_entries=10, stop_when_drained=True)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("txlost", counting_topology(spout, "txlost", opaque=False,
                                                         committer=UpdateOpaqueWordCounts()),
                             {"redis.url": redis_url, **CONF}, timeout=120)
    assert status.state == "completed", status.error
    assert client.exists("reply-lost")  # the fault fired
    assert _counts(client) == truth


def test_a_commit_that_cannot_be_read_back_ends_the_run_failed_naming_the_txid(redis_url, monkeypatch):
    """The commit's reply is lost and Redis then cannot say whether it landed: the coordinator
    starts nothing meanwhile, and past its bound the run ends failed, naming the txid."""
    from examples.redis_streams_count import fill
    from state.transactional import TransactionalState
    from topology_runtime.connectors import RedisStreamsTransactionalSpout
    from topology_runtime.launchers.local import TopologyFailed
    from topology_runtime.transactional import coordinator

    client = redis.Redis.from_url(redis_url)
    streams = [f"unreadable:{p}" for p in range(2)]
    fill(client, streams, 60, seed=4)
    commit, current = TransactionalState.commit, TransactionalState.current_txid

    def commit_then_lose_the_reply(self, txid, cur):  # runs in the forked workers
        commit(self, txid, cur)
        if txid == 3 and self.client.set("reply-lost", 1, nx=True):
            raise redis.ConnectionError("injected: the commit was applied, its reply lost")

    def current_unreadable(self):
        if self.client.exists("reply-lost"):
            raise redis.ConnectionError("injected: Redis cannot be read")
        return current(self)
    monkeypatch.setattr(TransactionalState, "commit", commit_then_lose_the_reply)
    monkeypatch.setattr(TransactionalState, "current_txid", current_unreadable)
    monkeypatch.setattr(coordinator, "UNSURE_COMMIT_SECS", 0.5)
    spout = RedisStreamsTransactionalSpout(streams, ["word"], max_entries=10, stop_when_drained=True)
    with LocalCluster(workers=2) as cluster, \
            pytest.raises(TopologyFailed, match="whether the commit of txid 3 was recorded cannot be read"):
        cluster.run("txunread", counting_topology(spout, "txunread", opaque=False, committer=UpdateOpaqueWordCounts()),
                    {"redis.url": redis_url, **CONF, "topology.message.timeout.secs": 1}, timeout=60)
