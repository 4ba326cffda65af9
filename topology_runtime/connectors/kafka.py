"""Kafka connectors on confluent-kafka (librdkafka): ``KafkaSpout``, a reliable spout whose tasks
share a topic's partitions through a consumer group, and ``KafkaBolt``, which acks a tuple only
once the broker confirmed its delivery. The transactional spouts are in kafka_transactional.py.

``KafkaSpout`` commits a partition's offset only past its fully acked prefix
(kafka_offsets.py), so a crash replays from the first unacked record and never skips one; a
failed record is re-emitted from memory and, past ``max_fails`` failures, goes to the dead
letters (a Redis list, as the Redis spouts'; logged and dropped when the run has no Redis). A
partition revoked in a rebalance is committed as far as it was acked, then forgotten: later acks
of its records are not written into the offsets of the member that owns it now (which replays
the rest).
Broker calls are batched: one ``consume`` per ``next_tuple``, commits at most every
``commit_interval_ms``; a commit counts once the broker confirmed it (a failed one is sent again,
``close`` commits synchronously what was not confirmed).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..api.components import Bolt, Spout, TopologyContext, Tuple
from ..api.names import name_list
from .kafka_offsets import OffsetManager, TopicPartitionKey

log = logging.getLogger(__name__)

RECORD_FIELDS = ("key", "value", "topic", "partition", "offset", "timestamp")
METADATA_TIMEOUT_SECS = 5.0  # an unreachable broker fails open() after this, naming the servers


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8")


def bootstrap_servers(conf: dict, given: str | None, where: str) -> str:
    """The servers given to the component, else the run's ``kafka.bootstrap.servers`` (a DAG or
    CLI passes them as config); ValueError naming the component when neither is set."""
    servers = given or conf.get("kafka.bootstrap.servers")
    if not servers or not isinstance(servers, str):
        raise ValueError(f"{where}: no Kafka brokers: give bootstrap_servers or set the config key "
                         "kafka.bootstrap.servers")
    return servers


def check_fields(fields: Any, where: str) -> list[str]:
    """``fields`` as a list of record parts; a bare string is refused (not read as letters)."""
    fields = name_list(fields, "fields", where)
    bad = [f for f in fields if f not in RECORD_FIELDS]
    if bad:
        raise ValueError(f"{where}: fields {bad} are not record fields (choose from {', '.join(RECORD_FIELDS)})")
    return fields


def deserializer_failed(where: str, deserializer: Any, msg: Any, e: BaseException) -> str:
    """What a failing deserializer broke on: it, the record's topic, partition and offset."""
    name = getattr(deserializer, "__name__", None) or repr(deserializer)
    return (f"{where}: deserializer {name} failed on topic {msg.topic()!r} partition {msg.partition()} "
            f"offset {msg.offset()}: {type(e).__name__}: {e}")


def topic_partitions(client: Any, topics: list[str], servers: str, where: str, ask_all: bool = False) -> dict[str, int]:
    """Each topic's number of partitions, from the broker; ConnectionError naming the servers
    when it cannot be reached, LookupError naming the topics that do not exist. ``ask_all``:
    one request for every topic, naming none, for a producer's or admin client's handle, whose
    request for one missing topic creates it where brokers auto-create topics (a consumer's
    does not)."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        meta = client.list_topics(timeout=METADATA_TIMEOUT_SECS) if ask_all or len(topics) != 1 else \
            client.list_topics(topics[0], timeout=METADATA_TIMEOUT_SECS)
    except KafkaException as e:
        raise ConnectionError(f"{where}: cannot reach the Kafka brokers {servers!r} within "
                              f"{METADATA_TIMEOUT_SECS:.0f}s: {e}") from None
    missing = []
    counts = {}
    for t in topics:
        tm = meta.topics.get(t)
        if tm is None or (tm.error is not None and tm.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART) \
                or not tm.partitions:
            missing.append(t)
        else:
            counts[t] = len(tm.partitions)
    if missing:
        raise LookupError(f"{where}: no topic {', '.join(map(repr, missing))} on the Kafka brokers {servers!r}")
    return counts


class KafkaSpout(Spout):
    """Emit the records of ``topics`` read through consumer group ``group_id``; at-least-once.

    ``fields``: what each tuple carries of a record (key, value, topic, partition, offset,
    timestamp); key and value as UTF-8 text unless ``deserializer(bytes) -> object`` is given.
    ``start``: "earliest" or "latest", where a group without committed offsets starts.
    ``bounded=True`` finishes once every assigned partition was read to its end and acked (tests,
    backfills). ``consumer_conf``: more librdkafka settings (session timeouts, security).
    """

    def __init__(self, topics: list[str], bootstrap_servers: str | None, group_id: str,
                 fields: Any = ("key", "value"), deserializer: Callable[[bytes], Any] | None = None,
                 max_fails: int | None = None, start: str = "earliest", bounded: bool = False,
                 batch_size: int = 500, commit_interval_ms: int = 1000,
                 consumer_conf: dict[str, Any] | None = None) -> None:
        where = f"KafkaSpout({topics!r})"
        self.topics = name_list(topics, "topics", "KafkaSpout")
        self.fields = check_fields(fields, where)
        if start not in ("earliest", "latest"):
            raise ValueError(f"{where}: start must be 'earliest' or 'latest', got {start!r}")
        if max_fails is not None and max_fails < 0:
            raise ValueError(f"{where}: max_fails must be None or >= 0, got {max_fails}")
        if not group_id:
            raise ValueError(f"{where}: group_id is required")
        self.bootstrap_servers, self.group_id = bootstrap_servers, group_id
        self.deserializer, self.max_fails, self.start, self.bounded = deserializer, max_fails, start, bounded
        self.batch_size, self.commit_interval_ms = batch_size, commit_interval_ms
        self.consumer_conf = dict(consumer_conf or {})
        self.outputs = list(self.fields)
        self.dead_lettered = self.revoked = 0
        self._consumer: Any = None

    # --- lifecycle -------------------------------------------------------------------------------
    def open(self, conf: dict, context: TopologyContext) -> None:
        from confluent_kafka import Consumer

        self._where = f"KafkaSpout in component {context.component_id!r}"
        self.bootstrap_servers = bootstrap_servers(conf, self.bootstrap_servers, self._where)
        self._consumer = Consumer({
            "bootstrap.servers": self.bootstrap_servers, "group.id": self.group_id,
            "enable.auto.commit": False, "auto.offset.reset": self.start, "enable.partition.eof": True,
            "client.id": f"{context.topology_id or 'topology'}-{context.component_id}-{context.task_index}",
            **self.consumer_conf, "on_commit": self._on_commit})
        try:
            topic_partitions(self._consumer, self.topics, self.bootstrap_servers, self._where)
        except Exception:
            self._consumer.close()
            raise
        self._offsets = OffsetManager()
        self._records: dict[tuple, list] = {}  # (topic, partition, offset) -> values, until acked
        self._fails: dict[tuple, int] = {}
        self._replay: deque[tuple] = deque()
        self._eof: set[tuple] = set()
        self._assigned: set[tuple] = set()
        self._next_commit = time.monotonic() + self.commit_interval_ms / 1000.0
        self._dead = _DeadLetters(conf, context, self.topics[0])
        self._consumer.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke)

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._dead.flush()  # before the offsets move past what it holds
                self._commit(sync=True)
            finally:
                self._consumer.close()
                self._consumer = None

    # --- rebalances (called by librdkafka inside consume, on this thread) ------------------------
    def _on_assign(self, consumer: Any, partitions: list) -> None:
        self._assigned |= {(p.topic, p.partition) for p in partitions}
        log.info("%s: assigned %s", self._where, sorted(self._assigned))

    def _on_revoke(self, consumer: Any, partitions: list) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        self._commit(sync=True, only=tps)  # as far as it was acked: the new owner replays the rest
        for tp in tps:
            self._offsets.revoke(tp)
        self._records = {k: v for k, v in self._records.items() if k[:2] not in tps}
        self._replay = deque(k for k in self._replay if k[:2] not in tps)
        self._assigned -= tps
        self._eof -= tps
        self.revoked += len(tps)
        log.info("%s: revoked %s", self._where, sorted(tps))

    # --- emitting --------------------------------------------------------------------------------
    def next_tuple(self) -> None:
        if self._replay:
            for _ in range(min(len(self._replay), self.batch_size)):
                key = self._replay.popleft()
                values = self._records.get(key)
                if values is not None:
                    self.emit(values, msg_id=key)
            return
        from confluent_kafka import KafkaError

        for msg in self._consumer.consume(self.batch_size, timeout=0.05):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._eof.add((msg.topic(), msg.partition()))
                    continue
                raise ConnectionError(f"{self._where}: {err}")
            key = (msg.topic(), msg.partition(), msg.offset())
            self._eof.discard(key[:2])
            try:
                values = self._values(msg)
            except Exception as e:  # noqa: BLE001 - the deserializer is the user's
                self.fail_run(deserializer_failed(self._where, self.deserializer, msg, e))
                raise
            self._offsets.emitted(key[:2], key[2])
            self._records[key] = values
            self.emit(values, msg_id=key)
        self._maybe_commit()
        if self.bounded and self._assigned and self._eof >= self._assigned and not self._records:
            self._dead.flush()
            self._commit(sync=True)
            self.finish()

    def _values(self, msg: Any) -> list:
        out = []
        for f in self.fields:
            if f in ("key", "value"):
                raw = msg.key() if f == "key" else msg.value()
                out.append(_text(raw) if self.deserializer is None else
                           (None if raw is None else self.deserializer(raw)))
            elif f == "timestamp":
                out.append(msg.timestamp()[1])
            else:
                out.append(getattr(msg, f)())
        return out

    # --- outcomes --------------------------------------------------------------------------------
    def ack(self, msg_id: Any) -> None:
        key = tuple(msg_id)
        if self._records.pop(key, None) is not None:
            self._fails.pop(key, None)
            self._offsets.acked(key[:2], key[2])

    def fail(self, msg_id: Any) -> None:
        key = tuple(msg_id)
        values = self._records.get(key)
        if values is None:
            return  # acked already, or its partition was revoked: its new owner replays it
        n = self._fails[key] = self._fails.get(key, 0) + 1
        if self.max_fails is not None and n > self.max_fails:
            self._dead.add({"topic": key[0], "partition": key[1], "offset": key[2], "fields": self.fields,
                            "values": values, "fails": n, "reason": f"failed {n} times",
                            "component": self._dead.component})
            self.dead_lettered += 1
            self.ack(msg_id)  # given up: the partition's offsets move past it
            return
        self._replay.append(key)

    def _maybe_commit(self) -> None:
        now = time.monotonic()
        if now >= self._next_commit:
            self._next_commit = now + self.commit_interval_ms / 1000.0
            self._dead.flush()
            self._commit(sync=False)

    def _commit(self, sync: bool, only: set | None = None) -> None:
        """Commit what is acked. Asynchronous: done when ``_on_commit`` confirms it, sent again
        at the next commit if it failed. Synchronous (revoke, close): also what was sent and not
        confirmed, since no callback will come for it any more."""
        from confluent_kafka import KafkaException, TopicPartition

        points = self._offsets.to_commit(resend=sync)
        if only is not None:
            points = {tp: o for tp, o in points.items() if tp in only}
        if not points or self._consumer is None:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in points.items()]
        if not sync:
            self._offsets.sent(points)
        try:
            result = self._consumer.commit(offsets=offsets, asynchronous=not sync)
        except KafkaException as e:  # sent again by the next commit; a crash replays from the last one
            log.warning("%s: commit of %s failed: %s", self._where, points, e)
            self._offsets.commit_failed(points)
            return
        if sync:
            self._confirmed(None, result or [])

    def _on_commit(self, err: Any, partitions: list) -> None:
        """librdkafka's answer to an asynchronous commit (served inside ``consume``)."""
        self._confirmed(err, partitions)

    def _confirmed(self, err: Any, partitions: list) -> None:
        done: dict[TopicPartitionKey, int] = {}
        failed: dict[TopicPartitionKey, int] = {}
        for tp in partitions:
            bad = err is not None or tp.error is not None
            (failed if bad else done)[(tp.topic, tp.partition)] = tp.offset
        self._offsets.committed(done)
        if failed:
            log.warning("%s: commit of %s failed: %s", self._where, failed,
                        err or next(tp.error for tp in partitions if tp.error is not None))
            self._offsets.commit_failed(failed)


class _DeadLetters:
    """Where a Kafka spout's given-up records go: the run's Redis, in a list beside the topic's
    name (``kafka:TOPIC:dead``), registered for ``topology dead-letters``; logged when the run
    has no Redis."""

    def __init__(self, conf: dict, context: TopologyContext, topic: str) -> None:
        self.component = context.component_id
        self.pending: list[str] = []
        self.client: Any = None
        self.key = ""
        url = conf.get("topology.state.redis.url") or conf.get("redis.url")
        if url:
            from state.connection import connect
            from state.layout import dead_letter_list

            from .dead_letters import register

            self.client = connect(url, socket_connect_timeout=10, socket_timeout=60)
            self.key = dead_letter_list(f"kafka:{topic}")
            if context.topology_id:
                register(self.client, context.topology_id, context.component_id, f"kafka:{topic}", self.key,
                         "KafkaSpout")

    def add(self, entry: dict) -> None:
        if self.client is None:
            log.error("%s: gave up on %s (no Redis for dead letters: dropped)", self.component, entry)
            return
        self.pending.append(json.dumps(entry, default=str))

    def flush(self) -> None:
        if self.pending and self.client is not None:
            self.client.rpush(self.key, *self.pending)
            self.pending = []


class KafkaBolt(Bolt):
    """Produce each tuple to ``topic`` (``key_field`` and ``value_field``: text as UTF-8, or
    ``serializer(obj) -> bytes``) and ack it only once the broker confirmed the delivery; a
    failed delivery fails it (its spout replays it). Deliveries are awaited off the loop."""

    outputs: list[str] = []

    def __init__(self, topic: str, bootstrap_servers: str | None, key_field: str | None = "key", value_field: str = "value",
                 serializer: Callable[[Any], bytes] | None = None, producer_conf: dict[str, Any] | None = None) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"KafkaBolt: topic must be a non-empty string, got {topic!r}")
        self.topic, self.bootstrap_servers = topic, bootstrap_servers
        self.key_field, self.value_field, self.serializer = key_field, value_field, serializer
        self.producer_conf = dict(producer_conf or {})
        self._producer: Any = None

    def prepare(self, conf: dict, context: TopologyContext) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        self._where = f"KafkaBolt in component {context.component_id!r}"
        self.bootstrap_servers = bootstrap_servers(conf, self.bootstrap_servers, self._where)
        # Asked by an admin client, for every topic: a producer's metadata request for the topic
        # would create it where brokers auto-create topics, and the bolt would write to a new one.
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, **self.producer_conf})
        topic_partitions(admin, [self.topic], self.bootstrap_servers, self._where, ask_all=True)
        self._producer = Producer({"bootstrap.servers": self.bootstrap_servers, "enable.idempotence": True,
                                   "linger.ms": 5, **self.producer_conf})
        self._done: deque[tuple[Tuple, Any]] = deque()  # delivery reports, from the waiting thread
        self._waiting = False

    def _bytes(self, v: Any) -> bytes | None:
        if v is None:
            return None
        if self.serializer is not None:
            return self.serializer(v)
        return v if isinstance(v, bytes) else str(v).encode("utf-8")

    def execute(self, tup: Tuple) -> None:
        key = self._bytes(tup[self.key_field]) if self.key_field else None
        value = self._bytes(tup[self.value_field])
        done = self._done

        def delivered(err: Any, msg: Any, tup: Tuple = tup) -> None:
            done.append((tup, err))  # runs on the waiting thread: acks happen back on the loop
        try:
            self._producer.produce(self.topic, value=value, key=key, on_delivery=delivered)
        except BufferError:  # librdkafka's queue is full: wait for some deliveries, then again
            self._producer.poll(1.0)
            self._producer.produce(self.topic, value=value, key=key, on_delivery=delivered)
        if not self._waiting:
            self._waiting = True
            self.run_off_loop(self._await, self._delivered)

    def _await(self) -> None:
        deadline = time.monotonic() + 0.2
        while len(self._producer) and time.monotonic() < deadline:
            self._producer.poll(0.02)

    def _delivered(self, _result: Any, error: BaseException | None) -> None:
        self._waiting = False
        while self._done:
            tup, err = self._done.popleft()
            if err is None:
                self.ack(tup)
            else:
                log.warning("%s: delivery to %r failed: %s", self._where, self.topic, err)
                self.fail(tup)
        if error is not None:
            raise error
        if len(self._producer):  # more in flight: go on waiting
            self._waiting = True
            self.run_off_loop(self._await, self._delivered)

    def cleanup(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
