"""Transactional spout contracts (generic: a coordinator makes each batch's metadata;
partitioned: identical replays per partition; opaque: replays may differ) and the in-memory one."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..api.names import name_list


class BatchCannotSucceed(Exception):
    """Raised by a transactional spout or bolt when no attempt of the batch can succeed (a
    record its deserializer cannot read): the run fails at once with the message, instead of
    after ``topology.transactional.max.attempts`` attempts with back-off."""


def open_spout(spout: Any, conf: dict, context: Any) -> None:
    """A partitioned spout's ``open(conf)``, or ``open(conf, context)`` when it takes a second
    argument (to name its component in its errors)."""
    import inspect

    try:
        takes_context = len(inspect.signature(spout.open).parameters) >= 2
    except (TypeError, ValueError):
        takes_context = False
    if takes_context:
        spout.open(conf, context)
    else:
        spout.open(conf)


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


class TransactionalSpout:
    """Storm's ITransactionalSpout: a coordinator part and an emitter part.

    Coordinator (one task, ``coord-<spout id>``): ``initialize_transaction(txid, prev_meta,
    tx_state) -> meta`` describes batch ``txid`` (e.g. ``[start, count]``), given the previous
    batch's metadata (None for the first). The runtime stores ``meta`` in Redis under the txid
    (JSON: lists, dicts, str, numbers, None) before the batch is emitted, and every attempt of
    that txid, also after a worker or driver restart, gets exactly that metadata; it is called
    once per txid. ``tx_state`` is the spout's own small store in Redis (``get(key, default)``,
    ``put(key, value)``, JSON values), written together with ``meta``.

    Emitter (every task of the spout's component, all-grouped on the batch stream):
    ``emit_batch(tx, meta, emit)`` emits this task's part of the batch, the same rows for the
    same ``meta`` every time; ``emit(values)`` takes the values of ``fields`` (the attempt is
    put in front). ``open(conf, context)`` runs on each: ``context.task_index`` and
    ``context.parallelism`` split the batch between emitter tasks.

    ``is_ready()``: new data may be available (False: no new txid starts; replays still do).
    ``exhausted(meta)``: nothing remains after the newest batch's ``meta`` (None before the
    first): a bounded spout's end, the run completes once everything is committed.
    """

    fields: list[str] = []

    def open(self, conf: dict, context: Any) -> None:
        pass

    def is_ready(self) -> bool:
        return True

    def exhausted(self, meta: Any) -> bool:
        return False

    def initialize_transaction(self, txid: int, prev_meta: Any, tx_state: Any) -> Any:
        raise NotImplementedError

    def emit_batch(self, tx, meta: Any, emit: Callable[[list], Any]) -> None:
        raise NotImplementedError


def is_generic(spout: Any) -> bool:
    return isinstance(spout, TransactionalSpout)


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
    """``data`` maps a partition number to a list of rows (lists, or tuples: kept without a copy,
    cheaper for a large data set); each batch takes up to ``take_per_batch`` rows of every
    partition. Exhausted once every partition is consumed."""

    def __init__(self, data: Mapping[int, Sequence[Sequence[Any]]], fields: list[str], take_per_batch: int) -> None:
        # The caller's later edits must not change a batch or its replay: a list row is copied, a
        # tuple row (immutable) kept as it is. A million list copies cost ~0.8 s here, most of it
        # collections over the new lists, inside a run's start-up; tuples cost nothing.
        self.data = {int(p): [r if type(r) is tuple else list(r) for r in rows] for p, rows in data.items()}
        self.fields = name_list(fields, "fields", type(self).__name__)
        self.take = int(take_per_batch)

    def __deepcopy__(self, memo: dict) -> MemoryTransactionalSpout:
        # Each task gets a copy of its template: the rows are read-only once the constructor
        # copied them, so the copies share them (copying a million rows per emitter and
        # coordinator task cost seconds of start-up each).
        new = copy.copy(self)
        new.fields = list(self.fields)
        return new

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
