"""The transactional spout coordinator (Storm's TransactionalSpoutCoordinator), without I/O.

Up to ``max_active`` batches are in the processing phase at once; commits go strictly in txid
order; a failed batch (processing or commit) is replayed together with every later batch in
flight, each with a new attempt id. The caller persists ``current_txid`` and batch metadata
(Redis, where Storm used ZooKeeper) and emits what ``sync`` returns.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

PROCESSING, PROCESSED, COMMITTING = "PROCESSING", "PROCESSED", "COMMITTING"
BATCH, COMMIT = "batch", "commit"
# A failed txid is replayed after RETRY_BASE_SECS * 2**(failures - 1), at most RETRY_MAX_SECS: a
# deterministic bug reaches max attempts in seconds, a Redis outage of ~20 s is ridden out with
# the default 10 attempts (0.1 + 0.2 + ... + 5 s between them).
DEFAULT_MAX_ATTEMPTS = 10
RETRY_BASE_SECS, RETRY_MAX_SECS = 0.1, 5.0


def retry_delay(failures: int) -> float:
    """Seconds before the next attempt of a txid that failed ``failures`` times."""
    return 0.0 if failures <= 0 else min(RETRY_BASE_SECS * 2 ** (failures - 1), RETRY_MAX_SECS)


class TransactionAttempt(NamedTuple):
    """Immutable and hashable; a named tuple because every tuple of a batch carries one (hashing
    and comparing it is C code, not a dataclass's generated Python)."""

    txid: int
    attempt_id: int

    def __repr__(self) -> str:
        return f"TransactionAttempt({self.txid}, {self.attempt_id})"


@dataclass
class _Tx:
    attempt: TransactionAttempt
    status: str


class TransactionalCoordinator:
    def __init__(self, max_active: int = 1, current_txid: int = 1,
                 is_ready: Callable[[], bool] = lambda: True,
                 initialize: Callable[[int, Any], Any] = lambda txid, prev: None,
                 rng: random.Random | None = None, max_attempts: int | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        """``max_attempts``: a txid whose attempts failed this many times is given up
        (``gave_up`` is set, nothing more is emitted); None: retried forever (Storm). ``clock``:
        seconds (monotonic) for the retry back-off (``retry_delay``); None: replays go at once."""
        self.max_active = max(1, int(max_active))
        self.max_attempts = max_attempts
        self.clock = clock
        self.failures: dict[int, int] = {}  # txid -> failed attempts (cleared when it commits)
        self.retry_at: dict[int, float] = {}  # txid -> when its next attempt may start
        self.gave_up: tuple[int, int] | None = None  # (txid, failed attempts) once given up
        self.current_txid = current_txid
        self.is_ready = is_ready
        self.initialize = initialize
        self.rng = rng or random.Random()
        self.active: dict[int, _Tx] = {}
        self.metas: dict[int, Any] = {}  # cached batch metadata: a replay re-emits the same batch

    def _meta(self, txid: int) -> Any:
        if txid not in self.metas:
            self.metas[txid] = self.initialize(txid, self.metas.get(txid - 1))
        return self.metas[txid]

    def restore_recorded(self, txids: list[int]) -> None:
        """After a restart: batches from ``current_txid`` on whose metadata an emitter recorded
        before the crash. They go out again (the emitter replays them as recorded) whether or not
        the spout is ready for new data, and before the run may end as drained."""
        for txid in txids:
            if txid >= self.current_txid:
                self.metas.setdefault(txid, None)

    def has_replays(self) -> bool:
        """Uncommitted batches known to this coordinator that must (re)run before it may stop."""
        return bool(self.active) or any(t >= self.current_txid for t in self.metas)

    def sync(self) -> list[tuple]:
        """Emits due now: ("commit", attempt) and ("batch", attempt, meta)."""
        out: list[tuple] = []
        if self.gave_up is not None:
            return out
        cur = self.active.get(self.current_txid)
        if cur is not None and cur.status == PROCESSED:
            cur.status = COMMITTING
            out.append((COMMIT, cur.attempt))
        if len(self.active) < self.max_active:
            for txid in range(self.current_txid, self.current_txid + self.max_active):
                if txid in self.active:
                    continue
                if txid not in self.metas and not self.is_ready():
                    break  # not ready for new data; cached (replayed) batches still go out
                if self.clock is not None and txid in self.retry_at and self.clock() < self.retry_at[txid]:
                    break  # backing off after a failure; later txids wait too (order of emits)
                meta = self._meta(txid)  # before the batch is active: if it raises, it is retried
                attempt = TransactionAttempt(txid, self.rng.getrandbits(63))
                self.active[txid] = _Tx(attempt, PROCESSING)
                out.append((BATCH, attempt, meta))
        return out

    def ack(self, attempt: TransactionAttempt) -> list[tuple]:
        tx = self.active.get(attempt.txid)
        if tx is not None and tx.attempt == attempt:
            if tx.status == PROCESSING:
                tx.status = PROCESSED
            elif tx.status == COMMITTING:
                del self.active[attempt.txid]
                self.failures.pop(attempt.txid, None)
                self.retry_at.pop(attempt.txid, None)
                for old in [t for t in self.metas if t <= attempt.txid - 1]:
                    del self.metas[old]  # cleanupBefore(txid): keep the committed one as "previous"
                self.current_txid = attempt.txid + 1
        return self.sync()

    def fail(self, attempt: TransactionAttempt) -> list[tuple]:
        """Only the current attempt of a txid counts: the later batches dropped with it are
        replayed without counting as failed, and their old attempts' late fails are ignored."""
        tx = self.active.get(attempt.txid)
        if tx is not None and tx.attempt == attempt:
            for t in [t for t in self.active if t >= attempt.txid]:
                del self.active[t]  # this batch and every later one in flight replay
            n = self.failures[attempt.txid] = self.failures.get(attempt.txid, 0) + 1
            if self.max_attempts is not None and n >= self.max_attempts:
                self.gave_up = (attempt.txid, n)
                self.active.clear()
                return []
            if self.clock is not None:
                self.retry_at[attempt.txid] = self.clock() + retry_delay(n)
        return self.sync()

    def is_current(self, attempt: TransactionAttempt) -> bool:
        """``attempt`` is the one in flight for its txid (its fail would count)."""
        tx = self.active.get(attempt.txid)
        return tx is not None and tx.attempt == attempt


# --- opaque partitioned spouts: per-partition metadata bookkeeping (no I/O) ---------------------
# An opaque batch may differ on replay, so its metadata is recorded per attempt and becomes the
# partition's committed metadata only when that attempt commits (Storm's
# OpaquePartitionedTransactionalSpoutExecutor). Records, as stored (JSON lists):
#   attempt entry   [attempt_id, meta, base]     the metadata one attempt of txid t ended at, and
#                                                 ``base``: which record it started from
#   committed entry [txid, attempt_id, meta]      the partition's last committed metadata
# ``base`` is [txid, attempt_id] of the record the batch continued from (None: the start).


def opaque_last_meta(txid: int, current_txid: int, committed: list | None,
                     prev_attempt: list | None) -> tuple[Any, list | None]:
    """Where batch ``txid`` of one partition starts: ``(last_meta, base)``.

    ``current_txid`` is the first uncommitted txid, ``committed`` the partition's committed entry,
    ``prev_attempt`` the latest attempt entry of ``txid - 1``. While txid - 1 is still in flight
    (several batches are pipelined) the batch continues after it: txid - 1 commits first, or its
    failure replays this batch too. Otherwise it continues after the last committed batch.
    """
    if txid - 1 >= current_txid and prev_attempt is not None:
        return prev_attempt[1], [txid - 1, prev_attempt[0]]
    if committed is None:
        return None, None
    return committed[2], [committed[0], committed[1]]


def opaque_commit(attempt: TransactionAttempt, entries: dict[int, list], committed: dict[int, list],
                  partitions: range | list[int]) -> dict[int, list] | None:
    """The committed entries after ``attempt`` commits, or None if it must not: a partition has no
    entry of this very attempt, or its batch started from something other than what is committed
    now (it continued after a stale attempt of the previous txid, e.g. one delivered late around a
    worker restart). A refused commit is failed and replayed from the committed metadata."""
    out: dict[int, list] = {}
    for p in partitions:
        e = entries.get(p)
        if e is None or int(e[0]) != attempt.attempt_id:
            return None
        c = committed.get(p)
        if e[2] != ([c[0], c[1]] if c is not None else None):
            return None
        out[p] = [attempt.txid, attempt.attempt_id, e[1]]
    return out
