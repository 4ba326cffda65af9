"""Kafka connectors on real workers against a Kafka-protocol broker (Tansu,
tests/kafka_broker.py): a word count read through a consumer group shared by two spout tasks, a
bolt that writes back with delivery confirmed, a failed delivery failing its tuple, a poison
record in the dead letters, the Kafka word count DAG on Spark. Faults and rebalances are in
test_kafka_faults.py, the transactional spouts in test_kafka_transactional.py, bad input in
test_kafka_bad_input.py, the offset rules without a broker in test_kafka_unit.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from kafka_broker import FAST_GROUP

from examples.wordcount import SplitSentence, WordCount, sample_sentences, true_counts
from topology_runtime import BasicBolt, LocalCluster, Spout, TopologyBuilder
from topology_runtime.connectors import KafkaBolt, KafkaSpout
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow  # a broker and consumer groups forming: not in make test-fast


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
