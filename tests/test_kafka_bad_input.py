"""The errors a careless user meets with the Kafka connectors, each on real workers against the
test broker (Tansu, tests/kafka_broker.py), each timed: a topic that does not exist, brokers that
cannot be reached and a deserializer that raises fail the run in seconds, naming the topic, the
servers or the deserializer and record, and the component."""

from __future__ import annotations

import json
import re
import time

import pytest
from kafka_broker import FAST_GROUP
from test_kafka import _Upper

from topology_runtime import LocalCluster, TopologyBuilder, TopologyFailed
from topology_runtime.connectors import KafkaBolt, KafkaOpaqueTransactionalSpout, KafkaSpout, KafkaTransactionalSpout
from topology_runtime.connectors.kafka import METADATA_TIMEOUT_SECS
from topology_runtime.supervisor.run_supervisor import MAX_STARTUP_FAILURES

pytestmark = pytest.mark.slow  # worker processes, a broker, the metadata timeout

# Measured here: about 1 s for a failure at open (the runtime starts a worker three times), 3 s
# for a record that needs the consumer group formed first, 16 s for brokers that cannot be
# reached (a metadata timeout at each start); the bounds leave room for a loaded machine.
FAST_SECS = 10.0
TIMEOUT_SECS = MAX_STARTUP_FAILURES * METADATA_TIMEOUT_SECS + FAST_SECS
UNREACHABLE = "127.0.0.1:1"


def _failure(topology, conf: dict | None = None, within: float = FAST_SECS) -> str:
    t0 = time.monotonic()
    with LocalCluster(workers=1) as cluster, pytest.raises(TopologyFailed) as failed:
        cluster.run(f"kafka-bad-{time.monotonic_ns()}", topology, conf or {}, timeout=60)
    took, error = time.monotonic() - t0, str(failed.value)
    assert took < within, f"the run failed after {took:.1f}s, not in seconds: {error}"
    return error


def strict_json(b: bytes):
    return json.loads(b)


def _spout_topology(spout):
    b = TopologyBuilder()
    b.set_spout("src", spout, 1)
    b.set_bolt("sink", _Upper(), 1).shuffle_grouping("src")
    return b.create_topology()


def test_kafka_spout_bad_input_fails_the_run_in_seconds_naming_what_is_wrong(kafka):
    error = _failure(_spout_topology(KafkaSpout(["no-such-topic"], kafka.servers, "g", consumer_conf=FAST_GROUP)))
    assert "KafkaSpout in component 'src': no topic 'no-such-topic'" in error and kafka.servers in error, error
    error = _failure(_spout_topology(KafkaSpout(["t"], UNREACHABLE, "g")), within=TIMEOUT_SECS)
    assert f"KafkaSpout in component 'src': cannot reach the Kafka brokers '{UNREACHABLE}' within 5s" in error, error
    error = _failure(_spout_topology(KafkaSpout(["t"], None, "g")))
    assert "KafkaSpout in component 'src': no Kafka brokers" in error and "kafka.bootstrap.servers" in error, error
    # A deserializer that fails on every record ends the run at once, naming it and the record.
    kafka.create_topic("bad-json", 1)
    kafka.produce("bad-json", [(None, "not json")])
    error = _failure(_spout_topology(KafkaSpout(["bad-json"], kafka.servers, "bad", fields=["value"],
                                                deserializer=strict_json, consumer_conf=FAST_GROUP)))
    assert "KafkaSpout in component 'src': deserializer strict_json failed on topic 'bad-json' partition 0 " \
           "offset 0: JSONDecodeError" in error, error


def _kafka_topics(servers: str) -> set[str]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": servers, "group.id": "lister"})
    try:
        return set(c.list_topics(timeout=10).topics)
    finally:
        c.close()


def test_kafka_bolt_refuses_a_topic_that_does_not_exist_without_creating_it(kafka):
    """The producer's own metadata request would create the topic (Tansu does, as Kafka brokers
    with auto-creation do): the bolt must find it missing before it produces anything."""
    from test_kafka import _Ticking

    def topology(topic: str, servers: str | None):
        b = TopologyBuilder()
        b.set_spout("ticks", _Ticking(), 1)
        b.set_bolt("out", KafkaBolt(topic, servers), 1).shuffle_grouping("ticks")
        return b.create_topology()

    error = _failure(topology("no-such-output", kafka.servers))
    assert f"KafkaBolt in component 'out': no topic 'no-such-output' on the Kafka brokers '{kafka.servers}'" \
        in error, error
    assert "no-such-output" not in _kafka_topics(kafka.servers)  # not created on the way
    error = _failure(topology("t", UNREACHABLE), within=TIMEOUT_SECS)
    assert f"KafkaBolt in component 'out': cannot reach the Kafka brokers '{UNREACHABLE}' within 5s" in error, error


def _transactional(cls, topic: str, servers: str | None, **kw):
    from test_kafka_transactional import _ValueCount

    from examples.transactional_count import UpdateWordCounts
    from topology_runtime.transactional import TransactionalTopologyBuilder

    b = TransactionalTopologyBuilder(f"kbad-{time.monotonic_ns()}", "spout",
                                     cls([topic], servers, fields=["value"], stop_when_drained=True, **kw), 1)
    b.set_bolt("count", _ValueCount(), 1).shuffle_grouping("spout")
    b.set_committer_bolt("update", UpdateWordCounts(), 1).shuffle_grouping("count")
    return b.create_topology()


# The runtime names the failing task ("coord-spout[1] open() raised ...") before the spout's text.
AT_OPEN = r"(coord-)?spout\[\d+\] (open|prepare)\(\) raised (LookupError|ConnectionError): "


@pytest.mark.parametrize("cls", [KafkaTransactionalSpout, KafkaOpaqueTransactionalSpout],
                         ids=["transactional", "opaque"])
def test_transactional_kafka_spouts_refuse_a_missing_topic_or_unreachable_brokers_in_seconds(kafka, redis_url, cls):
    conf = {"redis.url": redis_url, "count.key": f"counts:kbad:{cls.__name__}"}
    error = _failure(_transactional(cls, "no-such-tx-topic", kafka.servers), conf)
    assert re.search(AT_OPEN + cls.__name__, error), error
    assert f"no topic 'no-such-tx-topic' on the Kafka brokers '{kafka.servers}'" in error, error
    error = _failure(_transactional(cls, "t", UNREACHABLE), conf, within=TIMEOUT_SECS)
    assert re.search(AT_OPEN + cls.__name__, error), error
    assert f"cannot reach the Kafka brokers '{UNREACHABLE}' within 5s" in error, error


@pytest.mark.parametrize("cls", [KafkaTransactionalSpout, KafkaOpaqueTransactionalSpout],
                         ids=["transactional", "opaque"])
def test_transactional_kafka_spouts_end_the_run_at_once_on_a_failing_deserializer(kafka, redis_url, cls):
    """No attempt of the batch can read the record: the run fails at the first, not after
    topology.transactional.max.attempts attempts with back-off (about 21 s)."""
    topic = f"bad-json-{cls.__name__}"
    kafka.create_topic(topic, 2)
    kafka.produce(topic, [(None, "[1]"), (None, "not json")], partition=1)
    conf = {"redis.url": redis_url, "count.key": f"counts:kbad:{cls.__name__}"}
    error = _failure(_transactional(cls, topic, kafka.servers, deserializer=strict_json), conf)
    assert "component 'spout' task" in error and f"deserializer strict_json failed on topic {topic!r} " \
           "partition 1 offset 1: JSONDecodeError" in error, error
