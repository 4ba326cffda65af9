"""Storm's coordinator spout (TransactionalSpoutCoordinator on the plain runtime): one task
that starts batches and commits as acker-tracked tuples, driving the I/O-free
TransactionalCoordinator, and keeps the current txid (and, for opaque spouts, the committed
metadata) in the TransactionalState so a restart resumes where the last commit left off.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..api.components import Spout
from ..reliability.transactional import (
    BATCH,
    COMMITTING,
    PROCESSING,
    TransactionalCoordinator,
    TransactionAttempt,
    opaque_commit,
)
from ..testing.faults import maybe_crash
from .coordinated_bolt import BATCH_STREAM, COMMIT_STREAM, attempt_of, wire
from .emitter import open_state
from .progress import TxProgress
from .spouts import is_opaque

log = logging.getLogger(__name__)


class CoordinatorSpout(Spout):
    """One task. Batches and commits are tuples tracked by the acker (msg id = the attempt)."""

    outputs = {BATCH_STREAM: ["tx", "committed"], COMMIT_STREAM: ["tx"]}
    # Commits are strictly serial, so their latency is the pipeline's period: a commit tuple
    # goes ahead of queued batch data at the committer (one commit is in flight at a time).
    priority_streams = (COMMIT_STREAM,)

    def __init__(self, spout: Any, tx_id: str | None) -> None:
        self.spout = spout
        self.tx_id = tx_id

    def open(self, conf, context):
        self.state = open_state(conf, context, self.tx_id)
        self.tx_id = self.state.tx_id
        cur = self.state.current_txid()
        self.spout.open(conf)
        self.opaque = is_opaque(self.spout)
        self.n_partitions = self.spout.num_partitions() if self.opaque else 0  # for opaque commits
        current = cur if cur is not None else 1
        # Deletes the per-txid metadata a previous run left behind (a crash between writing and
        # deleting). The uncommitted txids whose batches an emitter recorded (partitioned spouts)
        # come back: their data is already in last-meta, so they must replay before a drained
        # stream may end the run.
        recorded = self.state.cleanup(current)
        self.machine = TransactionalCoordinator(
            max_active=int(conf.get("topology.max.spout.pending") or 1),
            current_txid=current,
            is_ready=self._ready,
        )
        if not self.opaque:  # opaque replays read anew from the committed metadata instead
            self.machine.restore_recorded(recorded)
        self.done = False
        self._checked = float("-inf")
        self._is_exhausted = False
        every = conf.get("topology.transactional.progress.secs", 10.0)
        self.progress = TxProgress(self.tx_id, float(every) if every else None, time.monotonic(),
                                   pending=self.machine.max_active)

    def _latest_metas(self) -> dict:
        """Per partition, where the newest batch ends: committed metadata (opaque) or the last
        batch recorded (partitioned), then, for opaque spouts, the batches in flight."""
        if not self.opaque:
            return self.state.last_metas()
        txids = sorted(self.machine.active)
        committed, inflight = self.state.opaque_metas(txids)  # one round trip
        metas = {p: e[2] for p, e in committed.items()}
        for t, entries in zip(txids, inflight):
            a = self.machine.active[t].attempt
            for p, e in entries.items():
                if int(e[0]) == a.attempt_id:  # only the current attempt: older ones are replayed
                    metas[p] = e[1]
        return metas

    def _exhausted(self) -> bool:
        # Cached between acks (not one read per sync), but re-read after every ack or fail: that
        # is when batch metadata changed, so a bounded run does not start empty batches at its end.
        now = time.monotonic()
        if now - self._checked >= 0.1:
            self._checked = now
            self._is_exhausted = self.spout.exhausted(self._latest_metas())
        return self._is_exhausted

    def _commit_opaque(self, a: TransactionAttempt) -> bool:
        """Atomically: this attempt's metadata becomes each partition's committed metadata, and
        the current txid moves on, in one MULTI (TransactionalState.commit_opaque), so a SIGKILL
        anywhere leaves either both committed or neither (then the batch replays from the old
        metadata). ``opaque_commit`` decides on what that MULTI watched."""
        partitions = range(self.n_partitions)
        return self.state.commit_opaque(
            a.txid, lambda entries, committed: opaque_commit(a, entries, committed, partitions))

    def _ready(self) -> bool:
        return not self.done and self.spout.is_ready() and not self._exhausted()

    def _emit(self, out: list) -> None:
        now = time.monotonic() if out else 0.0
        for e in out:
            if e[0] == BATCH:
                self.progress.batch_started(e[1].txid, now)
                self.emit([wire(e[1]), self.machine.current_txid - 1], msg_id=wire(e[1]), stream=BATCH_STREAM)
            else:
                self.progress.commit_started(e[1].txid, now)
                self.emit([wire(e[1])], msg_id=wire(e[1]), stream=COMMIT_STREAM)

    def next_tuple(self):
        if not self.done and not self.machine.has_replays() and self._exhausted():
            self.done = True
            self._report(force=True)
            self.finish()  # bounded: every batch committed and nothing left
            return
        self._emit(self.machine.sync())
        self._report()

    def _report(self, force: bool = False) -> None:
        line = self.progress.report(time.monotonic(), len(self.machine.active), force=force)
        if line:
            log.info("%s", line)

    def ack(self, msg_id):
        a = attempt_of(msg_id)
        self._checked = float("-inf")
        tx = self.machine.active.get(a.txid)
        if tx is not None and tx.attempt == a and tx.status == COMMITTING:
            maybe_crash("tx-commit", a.txid)  # committers wrote their state; nothing recorded yet
            # Recorded before the machine moves on: a commit Redis did not take (or, with
            # topology.state.redis.min.replicas, too few replicas acknowledged) replays the batch.
            try:
                if self.opaque:
                    committed = self._commit_opaque(a)
                else:  # the current txid moves on, and a committed batch never replays
                    self.state.commit(a.txid, a.txid + 1)
                    committed = True
            except Exception as e:  # noqa: BLE001 - Redis lost, NotReplicated: not committed
                log.warning("commit of batch %s not recorded (%s: %s): replaying it", a, type(e).__name__, e)
                self._emit(self.machine.fail(a))
                return
            if not committed:
                log.warning("batch %s continued after a stale attempt of the batch before: replaying it", a)
                self._emit(self.machine.fail(a))
                return
        before = self.machine.current_txid
        processed = tx is not None and tx.attempt == a and tx.status == PROCESSING
        out = self.machine.ack(a)
        if processed:
            self.progress.batch_processed(a.txid, time.monotonic())
        elif self.machine.current_txid != before:
            self.progress.committed(a.txid, time.monotonic())
        self._emit(out)

    def fail(self, msg_id):
        self._checked = float("-inf")
        self._emit(self.machine.fail(attempt_of(msg_id)))
