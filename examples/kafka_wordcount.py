"""The word count over a Kafka topic: ``KafkaSpout`` (a consumer group, at-least-once) -> split
-> count into a Redis hash, and the counts of each batch written back to another topic by
``KafkaBolt`` (acked once the broker confirmed them).

    python examples/kafka_wordcount.py --bootstrap-servers HOST:PORT [--sentences 20000]

It creates the topics if needed (``sentences``, 3 partitions; ``word-counts``), produces the
sentences, runs the topology on local worker processes until the topic is read to its end, and
checks the counts. ``dags/kafka_wordcount.py`` submits the same topology from Airflow.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.wordcount import SplitSentence, WordCount, sample_sentences, true_counts  # noqa: E402
from state.connection import connect  # noqa: E402
from topology_runtime import BasicBolt, LocalCluster, TopologyBuilder  # noqa: E402
from topology_runtime.connectors import KafkaBolt, KafkaSpout  # noqa: E402

TOPIC, COUNTS_TOPIC, COUNTS = "sentences", "word-counts", "kafka:wordcount:counts"
SERVERS = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")  # for main(); runs may set kafka.bootstrap.servers


class SplitValue(SplitSentence):
    """The record's value is the sentence."""

    def execute(self, tup):
        for word in tup["value"].split():
            self.emit([word])


class CountRecord(BasicBolt):
    """Each word's running count as a Kafka record: key the word, value the count."""

    outputs = ["key", "value"]

    def prepare(self, conf, context):
        self.counts: dict[str, int] = {}

    def execute(self, tup):
        w = tup["word"]
        self.counts[w] = self.counts.get(w, 0) + 1
        self.emit([w, str(self.counts[w])])


def build(servers: str | None = None, topic: str = TOPIC, group: str = "kafka-wordcount", counts_key: str = COUNTS,
          counts_topic: str | None = COUNTS_TOPIC, bounded: bool = True, parallelism: int = 2,
          consumer_conf: dict | None = None):
    # A 10 s session (Kafka's default before 3.0) rebalances a restarted worker's partitions in
    # seconds rather than librdkafka's 45.
    consumer_conf = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000, **(consumer_conf or {})}
    b = TopologyBuilder()
    b.set_spout("sentences", KafkaSpout([topic], servers, group, fields=["value"], bounded=bounded,
                                        consumer_conf=consumer_conf), parallelism)
    b.set_bolt("split", SplitValue(), parallelism).local_or_shuffle_grouping("sentences")
    b.set_bolt("count", WordCount(counts_key), parallelism).fields_grouping("split", ["word"]) \
        .add_configuration("topology.tick.tuple.freq.secs", 0.2)
    if counts_topic:
        b.set_bolt("records", CountRecord(), parallelism).fields_grouping("split", ["word"])
        b.set_bolt("publish", KafkaBolt(counts_topic, servers), parallelism).shuffle_grouping("records")
    return b.create_topology()


def topology():
    """`examples.kafka_wordcount:topology` for the CLI, Spark and the DAG: the brokers come with
    the run's config (``--conf kafka.bootstrap.servers=HOST:PORT``)."""
    return build()


def produce(servers: str, sentences: list[str], topic: str = TOPIC, partitions: int = 3) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers})
    for t, n in ((topic, partitions), (COUNTS_TOPIC, partitions)):
        try:
            admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1)])[t].result(15)
        except Exception as e:  # noqa: BLE001 - it exists already
            if "exists" not in str(e).lower():
                raise
    p = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i, s in enumerate(sentences):
        p.produce(topic, key=str(i), value=s)
        p.poll(0)
    if p.flush(60):
        raise RuntimeError(f"sentences not delivered to {servers}")


def main(argv: list[str] | None = None) -> int:
    from topology_runtime.control.redis_server import resolve_redis_url

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=SERVERS)
    p.add_argument("--sentences", type=int, default=20000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--redis", default=None, help="Redis URL (default: TOPOLOGY_REDIS_URL, else project-local)")
    args = p.parse_args(argv)
    url, where = resolve_redis_url(args.redis)
    print(f"Redis: {where}; Kafka: {args.bootstrap_servers}")
    client = connect(url, decode_responses=True)
    client.delete(COUNTS)
    sentences = sample_sentences(args.sentences)
    produce(args.bootstrap_servers, sentences)
    print(f"produced {len(sentences)} sentences to topic {TOPIC!r}")
    t0 = time.monotonic()
    with LocalCluster(workers=args.workers) as cluster:
        status = cluster.run("kafka-wordcount", build(), {"redis.url": url, "kafka.bootstrap.servers": args.bootstrap_servers},
                             timeout=600)
    print(status.table())
    got = {w: int(n) for w, n in client.hgetall(COUNTS).items()}
    ok = got == true_counts(sentences)
    print(f"{status.state} in {time.monotonic() - t0:.1f}s; counts {'exact' if ok else 'WRONG'}")
    return 0 if ok and status.state == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
