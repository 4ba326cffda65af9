"""The exactly-once checkpoint coordinator as a pure state machine: when to start a checkpoint,
what it still waits for, and which record to save and message to send next (no I/O).

The supervisor drives it (``supervisor/checkpoints.py``): it passes the clock and the workers'
messages in, and carries out each returned :class:`CheckpointAction` in order: save
``action.record`` as the topology's checkpoint record, *then* (only if that worked) send
``action.message()`` (a Barrier or a Commit of ``action.txid``) to every worker. One checkpoint is in flight at a
time:

    idle --tick, interval elapsed--> prepare(t): save PREPARING(t), send BARRIER t
    prepare(t) --BARRIER_DONE t from every spout task--> commit(t): save COMMITTING(t), send COMMIT t
    commit(t) --COMMITTED t from every worker--> idle: save COMMITTED(t)

A bounded run ends with a final checkpoint: one *started* after :meth:`request_final` must
commit before the run may complete, and no checkpoint starts after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from state.checkpoint_state import COMMITTED, COMMITTING, PREPARING, CheckPointState

from ..transport.messages import Barrier, Commit


class Phase(Enum):
    """Where the checkpoint in flight is (IDLE: none is)."""

    IDLE = "idle"
    PREPARE = "prepare"  # PREPARING(t) saved, barrier t sent: waiting for every spout task
    COMMIT = "commit"  # COMMITTING(t) saved, commit t sent: waiting for every worker


@dataclass(frozen=True)
class CheckpointAction:
    """Save ``record`` as the checkpoint record, then send ``send`` (a message kind, of
    ``txid``) to every worker; ``send`` is None when there is nothing to send."""

    record: CheckPointState
    send: type[Barrier] | type[Commit] | None = None

    @property
    def txid(self) -> int:
        return self.record.txid

    def message(self) -> Barrier | Commit | None:
        return None if self.send is None else self.send(self.txid)


def start_action(txid: int) -> CheckpointAction:
    return CheckpointAction(CheckPointState(txid, PREPARING), Barrier)


def commit_action(txid: int) -> CheckpointAction:
    return CheckpointAction(CheckPointState(txid, COMMITTING), Commit)


def committed_action(txid: int) -> CheckpointAction:
    return CheckpointAction(CheckPointState(txid, COMMITTED))


class CheckpointCoordinator:
    """Exactly-once checkpoints of one run: barriers start at ``spout_tasks``, every one of
    ``workers`` commits. ``interval_ms`` as ``topology.state.checkpoint.interval.ms`` (at least
    100 ms); ``now`` is a monotonic clock reading. Call :meth:`recovered` before the first
    :meth:`tick` with the committed txid the recovery left."""

    def __init__(self, spout_tasks: Iterable[int], workers: Iterable[int], interval_ms: float, now: float,
                 committed: int = -1) -> None:
        self.spout_tasks = frozenset(spout_tasks)
        self.workers = frozenset(workers)
        self.interval = max(100.0, float(interval_ms)) / 1000.0
        self.phase = Phase.IDLE
        self.txid: int | None = None  # the checkpoint in flight, or the last one started
        self.waiting: set[int] = set()  # spout tasks (PREPARE) or workers (COMMIT) still awaited
        self.committed = committed
        self.last = now  # when the last checkpoint started
        self.final_requested = False
        self.final_min_txid = 0  # the final checkpoint is the first to commit with txid >= this
        self.final_done = False

    @property
    def in_flight(self) -> bool:
        return self.phase is not Phase.IDLE

    @property
    def can_complete(self) -> bool:
        """A bounded run may end: its final checkpoint committed and none is in flight."""
        return self.final_done and not self.in_flight

    # --- inputs -------------------------------------------------------------------------------------
    def tick(self, now: float, running: bool) -> CheckpointAction | None:
        """Start checkpoint committed+1 when the interval has elapsed (at once when a final
        one is requested). ``running``: the run is up and not stopping or rolling back."""
        if self.in_flight or not running or self.final_done:
            return None  # one checkpoint at a time; none after the final one of a bounded run
        if now - self.last < self.interval and not self.final_requested:
            return None
        self.last = now
        txid = self.committed + 1
        self.phase, self.txid, self.waiting = Phase.PREPARE, txid, set(self.spout_tasks)
        return start_action(txid)

    def on_barrier_done(self, txid: int | None, task: int) -> CheckpointAction | None:
        """Spout ``task``'s barrier tree of ``txid`` completed; the last one starts the commit."""
        if txid != self.txid or self.phase is not Phase.PREPARE:
            return None  # stale, duplicate or from a checkpoint that was abandoned
        self.waiting.discard(task)
        if self.waiting:
            return None
        self.phase, self.waiting = Phase.COMMIT, set(self.workers)
        return commit_action(txid)

    def on_committed(self, txid: int | None, worker: int) -> CheckpointAction | None:
        """``worker`` committed ``txid``; the last one makes the checkpoint COMMITTED."""
        if txid != self.txid or self.phase is not Phase.COMMIT:
            return None
        self.waiting.discard(worker)
        if self.waiting:
            return None
        self.committed, self.phase = txid, Phase.IDLE
        if self.final_requested and self.committed >= self.final_min_txid:
            self.final_done = True
        return committed_action(txid)

    def request_final(self) -> bool:
        """The input of a bounded run is done: the next checkpoint to start is the final one (a
        checkpoint already in flight does not count). True the first time it is asked."""
        if self.final_requested:
            return False
        self.final_requested = True
        self.final_min_txid = (self.txid if self.in_flight else self.committed) + 1
        return True

    def abandon(self, unsaved: CheckpointAction | None = None) -> None:
        """Drop the checkpoint in flight (Redis was lost; the run rolls back). ``unsaved``: the
        action whose record could not be saved; a COMMITTED record that was not saved does not
        count as committed."""
        if unsaved is not None and unsaved.record.state == COMMITTED and self.committed == unsaved.txid:
            self.committed = unsaved.txid - 1  # every checkpoint starts at committed + 1
            self.final_done = False  # none starts after the final one: it was not done before
        self.phase = Phase.IDLE

    def recovered(self, committed: int) -> None:
        """Every worker restarts from checkpoint ``committed``: nothing is in flight, and the
        input must be done again before a final checkpoint can end the run."""
        self.committed = committed
        self.phase, self.waiting = Phase.IDLE, set()
        self.final_requested = False
        self.final_done = False
