"""Transactional spout contracts (partitioned: identical replays; opaque: replays may differ)
and the in-memory one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class PartitionedTransactionalSpout:
    """A spout whose batches are per-partition slices that replay identically.

    ``num_partitions()``; ``emit_partition_batch_new(tx, emit, partition, last_meta) -> meta``
    emits a new batch and returns its metadata; ``emit_partition_batch(tx, emit, partition, meta)``
    re-emits exactly that batch. ``is_ready()`` says whether new data may be available.
    """

    fields: list[str] = []

    def open(self, conf: dict) -> None:
        pass

    def num_partitions(self) -> int:
        raise NotImplementedError

    def is_ready(self) -> bool:
        return True

    def exhausted(self, metas: dict) -> bool:
        """True when no partition has anything after ``metas`` (a bounded spout's end)."""
        return False

    def emit_partition_batch_new(self, tx, emit: Callable[[list], None], partition: int, last_meta: Any) -> Any:
        raise NotImplementedError

    def emit_partition_batch(self, tx, emit: Callable[[list], None], partition: int, meta: Any) -> None:
        raise NotImplementedError


TransactionalSpout = PartitionedTransactionalSpout


class OpaquePartitionedTransactionalSpout:
    """A partitioned spout whose batches may differ on replay (Storm's
    IOpaquePartitionedTransactionalSpout); pair it with ``OpaqueValue`` state.

    ``emit_partition_batch(tx, emit, partition, last_meta) -> meta`` emits the partition's part of
    batch ``tx`` starting right after ``last_meta`` (the metadata of the previous batch of this
    partition: the last committed one, or the previous txid's still in flight; None at the start)
    and returns where it ended. The runtime records the metadata per attempt and makes it the
    partition's committed metadata only when that attempt commits. A partition that cannot be read
    now should emit nothing and return ``last_meta``: the batch still succeeds and the data goes
    into a later batch. Metadata must be JSON-serialisable. ``exhausted(metas)`` (metas: partition
    -> last metadata) is True when nothing remains after them: a bounded spout's end.
    """

    fields: list[str] = []

    def open(self, conf: dict) -> None:
        pass

    def num_partitions(self) -> int:
        raise NotImplementedError

    def is_ready(self) -> bool:
        return True

    def exhausted(self, metas: dict) -> bool:
        return False

    def emit_partition_batch(self, tx, emit: Callable[[list], None], partition: int, last_meta: Any) -> Any:
        raise NotImplementedError


def is_opaque(spout: Any) -> bool:
    return isinstance(spout, OpaquePartitionedTransactionalSpout)


class MemoryTransactionalSpout(PartitionedTransactionalSpout):
    """``data`` maps a partition number to a list of tuples; each batch takes up to
    ``take_per_batch`` tuples of every partition. Exhausted once every partition is consumed."""

    def __init__(self, data: dict[int, list[list]], fields: list[str], take_per_batch: int) -> None:
        self.data = {int(p): [list(r) for r in rows] for p, rows in data.items()}
        self.fields = list(fields)
        self.take = int(take_per_batch)

    def num_partitions(self) -> int:
        return len(self.data)

    def _next_start(self, last_meta) -> int:
        return 0 if last_meta is None else last_meta[0] + last_meta[1]

    def is_ready(self) -> bool:
        return True

    def exhausted(self, metas: dict) -> bool:
        return all(self._next_start(metas.get(p)) >= len(rows) for p, rows in self.data.items())

    def emit_partition_batch_new(self, tx, emit, partition, last_meta):
        start = self._next_start(last_meta)
        rows = self.data[partition][start:start + self.take]
        for r in rows:
            emit(r)
        return [start, len(rows)]

    def emit_partition_batch(self, tx, emit, partition, meta):
        start, n = meta
        for r in self.data[partition][start:start + n]:
            emit(r)
