"""The emitter role: one task's part of each batch, read from the transactional spout's
partitions it owns and recorded in the TransactionalState so a replay emits the same batch
(partitioned spouts) or continues from what was committed (opaque spouts).

The coordinated wrapper of the spout's component delegates each batch tuple here; it owns the
chunking and the coordination counts, this class the spout, the partitions and the records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from state.replication import Replication
from state.transactional import TransactionalState

from ..api.config import fencing_token, state_redis_url, state_replication
from ..reliability.transactional import TransactionAttempt, opaque_last_meta
from .spouts import is_generic, is_opaque, open_spout

NEEDS_REDIS = "a transactional topology (txids and batch metadata)"


def open_state(conf: dict, context: Any, tx_id: str | None) -> TransactionalState:
    """The records of this topology's transactional id (``tx_id``, else the
    ``topology.transactional.id`` config, else the topology id), in the run's Redis."""
    tx_id = tx_id or conf.get("topology.transactional.id") or context.topology_id
    return TransactionalState.from_url(state_redis_url(conf, needed_for=NEEDS_REDIS), tx_id,
                                       Replication(*state_replication(conf)), fencing_token(conf),
                                       conf.get("topology.airflow.asset"))


class TransactionalEmitter:
    """Emits batches of ``spout`` for ``partitions`` (this task's: p mod tasks), recording
    their metadata in ``state`` before the batch tuple is acked (Storm's order)."""

    def __init__(self, spout: Any, state: TransactionalState, partitions: list[int]) -> None:
        self.spout = spout
        self.state = state
        self.partitions = partitions
        self.opaque = is_opaque(spout)
        self.generic = is_generic(spout)

    @classmethod
    def open(cls, spout: Any, conf: dict, context: Any, tx_id: str | None) -> TransactionalEmitter:
        state = open_state(conf, context, tx_id)
        if is_generic(spout):  # no partitions: the metadata arrives with the batch tuple
            spout.open(conf, context)
            return cls(spout, state, [])
        open_spout(spout, conf, context)
        n = spout.num_partitions()
        return cls(spout, state, [p for p in range(n) if p % context.parallelism == context.task_index])

    def emit_batch(self, attempt: TransactionAttempt, committed: int | None,
                   emit_row: Callable[[list], Any], meta: Any = None) -> None:
        """This task's part of batch ``attempt``; ``committed`` is the last committed txid and
        ``meta`` a generic spout's metadata (both from the batch tuple). ``emit_row`` goes
        straight to the spout: it runs once per row."""
        if self.generic:
            self.spout.emit_batch(attempt, meta, emit_row)  # the coordinator recorded meta already
        elif self.opaque:
            self._emit_opaque_batch(attempt, emit_row)
        else:
            self._emit_partitioned_batch(attempt, committed, emit_row)

    def _emit_partitioned_batch(self, attempt: TransactionAttempt, committed: int | None, emit_row) -> None:
        spout = self.spout
        cur, parts = self.state.read_batch(attempt.txid, self.partitions)  # one round trip for all partitions
        if cur is not None and attempt.txid < cur:
            return  # a late tuple of a committed batch: its metadata is gone, emitting anew would skip data
        new: dict[int, Any] = {}
        for p, (recorded, meta) in zip(self.partitions, parts):
            if recorded:  # a replay: exactly the same batch
                spout.emit_partition_batch(attempt, emit_row, p, meta)
                continue
            new[p] = spout.emit_partition_batch_new(attempt, emit_row, p, meta)
        # Recorded before the batch tuple is acked, so a replay finds it (Storm's order). If a
        # partition raised above, nothing new is recorded: the failed attempt's tuples are
        # dropped, and its replay starts each partition from the same last metadata.
        self.state.record_batch(attempt.txid, new, committed)

    def _emit_opaque_batch(self, attempt: TransactionAttempt, emit_row) -> None:
        """Each owned partition continues after the previous batch (opaque_last_meta); what this
        attempt read is recorded per attempt, and the coordinator commits it with the txid."""
        if not self.partitions:
            return
        t = attempt.txid
        # one consistent snapshot with the coordinator's commits
        current, committed, prev = self.state.read_opaque_batch(t, self.partitions)
        if t < current:
            return  # a late tuple of a batch that committed already: nothing to emit or record
        entries = {}
        for p, c, pr in zip(self.partitions, committed, prev):
            last, base = opaque_last_meta(t, current, c, pr)
            meta = self.spout.emit_partition_batch(attempt, emit_row, p, last)
            entries[p] = [attempt.attempt_id, meta, base]
        self.state.record_opaque_batch(t, entries)
