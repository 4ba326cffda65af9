"""Kafka connectors against a Kafka-protocol broker (Tansu, tests/kafka_broker.py): the offset
rules as pure scenarios, then real runs: a word count read through a consumer group shared by
two spout tasks, a worker SIGKILLed mid-run (nothing lost, the resumed group re-reads nothing
acked), a bolt that writes back with delivery confirmed, and the errors a careless user meets."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import redis
from kafka_broker import FAST_GROUP

from examples.wordcount import SplitSentence, WordCount, sample_sentences, true_counts
from topology_runtime import BasicBolt, LocalCluster, Spout, TopologyBuilder, TopologyFailed
from topology_runtime.connectors import KafkaBolt, KafkaSpout
from topology_runtime.connectors.kafka_offsets import OffsetManager
from topology_runtime.testing import wait_for
from topology_runtime.transactional import BatchBolt

pytestmark = pytest.mark.slow  # a broker and consumer groups forming: not in make test-fast


def test_offsets_commit_only_past_a_fully_acked_prefix():
    m = OffsetManager()
    tp = ("t", 0)
    for o in range(10, 15):
        m.emitted(tp, o)
    assert m.to_commit() == {tp: 10}  # nothing acked: the first pending
    for o in (11, 12, 14):  # out of order
        m.acked(tp, o)
    assert m.to_commit() == {tp: 10}  # 10 still pending: a crash replays from it
    m.acked(tp, 10)
    assert m.to_commit() == {tp: 13}
    m.committed({tp: 13})
    assert m.to_commit() == {}  # nothing new
    m.acked(tp, 13)
    assert m.to_commit() == {tp: 15}  # every emitted record acked: one past the last
    m.revoke(tp)
    assert not m.acked(tp, 20) and m.to_commit() == {}  # a revoked partition's late acks go nowhere


def _wordcount(topic: str, servers: str, group: str, counts_key: str, spouts: int = 2, **spout_kw):
    b = TopologyBuilder()
    b.set_spout("sentences", KafkaSpout([topic], servers, group, fields=["value"], bounded=True,
                                        consumer_conf=FAST_GROUP, **spout_kw), spouts)
    b.set_bolt("split", _Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", WordCount(counts_key, flush_every=200), 2).fields_grouping("split", ["word"])
    return b.create_topology()


class _Split(SplitSentence):
    def execute(self, tup):
        for word in tup["value"].split():
            self.emit([word])


def _counts(client: redis.Redis, key: str) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall(key).items()}


def test_a_consumer_group_shared_by_two_spout_tasks_counts_every_record(kafka, redis_url):
    kafka.create_topic("wc-shared", 3)
    sentences = sample_sentences(2000)
    kafka.produce("wc-shared", [(str(i), s) for i, s in enumerate(sentences)])  # keyed: every partition
    client = redis.Redis.from_url(redis_url)
    conf = {"redis.url": redis_url, "topology.tick.tuple.freq.secs": 0.5}
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("kafka-shared", _wordcount("wc-shared", kafka.servers, "wc-shared", "kc:shared"), conf,
                             timeout=180)
    assert status.state == "completed", status.error
    assert _counts(client, "kc:shared") == true_counts(sentences)  # no fault: exactly once here
    assert status.components["sentences"].acked == 2000


def test_a_sigkilled_worker_loses_nothing_and_the_resumed_group_rereads_nothing_acked(kafka, redis_url):
    kafka.create_topic("wc-kill", 2)
    sentences = sample_sentences(3000, seed=3)
    kafka.produce("wc-kill", [(str(i), s) for i, s in enumerate(sentences)])  # keyed: both partitions
    client = redis.Redis.from_url(redis_url)
    conf = {"redis.url": redis_url, "topology.tick.tuple.freq.secs": 0.5, "topology.message.timeout.secs": 3,
            "topology.max.spout.pending": 200}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("kafka-kill", _wordcount("wc-kill", kafka.servers, "wc-kill", "kc:kill", spouts=1), conf)
        plan = run.plan
        spout_worker = plan.task_worker[plan.component_tasks["sentences"][0]]
        assert wait_for(lambda: sum(_counts(client, "kc:kill").values()) > 3000, 60)
        victim = next(i for i in run.pids if i != spout_worker)  # the bolts' worker: the group stays as it is
        os.kill(run.pids[victim], signal.SIGKILL)
        status = run.wait(180)
    assert status.state == "completed", status.error
    assert status.restarts >= 1
    truth, got = true_counts(sentences), _counts(client, "kc:kill")
    assert set(got) == set(truth) and all(got[w] >= n for w, n in truth.items())  # nothing lost
    assert status.components["sentences"].replayed > 0  # what the killed worker held came again
    # The group committed past everything acked: a consumer seeded with its offsets reads nothing.
    # (A new group seeded with them: Tansu keeps a departed member as a group's leader.)
    from confluent_kafka import Consumer, TopicPartition

    old = Consumer({"bootstrap.servers": kafka.servers, "group.id": "wc-kill"})
    committed = old.committed([TopicPartition("wc-kill", p) for p in range(2)], timeout=10)
    old.close()
    assert all(tp.offset > 0 for tp in committed) and sum(tp.offset for tp in committed) == 3000, committed
    seeded = Consumer({"bootstrap.servers": kafka.servers, "group.id": "wc-kill-2", **FAST_GROUP})
    seeded.commit(offsets=committed, asynchronous=False)
    seeded.close()
    client.delete("kc:kill")
    with LocalCluster(workers=2) as cluster:
        again = cluster.run("kafka-kill-2", _wordcount("wc-kill", kafka.servers, "wc-kill-2", "kc:kill", spouts=1),
                            conf, timeout=120)
    assert again.state == "completed" and again.components["sentences"].emitted == 0
    assert _counts(client, "kc:kill") == {}


class _Upper(BasicBolt):
    outputs = ["key", "value"]

    def execute(self, tup):
        self.emit([tup["key"], tup["value"].upper()])


def test_a_kafka_bolt_writes_back_and_acks_after_delivery(kafka, redis_url):
    kafka.create_topic("in-words", 2)
    kafka.create_topic("out-words", 2)
    records = [(f"k{i}", f"word {i}") for i in range(500)]
    kafka.produce("in-words", records)
    b = TopologyBuilder()
    b.set_spout("in", KafkaSpout(["in-words"], kafka.servers, "upper", bounded=True, consumer_conf=FAST_GROUP), 1)
    b.set_bolt("upper", _Upper(), 2).shuffle_grouping("in")
    b.set_bolt("out", KafkaBolt("out-words", kafka.servers), 2).shuffle_grouping("upper")
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("kafka-bolt", b.create_topology(), {}, timeout=120)
    assert status.state == "completed", status.error
    assert status.components["out"].acked == 500 and status.components["in"].acked == 500
    assert sorted(kafka.read_all("out-words")) == sorted((k, v.upper()) for k, v in records)


def test_bad_input_names_the_topic_the_servers_or_the_component(kafka, redis_url):
    b = TopologyBuilder()
    b.set_spout("src", KafkaSpout(["no-such-topic"], kafka.servers, "g", consumer_conf=FAST_GROUP), 1)
    b.set_bolt("sink", _Upper(), 1).shuffle_grouping("src")
    t0 = time.monotonic()
    with LocalCluster(workers=1) as cluster, pytest.raises(TopologyFailed) as failed:
        cluster.run("kafka-missing", b.create_topology(), {}, timeout=60)
    error = str(failed.value)
    assert "no topic 'no-such-topic'" in error and kafka.servers in error and "'src'" in error, error
    assert time.monotonic() - t0 < 30
    b = TopologyBuilder()
    b.set_spout("src", KafkaSpout(["t"], "127.0.0.1:1", "g"), 1)
    b.set_bolt("sink", _Upper(), 1).shuffle_grouping("src")
    with LocalCluster(workers=1) as cluster, pytest.raises(TopologyFailed, match="cannot reach the Kafka brokers '127.0.0.1:1'"):
        cluster.run("kafka-unreachable", b.create_topology(), {}, timeout=60)
    with pytest.raises(ValueError, match="topics must be a list"):
        KafkaSpout("sentences", kafka.servers, "g")  # a bare string where the list goes
    with pytest.raises(ValueError, match="not record fields"):
        KafkaSpout(["t"], kafka.servers, "g", fields=["value", "headers"])
    # A deserializer that fails on every record ends the run at once, naming it and the record.
    kafka.create_topic("bad-json", 1)
    kafka.produce("bad-json", [(None, "not json")])

    def strict_json(b: bytes):
        import json

        return json.loads(b)
    b = TopologyBuilder()
    b.set_spout("src", KafkaSpout(["bad-json"], kafka.servers, "bad", fields=["value"], deserializer=strict_json,
                                  consumer_conf=FAST_GROUP), 1)
    b.set_bolt("sink", _Upper(), 1).shuffle_grouping("src")
    with LocalCluster(workers=1) as cluster, pytest.raises(TopologyFailed) as failed:
        cluster.run("kafka-bad-json", b.create_topology(), {}, timeout=60)
    error = str(failed.value)
    assert "deserializer strict_json" in error and "'bad-json' partition 0 offset 0" in error, error


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


@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_transactional_kafka_counts_stay_exact_through_a_sigkilled_worker(kafka, redis_url, opaque):
    """Each Kafka partition a spout partition, offset ranges as the batches' metadata in the
    coordinator's records: a worker SIGKILLed once batches committed, counts exact (== truth)."""
    import random

    from examples.redis_streams_count import UpdateOpaqueWordCounts
    from examples.transactional_count import UpdateWordCounts
    from topology_runtime.connectors import KafkaOpaqueTransactionalSpout, KafkaTransactionalSpout
    from topology_runtime.transactional import TransactionalTopologyBuilder

    topic = f"tx-words-{'opaque' if opaque else 'tx'}"
    kafka.create_topic(topic, 3)
    rng = random.Random(5)
    words = [f"w{rng.randrange(40)}" for _ in range(3000)]
    kafka.produce(topic, [(str(i), w) for i, w in enumerate(words)])
    truth: dict[str, int] = {}
    for w in words:
        truth[w] = truth.get(w, 0) + 1
    cls = KafkaOpaqueTransactionalSpout if opaque else KafkaTransactionalSpout
    spout = cls([topic], kafka.servers, fields=["value"], max_records=100, stop_when_drained=True)
    name = f"ktx-{'opaque' if opaque else 'tx'}"
    b = TransactionalTopologyBuilder(name, "spout", spout, 2)
    b.set_bolt("count", _ValueCount(), 2).fields_grouping("spout", ["value"])
    b.set_committer_bolt("update", UpdateOpaqueWordCounts() if opaque else UpdateWordCounts(), 2) \
        .fields_grouping("count", ["word"])
    key = f"counts:{name}"
    conf = {"redis.url": redis_url, "count.key": key, "topology.max.spout.pending": 3,
            "topology.message.timeout.secs": 5}
    client = redis.Redis.from_url(redis_url)
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


@pytest.mark.spark
def test_the_kafka_wordcount_dag_on_spark(kafka, airflow_db, redis_url, monkeypatch):
    """dags/kafka_wordcount.py through dag.test: the spouts, the bolt that writes back and the
    brokers handed over as config, unchanged on Spark local[2]."""
    from airflow.dag_processing.dagbag import DagBag

    from examples.kafka_wordcount import COUNTS, COUNTS_TOPIC

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    dag = DagBag(dag_folder=str(Path(__file__).resolve().parent.parent / "dags")).get_dag("kafka_wordcount")
    run = dag.test(run_conf={"bootstrap_servers": kafka.servers, "sentences": 2000})
    assert run.state == "success", {ti.task_id: ti.state for ti in run.get_task_instances()}
    truth = true_counts(sample_sentences(2000))
    assert _counts(redis.Redis.from_url(redis_url), COUNTS) == truth
    # Every word's running count went back to Kafka: the largest per word is its total.
    last: dict[str, int] = {}
    for word, n in kafka.read_all(COUNTS_TOPIC):
        last[word] = max(last.get(word, 0), int(n))
    assert last == truth


class _RejectPoison(BasicBolt):
    outputs = []

    def prepare(self, conf, context):
        self.client = redis.Redis.from_url(conf["redis.url"])

    def execute(self, tup):
        if tup["value"] == "poison":
            raise ValueError("cannot parse this record")
        self.client.rpush("kafka:good", tup["value"])


def test_a_poison_record_goes_to_the_dead_letters_after_max_fails_and_the_rest_goes_on(kafka, redis_url):
    from state.layout import dead_letter_list

    kafka.create_topic("with-poison", 1)
    kafka.produce("with-poison", [(None, f"good-{i}") for i in range(50)] + [(None, "poison")] +
                  [(None, f"good-{i}") for i in range(50, 100)])
    b = TopologyBuilder()
    b.set_spout("src", KafkaSpout(["with-poison"], kafka.servers, "poison", fields=["value"], max_fails=2,
                                  bounded=True, consumer_conf=FAST_GROUP), 1)
    b.set_bolt("parse", _RejectPoison(), 1).shuffle_grouping("src")
    with LocalCluster(workers=1) as cluster:
        status = cluster.run("kafka-poison", b.create_topology(), {"redis.url": redis_url}, timeout=120)
    assert status.state == "completed", status.error
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert sorted(set(client.lrange("kafka:good", 0, -1))) == sorted(f"good-{i}" for i in range(100))
    import json

    dead = [json.loads(x) for x in client.lrange(dead_letter_list("kafka:with-poison"), 0, -1)]
    assert [(d["values"], d["offset"], d["fails"]) for d in dead] == [(["poison"], 50, 3)]
    assert status.components["src"].failed == 3


class _Ticking(Spout):
    """One tuple every 50 ms, tracked, replayed on failure (until the test ends the run)."""

    outputs = ["key", "value"]

    def open(self, conf, context):
        self.n = 0

    def next_tuple(self):
        time.sleep(0.05)
        self.n += 1
        self.emit([f"k{self.n}", f"v{self.n}"], msg_id=self.n)

    def fail(self, msg_id):
        self.emit([f"k{msg_id}", f"v{msg_id}"], msg_id=msg_id)


def test_a_failed_delivery_fails_the_tuple(tmp_path):
    """The bolt's broker goes away mid-run (its own Tansu, killed): deliveries time out, and
    the tuples fail back to their spout instead of being acked unwritten."""
    from kafka_broker import TansuBroker

    broker = TansuBroker(tmp_path / "tansu.log")
    broker.start()
    broker.create_topic("lost-writes", 1)
    b = TopologyBuilder()
    b.set_spout("ticks", _Ticking(), 1)
    b.set_bolt("out", KafkaBolt("lost-writes", broker.servers, producer_conf={"message.timeout.ms": 1500}), 1) \
        .shuffle_grouping("ticks")
    try:
        with LocalCluster(workers=1) as cluster:
            run = cluster.submit("kafka-lost", b.create_topology(), {"topology.message.timeout.secs": 30})
            try:
                assert wait_for(lambda: run.status().components["out"].acked >= 10, 30), run.status()
                broker.stop()
                assert wait_for(lambda: run.status().components["out"].failed > 0, 30), run.status()
                st = run.status()
                assert st.components["ticks"].failed > 0  # back at the spout well before the message timeout
            finally:
                run.kill()
    finally:
        broker.stop()


def test_trident_over_kafka_counts_exactly_through_a_sigkilled_worker(kafka, redis_url):
    """A Trident word count over the Kafka opaque spout (a Kafka partition per spout partition,
    offset ranges committed with the txid) into the opaque Redis map: exact through a SIGKILL."""
    import random

    from topology_runtime.connectors import KafkaOpaqueTransactionalSpout
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
