"""Transactional spouts over Redis Streams: one stream key per partition.

Batch metadata per partition is ``[first_id, last_id, count]``: the entry id range the batch
read (``first_id`` None and ``count`` 0 for an empty batch, whose ``last_id`` is where the
previous batch ended, None at the stream's start). Entry values are UTF-8 decoded strings, never
unpickled: they come from the network.

* ``RedisStreamsTransactionalSpout``: a replay reads exactly its recorded range (``XRANGE first
  last``), so replays are identical; use ``TransactionalValue``. Trimming entries that a batch
  still in flight covers makes an identical replay impossible: the replay then fails.
* ``RedisStreamsOpaqueTransactionalSpout``: every attempt reads up to ``max_entries`` entries after
  the partition's last committed id, so a replay may see more (or, with the partition
  unreadable, fewer) entries; use ``OpaqueValue``. An unreadable partition emits nothing for that
  batch and is read again by the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import redis

from state.connection import connect

from ..api.config import redis_url
from ..api.names import name_list
from ..transactional.spouts import OpaquePartitionedTransactionalSpout, PartitionedTransactionalSpout

log = logging.getLogger(__name__)


def _s(x: bytes | str) -> str:
    return x.decode() if isinstance(x, bytes) else x


class _StreamPartitions:
    def __init__(self, streams: Sequence[str], fields: Sequence[str], url: str | None = None,
                 max_entries: int = 500, stop_when_drained: bool = False) -> None:
        streams = name_list(streams, "streams (the stream keys, one per partition)", type(self).__name__)
        fields = name_list(fields, "fields", type(self).__name__)
        if max_entries < 1:
            raise ValueError(f"{type(self).__name__}: max_entries must be >= 1, got {max_entries}")
        self.streams = list(streams)
        self.fields = list(fields)
        self.url = url
        self.max_entries = int(max_entries)
        self.stop_when_drained = stop_when_drained
        self.redis: redis.Redis | None = None

    def open(self, conf: dict) -> None:
        url = redis_url(conf, self.url, needed_for=f"{type(self).__name__}({list(self.streams)!r})")
        self.redis = connect(url, socket_connect_timeout=10, socket_timeout=60)

    def num_partitions(self) -> int:
        return len(self.streams)

    def is_ready(self) -> bool:
        return True

    def _read(self, partition: int, after_id: str | None, count: int) -> list:
        """Up to ``count`` entries of the partition after ``after_id`` (a hook for tests)."""
        return self.redis.xrange(self.streams[partition], "-" if after_id is None else f"({after_id}", "+",
                                 count=count)

    def _row(self, fields: dict) -> list:
        out = []
        for f in self.fields:
            v = fields.get(f.encode())
            out.append(None if v is None else v.decode("utf-8", errors="replace"))
        return out

    def _emit_entries(self, entries: list, emit: Callable[[list], None], after_id: str | None) -> list:
        for _, fields in entries:
            emit(self._row(fields))
        if not entries:
            return [None, after_id, 0]
        return [_s(entries[0][0]), _s(entries[-1][0]), len(entries)]

    def exhausted(self, metas: dict) -> bool:
        """Bounded runs only (``stop_when_drained``): True when no stream has an entry after its meta."""
        if not self.stop_when_drained:
            return False
        pipe = self.redis.pipeline(transaction=False)
        for p, stream in enumerate(self.streams):
            meta = metas.get(p)
            after = meta[1] if meta else None
            pipe.xrange(stream, "-" if after is None else f"({after}", "+", count=1)
        return not any(pipe.execute())


class RedisStreamsTransactionalSpout(_StreamPartitions, PartitionedTransactionalSpout):
    """Partitioned, identical replays: ``RedisStreamsTransactionalSpout(streams, fields, url=None,
    max_entries=500, stop_when_drained=False)``; a batch takes up to ``max_entries`` entries of
    every stream."""

    def emit_partition_batch_new(self, tx, emit, partition, last_meta):
        after = last_meta[1] if last_meta else None
        return self._emit_entries(self._read(partition, after, self.max_entries), emit, after)

    def emit_partition_batch(self, tx, emit, partition, meta):
        first, last, n = meta
        if not n:
            return
        entries = self.redis.xrange(self.streams[partition], first, last)
        if len(entries) != n:
            raise RuntimeError(f"stream {self.streams[partition]!r}: batch {tx} covered {n} entries {first}..{last}, "
                               f"{len(entries)} remain (trimmed?): it cannot be replayed identically; "
                               "use RedisStreamsOpaqueTransactionalSpout for streams that are trimmed")
        for _, fields in entries:
            emit(self._row(fields))


class RedisStreamsOpaqueTransactionalSpout(_StreamPartitions, OpaquePartitionedTransactionalSpout):
    """Opaque: ``RedisStreamsOpaqueTransactionalSpout(streams, fields, url=None, max_entries=500,
    stop_when_drained=False)``; every attempt reads up to ``max_entries`` entries after the
    partition's previous batch, so a replay may differ."""

    def emit_partition_batch(self, tx, emit, partition, last_meta):
        after = last_meta[1] if last_meta else None
        try:
            entries = self._read(partition, after, self.max_entries)
        except (redis.RedisError, OSError) as e:
            # Opaque: the batch goes on without this partition; the next batch reads its data.
            log.warning("stream %r unreadable for batch %s: %s", self.streams[partition], tx, e)
            return last_meta
        return self._emit_entries(entries, emit, after)


__all__ = ["RedisStreamsOpaqueTransactionalSpout", "RedisStreamsTransactionalSpout"]
