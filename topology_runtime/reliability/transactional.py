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
from typing import Any

PROCESSING, PROCESSED, COMMITTING = "PROCESSING", "PROCESSED", "COMMITTING"
BATCH, COMMIT = "batch", "commit"


@dataclass(frozen=True)
class TransactionAttempt:
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
                 rng: random.Random | None = None) -> None:
        self.max_active = max(1, int(max_active))
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

    def sync(self) -> list[tuple]:
        """Emits due now: ("commit", attempt) and ("batch", attempt, meta)."""
        out: list[tuple] = []
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
                attempt = TransactionAttempt(txid, self.rng.getrandbits(63))
                self.active[txid] = _Tx(attempt, PROCESSING)
                out.append((BATCH, attempt, self._meta(txid)))
        return out

    def ack(self, attempt: TransactionAttempt) -> list[tuple]:
        tx = self.active.get(attempt.txid)
        if tx is not None and tx.attempt == attempt:
            if tx.status == PROCESSING:
                tx.status = PROCESSED
            elif tx.status == COMMITTING:
                del self.active[attempt.txid]
                for old in [t for t in self.metas if t <= attempt.txid - 1]:
                    del self.metas[old]  # cleanupBefore(txid): keep the committed one as "previous"
                self.current_txid = attempt.txid + 1
        return self.sync()

    def fail(self, attempt: TransactionAttempt) -> list[tuple]:
        tx = self.active.get(attempt.txid)
        if tx is not None and tx.attempt == attempt:
            for t in [t for t in self.active if t >= attempt.txid]:
                del self.active[t]  # this batch and every later one in flight replay
        return self.sync()
