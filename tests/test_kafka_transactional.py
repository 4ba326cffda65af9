"""Kafka's partitioned transactional spouts against the test broker (Tansu,
tests/kafka_broker.py): a replayed batch of KafkaTransactionalSpout equals the original to the
record (driven directly), exact counts through a SIGKILLed worker with the replays it caused
counted, and a Trident word count over the opaque spout through one."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
import redis

from topology_runtime import LocalCluster
from topology_runtime.connectors import KafkaOpaqueTransactionalSpout, KafkaTransactionalSpout
from topology_runtime.reliability.transactional import TransactionAttempt
from topology_runtime.testing import wait_for
from topology_runtime.transactional import BatchBolt

pytestmark = pytest.mark.slow  # a broker, worker processes and SIGKILLs


def test_a_replayed_batch_equals_the_original_to_the_record(kafka):
    """The batch's metadata is its offset range; a replay re-reads exactly it, also after more
    records arrived and after a later batch was read."""
    topic = "tx-replay"
    kafka.create_topic(topic, 2)
    kafka.produce(topic, [(f"k{i}", f"v{i}") for i in range(30)], partition=0)
    kafka.produce(topic, [(f"k{i}", f"v{i}") for i in range(30, 35)], partition=1)
    spout = KafkaTransactionalSpout([topic], kafka.servers, fields=["key", "value", "partition", "offset"],
                                    max_records=20)
    spout.open({})
    try:
        assert spout.num_partitions() == 2
        first: dict[int, tuple[list, list]] = {}
        for p in range(2):
            rows: list = []
            meta = spout.emit_partition_batch_new(TransactionAttempt(1, 11), rows.append, p, None)
            first[p] = (meta, rows)
        assert first[0][0] == [0, 20, 20] and first[1][0] == [0, 5, 5]
        assert [r[3] for r in first[0][1]] == list(range(20)) and first[1][1][0] == ["k30", "v30", 1, 0]
        kafka.produce(topic, [(f"late{i}", "late") for i in range(10)], partition=1)  # after the batch
        later: list = []
        assert spout.emit_partition_batch_new(TransactionAttempt(2, 12), later.append, 0, first[0][0]) == [20, 30, 10]
        for p in range(2):
            meta, rows = first[p]
            again: list = []
            spout.emit_partition_batch(TransactionAttempt(1, 13), again.append, p, meta)
            assert again == rows  # the same records, in the same order, nothing new
        empty: list = []
        spout.emit_partition_batch(TransactionAttempt(3, 14), empty.append, 1, [None, 5, 0])
        assert empty == []
    finally:
        spout.close()


class _ValueCount(BatchBolt):
    """A batch's count of each record value (one word per record), keyed for the committer."""

    outputs = ["tx", "word", "count"]

    def prepare(self, conf, context, batch_id):
        self.id, self.counts = batch_id, {}

    def execute(self, tup):
        self.counts[tup["value"]] = self.counts.get(tup["value"], 0) + 1

    def finish_batch(self):
        for w, n in self.counts.items():
            self.emit([self.id, w, n])


class _Counted:
    """Counts each emission of a batch's partition (``txid:partition``) in the run's Redis, and
    the transactional spout's replays of a recorded batch (``replay:txid:partition``)."""

    def open(self, conf, context=None):
        super().open(conf, context)  # type: ignore[misc]
        self._redis = redis.Redis.from_url(conf["redis.url"])
        self._key = conf["test.emissions.key"]

    def _count(self, tx, partition, replay=False):
        self._redis.hincrby(self._key, f"{tx.txid}:{partition}", 1)
        if replay:
            self._redis.hincrby(self._key, f"replay:{tx.txid}:{partition}", 1)


class _CountedTransactional(_Counted, KafkaTransactionalSpout):
    def emit_partition_batch_new(self, tx, emit, partition, last_meta):
        self._count(tx, partition)
        return super().emit_partition_batch_new(tx, emit, partition, last_meta)

    def emit_partition_batch(self, tx, emit, partition, meta):
        self._count(tx, partition, replay=True)
        super().emit_partition_batch(tx, emit, partition, meta)


class _CountedOpaque(_Counted, KafkaOpaqueTransactionalSpout):
    def emit_partition_batch(self, tx, emit, partition, last_meta):
        self._count(tx, partition)
        return super().emit_partition_batch(tx, emit, partition, last_meta)


@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_transactional_kafka_counts_stay_exact_through_a_sigkilled_worker(kafka, redis_url, opaque):
    """Each Kafka partition a spout partition, offset ranges as the batches' metadata in the
    coordinator's records: a worker SIGKILLed once batches committed, counts exact (== truth),
    and the kill really made batches replay."""
    from examples.redis_streams_count import UpdateOpaqueWordCounts
    from examples.transactional_count import UpdateWordCounts
    from topology_runtime.transactional import TransactionalTopologyBuilder

    topic = f"tx-words-{'opaque' if opaque else 'tx'}"
    kafka.create_topic(topic, 3)
    rng = random.Random(5)
    words = [f"w{rng.randrange(40)}" for _ in range(3000)]
    kafka.produce(topic, [(str(i), w) for i, w in enumerate(words)])
    truth: dict[str, int] = {}
    for w in words:
        truth[w] = truth.get(w, 0) + 1
    cls = _CountedOpaque if opaque else _CountedTransactional
    spout = cls([topic], kafka.servers, fields=["value"], max_records=50, stop_when_drained=True)
    name = f"ktx-{'opaque' if opaque else 'tx'}"
    b = TransactionalTopologyBuilder(name, "spout", spout, 2)
    b.set_bolt("count", _ValueCount(), 2).fields_grouping("spout", ["value"])
    b.set_committer_bolt("update", UpdateOpaqueWordCounts() if opaque else UpdateWordCounts(), 2) \
        .fields_grouping("count", ["word"])
    key = f"counts:{name}"
    emissions = f"emissions:{name}"
    conf = {"redis.url": redis_url, "count.key": key, "topology.max.spout.pending": 3,
            "topology.message.timeout.secs": 5, "test.emissions.key": emissions}
    client = redis.Redis.from_url(redis_url)
    client.delete(emissions)
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit(name, b.create_topology(), conf)
        assert wait_for(lambda: client.hlen(key) > 0, 60), run.status()
        time.sleep(0.5)
        os.kill(sorted(run.pids.values())[rng.randrange(2)], signal.SIGKILL)
        status = run.wait(180)
    assert status.state == "completed", status.error
    assert status.restarts >= 1
    from test_transactional_faults import _counts as committed_counts

    assert committed_counts(client, key) == truth
    # A batch's partition emitted more than once: the kill made the coordinator replay batches.
    replayed = [k for k, n in client.hgetall(emissions).items() if int(n) > 1]
    assert replayed, client.hgetall(emissions)
    if not opaque:  # and the replays went through the identical-replay path
        assert any(k.startswith(b"replay:") for k in client.hgetall(emissions)), client.hgetall(emissions)


def test_trident_over_kafka_counts_exactly_through_a_sigkilled_worker(kafka, redis_url):
    """A Trident word count over the Kafka opaque spout (a Kafka partition per spout partition,
    offset ranges committed with the txid) into the opaque Redis map: exact through a SIGKILL."""
    from topology_runtime.trident import Count, RedisMapState, TridentTopology

    topic = "trident-words"
    kafka.create_topic(topic, 3)
    rng = random.Random(11)
    words = [f"w{rng.randrange(40)}" for _ in range(3000)]
    kafka.produce(topic, [(str(i), w) for i, w in enumerate(words)])
    truth: dict[str, int] = {}
    for w in words:
        truth[w] = truth.get(w, 0) + 1
    t = TridentTopology()
    factory = RedisMapState.opaque(key_prefix="kafka-trident")
    (t.new_stream("kafka-trident", KafkaOpaqueTransactionalSpout([topic], kafka.servers, fields=["value"],
                                                               max_records=100, stop_when_drained=True))
     .parallelism_hint(2)
     .group_by(["value"])
     .persistent_aggregate(factory, Count(), ["count"])
     .parallelism_hint(2))
    conf = {"redis.url": redis_url, "topology.max.spout.pending": 3, "topology.message.timeout.secs": 5}
    parts = [factory.make_state({"redis.url": redis_url}, i, 2) for i in range(2)]

    def counts() -> dict[str, int]:
        return {w: n for p in parts for w, n in p.get_tuples()}

    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("kafka-trident", t.build(), conf)
        assert wait_for(lambda: counts(), 60), run.status()
        time.sleep(0.5)
        os.kill(sorted(run.pids.values())[rng.randrange(2)], signal.SIGKILL)
        status = run.wait(180)
    assert status.state == "completed", status.error
    assert status.restarts >= 1
    assert counts() == truth
