"""Checkpointing state machines, without I/O (Storm's CheckpointSpout, the checkpoint
barrier of BaseStatefulBoltExecutor, and StatefulBoltExecutor's bookkeeping).

The worker drives them: it persists the CheckPointState the spout machine asks to save, emits
the checkpoint tuples it returns, and acks/fails/forwards what the bolt machines say.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from state.checkpoint_state import COMMIT, COMMITTED, INITSTATE, PREPARE, ROLLBACK, CheckPointState

CHECKPOINT_SPOUT = "$checkpointspout"
CHECKPOINT_STREAM = "$checkpoint"
CHECKPOINT_FIELDS = ["txid", "action"]


class CheckpointSpoutMachine:
    """One checkpoint in flight at a time; recovery first (ROLLBACK/COMMIT, then INITSTATE)."""

    def __init__(self, state: CheckPointState, interval_ms: float, now: float) -> None:
        self.state = state
        self.interval = max(100.0, float(interval_ms)) / 1000.0
        self.recovering = True
        self.in_progress = False
        self.last = now
        self.final_requested_at: float | None = None
        self.final_done = False
        self._final_txid: int | None = None

    def would_start(self, now: float) -> bool:
        """Whether ``next`` would start a new checkpoint now (one a hold may put off)."""
        return (not self.in_progress and not self.recovering and not self.final_done
                and self.final_requested_at is None and self.state.state == COMMITTED
                and now - self.last >= self.interval)

    def next(self, now: float, hold: bool = False) -> tuple[tuple[int, str] | None, CheckPointState | None]:
        """What to emit now, and a state to save *before* emitting it. ``hold``: start no new
        checkpoint (a savepoint is copying the committed one); recovery, a checkpoint under way
        and a bounded run's final checkpoint go on regardless."""
        if self.in_progress:
            return None, None
        if self.recovering:
            self.in_progress = True
            return (self.state.txid, self.state.next_action(True)), None
        # After the final checkpoint of a bounded run nothing is left to commit: no more
        # checkpoints, so the run's traffic stops and its end can be told.
        if self.final_done:
            due = False
        elif self.final_requested_at is not None:
            due = True
        else:
            due = now - self.last >= self.interval and not hold
        if self.state.state != COMMITTED or due:
            save = None
            if self.state.state == COMMITTED:
                self.state = self.state.next_state(False)
                self.last = now
                save = self.state
                if self.final_requested_at is not None and self._final_txid is None:
                    self._final_txid = self.state.txid
            self.in_progress = True
            return (self.state.txid, self.state.next_action(False)), save
        return None, None

    def on_ack(self, txid: int) -> CheckPointState | None:
        self.in_progress = False
        if txid != self.state.txid:
            return None  # a stale ack: Storm only warns; the current step is re-emitted
        if self.recovering:
            ns = self.state.next_state(True)
            if ns is self.state:
                self.recovering = False
                return None
            self.state = ns
            return ns
        self.state = self.state.next_state(False)
        if self._final_txid is not None and self.state == CheckPointState(self._final_txid, COMMITTED):
            self.final_done = True
        return self.state

    def on_fail(self, txid: int) -> None:
        # A failed PREPARE rolls back; a failed COMMIT is re-sent (roll forward).
        self.in_progress = False
        self.recovering = True

    def request_final(self, now: float) -> None:
        """A bounded run is ending: run one more full checkpoint as soon as possible."""
        if self.final_requested_at is None:
            self.final_requested_at = now


class CheckpointBarrier:
    """Counts checkpoint arrivals per (action, txid) until every input task delivered it."""

    def __init__(self, n_inputs: int) -> None:
        self.n_inputs = n_inputs
        self.counts: dict[tuple[str, int], int] = {}
        self.last_txid: int | None = None

    def arrive(self, txid: int, action: str) -> str:
        """'wait' (ack it, more to come), 'stale' (ack and ignore) or 'handle'."""
        key = (action, txid)
        n = self.counts.get(key, 0) + 1
        if n < self.n_inputs:
            self.counts[key] = n
            return "wait"
        self.counts.pop(key, None)
        if self.last_txid is not None and txid < self.last_txid:
            return "stale"
        return "handle"

    def handled(self, txid: int, action: str) -> None:
        self.last_txid = txid - 1 if action == ROLLBACK else txid


class StatefulBoltMachine:
    """StatefulBoltExecutor's bookkeeping: tuples before INITSTATE are held; acks are held until
    the COMMIT that covers them; a ROLLBACK fails them."""

    def __init__(self, bolt: Any, state: Any) -> None:
        self.bolt = bolt
        self.state = state
        self.initialized = False
        self.pending_tuples: list = []
        self.acked: list = []
        self.prepared: list = []

    def handle(self, txid: int, action: str) -> tuple[bool, list, list, list]:
        """-> (ok, tuples to really ack, tuples to fail, tuples to execute now)."""
        if action == PREPARE:
            if not self.initialized:
                return False, [], [], []  # fails the checkpoint: triggers recovery
            self.bolt.pre_prepare(txid)
            self.state.prepare_commit(txid)
            self.prepared += self.acked
            self.acked = []
            return True, [], [], []
        if action == COMMIT:
            self.bolt.pre_commit(txid)
            self.state.commit(txid)
            done, self.prepared = self.prepared, []
            return True, done, [], []
        if action == ROLLBACK:
            self.bolt.pre_rollback()
            self.state.rollback()
            failed = self.prepared + self.acked
            self.prepared, self.acked = [], []
            return True, [], failed, []
        if action == INITSTATE:
            if self.initialized:
                return True, [], [], []
            self.bolt.init_state(self.state)
            self.initialized = True
            replay, self.pending_tuples = self.pending_tuples, []
            return True, [], [], replay
        raise ValueError(f"unknown checkpoint action {action!r}")


StateFactory = Callable[[str, int], Any]
