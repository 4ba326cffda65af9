"""Partitioned transactional spouts over Kafka: each partition of the topics (in topic order,
then partition number) is one spout partition, and a batch's metadata per partition is the
offset range it read, ``[first, next, count]`` (``first`` None and ``count`` 0 for an empty
batch, whose ``next`` is where the previous one ended). The coordinator keeps it in its Redis
records; the consumer group is never used, so nothing depends on the broker's commits.

* ``KafkaTransactionalSpout``: a replay re-reads exactly its recorded range, so replays are
  identical (use ``TransactionalValue``); a range no longer in the topic (retention) cannot be
  replayed and fails the batch, saying so.
* ``KafkaOpaqueTransactionalSpout``: every attempt reads up to ``max_records`` records after the
  partition's previous batch, so a replay may differ (use ``OpaqueValue``); an unreachable
  partition emits nothing for that batch and is read again by the next one.

Reads go by ``assign`` and ``seek`` to explicit offsets and end at the partition's end (partition
EOF), never by watermarks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..api.names import name_list
from ..transactional.spouts import (
    BatchCannotSucceed,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
)
from .kafka import bootstrap_servers, check_fields, deserializer_failed, topic_partitions

log = logging.getLogger(__name__)

READ_TIMEOUT_SECS = 10.0  # a partition that neither delivers nor reaches its end in this long fails the read


class _KafkaPartitions:
    def __init__(self, topics: list[str], bootstrap_servers: str | None, fields: Any = ("key", "value"),
                 deserializer: Callable[[bytes], Any] | None = None, start: str = "earliest",
                 max_records: int = 500, stop_when_drained: bool = False,
                 consumer_conf: dict[str, Any] | None = None) -> None:
        where = f"{type(self).__name__}({topics!r})"
        self.topics = name_list(topics, "topics", type(self).__name__)
        self.fields = check_fields(fields, where)
        if start not in ("earliest", "latest"):
            raise ValueError(f"{where}: start must be 'earliest' or 'latest', got {start!r}")
        if max_records < 1:
            raise ValueError(f"{where}: max_records must be >= 1, got {max_records}")
        self.bootstrap_servers, self.deserializer, self.start = bootstrap_servers, deserializer, start
        self.max_records, self.stop_when_drained = int(max_records), stop_when_drained
        self.consumer_conf = dict(consumer_conf or {})
        self._consumer: Any = None
        self._partitions: list[tuple[str, int]] = []
        self._where = where

    def open(self, conf: dict, context: Any = None) -> None:
        from confluent_kafka import Consumer

        if context is not None:
            self._where = f"{type(self).__name__} in component {context.component_id!r}"
        where = self._where
        self.bootstrap_servers = bootstrap_servers(conf, self.bootstrap_servers, where)
        # Each read is a seek and a fetch to the partition's end: a broker that holds an
        # unfilled fetch for its default 500 ms would cost that per partition per batch.
        self._consumer = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "topology-transactional",
                                   "enable.auto.commit": False, "enable.partition.eof": True,
                                   "auto.offset.reset": self.start, "fetch.wait.max.ms": 10, **self.consumer_conf})
        counts = topic_partitions(self._consumer, self.topics, self.bootstrap_servers, where)
        self._partitions = [(t, p) for t in self.topics for p in range(counts[t])]

    def num_partitions(self) -> int:
        return len(self._partitions)

    def is_ready(self) -> bool:
        return True

    def _start(self, after: int | None) -> int:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

        if after is not None:
            return after
        return OFFSET_BEGINNING if self.start == "earliest" else OFFSET_END

    def _read(self, partition: int, offset: int, limit: int) -> list:
        """Up to ``limit`` records of ``partition`` from ``offset``, stopping at its end."""
        from confluent_kafka import KafkaError, TopicPartition

        topic, p = self._partitions[partition]
        self._consumer.assign([TopicPartition(topic, p, offset)])
        out: list = []
        deadline = time.monotonic() + READ_TIMEOUT_SECS
        while len(out) < limit:
            msgs = self._consumer.consume(min(500, limit - len(out)), timeout=0.2)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    raise ConnectionError(f"{self._where}: topic {topic!r} partition {p}: {err}")
                out.append(m)
            if not msgs and time.monotonic() > deadline:
                raise TimeoutError(f"{self._where}: topic {topic!r} partition {p} at offset {offset}: "
                                   f"no records and no end of partition within {READ_TIMEOUT_SECS:.0f}s")
        return out

    def _row(self, m: Any) -> list:
        out: list = []
        for f in self.fields:
            if f in ("key", "value"):
                raw = m.key() if f == "key" else m.value()
                if raw is None:
                    out.append(None)
                elif self.deserializer is None:
                    out.append(raw.decode("utf-8"))
                else:
                    try:
                        out.append(self.deserializer(raw))
                    except Exception as e:  # noqa: BLE001 - the deserializer is the user's
                        raise BatchCannotSucceed(deserializer_failed(self._where, self.deserializer, m, e)) from e
            elif f == "timestamp":
                out.append(m.timestamp()[1])
            else:
                out.append(getattr(m, f)())
        return out

    def _emit_records(self, records: list, emit: Callable[[list], None], after: int | None) -> list:
        for m in records:
            emit(self._row(m))
        if not records:
            return [None, after, 0]
        return [records[0].offset(), records[-1].offset() + 1, len(records)]

    def exhausted(self, metas: dict) -> bool:
        """Bounded runs only (``stop_when_drained``): True when no partition has a record after
        its meta."""
        if not self.stop_when_drained:
            return False
        for partition in range(len(self._partitions)):
            meta = metas.get(partition)
            if self._read(partition, self._start(meta[1] if meta else None), 1):
                return False
        return True

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class KafkaTransactionalSpout(_KafkaPartitions, PartitionedTransactionalSpout):
    """Partitioned, identical replays: ``KafkaTransactionalSpout(topics, bootstrap_servers,
    fields=("key", "value"), deserializer=None, start="earliest", max_records=500,
    stop_when_drained=False)``; a batch takes up to ``max_records`` records of every partition."""

    def emit_partition_batch_new(self, tx, emit, partition, last_meta):
        after = last_meta[1] if last_meta else None
        return self._emit_records(self._read(partition, self._start(after), self.max_records), emit, after)

    def emit_partition_batch(self, tx, emit, partition, meta):
        first, nxt, n = meta
        if not n:
            return
        records = self._read(partition, first, n)
        if len(records) != n or records[0].offset() != first or records[-1].offset() + 1 != nxt:
            topic, p = self._partitions[partition]
            raise RuntimeError(f"topic {topic!r} partition {p}: batch {tx} covered offsets {first}..{nxt - 1} "
                               f"({n} records), {len(records)} remain: it cannot be replayed identically (retention?); "
                               "use KafkaOpaqueTransactionalSpout for topics whose records may expire first")
        for m in records:
            emit(self._row(m))


class KafkaOpaqueTransactionalSpout(_KafkaPartitions, OpaquePartitionedTransactionalSpout):
    """Opaque: the same arguments; every attempt reads up to ``max_records`` records after the
    partition's previous batch, so a replay may differ."""

    def emit_partition_batch(self, tx, emit, partition, last_meta):
        after = last_meta[1] if last_meta else None
        try:
            records = self._read(partition, self._start(after), self.max_records)
        except (ConnectionError, TimeoutError) as e:
            # Opaque: the batch goes on without this partition; the next batch reads its data.
            log.warning("%s for batch %s: %s", self._where, tx, e)
            return last_meta
        return self._emit_records(records, emit, after)


__all__ = ["KafkaOpaqueTransactionalSpout", "KafkaTransactionalSpout"]
