"""The exactly-once checkpoint coordinator as a pure machine: what the supervisor saves and
sends for a normal round, what it ignores, and the final checkpoint of a bounded run."""

from __future__ import annotations

import subprocess
import sys

from state.checkpoint_state import COMMITTED, COMMITTING, PREPARING, CheckPointState
from topology_runtime.reliability.checkpoint_coordinator import CheckpointAction, CheckpointCoordinator, Phase
from topology_runtime.transport.messages import Barrier, Commit

SPOUTS = (3, 4)  # spout tasks
WORKERS = (0, 1)


def _machine(committed: int = 5, interval_ms: float = 1000) -> CheckpointCoordinator:
    m = CheckpointCoordinator(SPOUTS, WORKERS, interval_ms, now=0.0)
    m.recovered(committed)
    return m


def _round(m: CheckpointCoordinator, now: float) -> list[CheckpointAction | None]:
    """One whole checkpoint from tick to COMMITTED; every action the machine returned."""
    out = [m.tick(now, running=True)]
    txid = out[0].txid
    out += [m.on_barrier_done(txid, t) for t in SPOUTS]
    out += [m.on_committed(txid, w) for w in WORKERS]
    return out


def test_normal_round_saves_before_it_sends():
    m = _machine(committed=5)
    assert m.tick(0.5, running=True) is None  # interval not elapsed
    a = m.tick(1.0, running=True)
    assert a == CheckpointAction(CheckPointState(6, PREPARING), Barrier)
    assert a.message() == Barrier(6) and a.message().to_wire() == {"t": "barrier", "txid": 6}
    assert m.phase is Phase.PREPARE and m.waiting == {3, 4}
    assert m.on_barrier_done(6, 3) is None
    a = m.on_barrier_done(6, 4)
    assert a == CheckpointAction(CheckPointState(6, COMMITTING), Commit)
    assert a.message() == Commit(6)
    assert m.phase is Phase.COMMIT and m.waiting == {0, 1}
    assert m.on_committed(6, 0) is None
    a = m.on_committed(6, 1)
    assert a == CheckpointAction(CheckPointState(6, COMMITTED)) and a.message() is None
    assert m.phase is Phase.IDLE and m.committed == 6
    assert m.tick(1.5, running=True) is None  # the interval counts from the start of the last one
    assert m.tick(2.0, running=True).record == CheckPointState(7, PREPARING)


def test_interval_has_a_floor_of_100_ms():
    m = _machine(interval_ms=10)
    assert m.tick(0.05, running=True) is None
    assert m.tick(0.1, running=True) is not None


def test_one_checkpoint_at_a_time():
    m = _machine()
    assert m.tick(1.0, running=True) is not None
    assert m.tick(5.0, running=True) is None
    m.on_barrier_done(6, 3)
    m.on_barrier_done(6, 4)
    assert m.tick(10.0, running=True) is None  # committing
    m.on_committed(6, 0)
    m.on_committed(6, 1)
    assert m.tick(10.0, running=True).txid == 7


def test_stale_duplicate_and_wrong_txid_messages_are_ignored():
    m = _machine()
    assert m.on_barrier_done(6, 3) is None and m.on_committed(6, 0) is None  # nothing in flight
    m.tick(1.0, running=True)
    assert m.on_barrier_done(5, 3) is None and m.on_barrier_done(7, 4) is None  # wrong txid
    assert m.on_barrier_done(None, 3) is None
    assert m.waiting == {3, 4}
    assert m.on_barrier_done(6, 3) is None
    assert m.on_barrier_done(6, 3) is None  # duplicate: still waiting for 4
    assert m.on_committed(6, 0) is None and m.phase is Phase.PREPARE  # commit before the commit phase
    assert m.on_barrier_done(6, 4).record.state == COMMITTING
    assert m.on_barrier_done(6, 4) is None  # late duplicate: already committing
    assert m.on_committed(5, 0) is None and m.waiting == {0, 1}
    m.on_committed(6, 0)
    assert m.on_committed(6, 0) is None  # duplicate
    assert m.on_committed(6, 1).record == CheckPointState(6, COMMITTED)
    assert m.on_committed(6, 1) is None  # after it committed
    assert m.committed == 6


def test_no_checkpoint_when_not_running():
    m = _machine()
    assert m.tick(10.0, running=False) is None
    assert m.phase is Phase.IDLE
    assert m.tick(10.0, running=True).txid == 6


def test_final_checkpoint_when_idle_starts_at_once_and_is_the_last():
    m = _machine()
    _round(m, 1.0)
    assert not m.can_complete
    assert m.request_final() is True
    assert m.request_final() is False  # asked again on every quiet probe
    assert m.final_min_txid == 7
    out = _round(m, 1.1)  # at once: the interval does not apply
    assert out[0].record == CheckPointState(7, PREPARING) and out[-1].record == CheckPointState(7, COMMITTED)
    assert m.final_done and m.can_complete
    assert m.tick(100.0, running=True) is None  # none after the final one


def test_final_checkpoint_requested_while_one_is_in_flight_waits_for_the_next():
    m = _machine()
    m.tick(1.0, running=True)  # 6 in flight
    m.request_final()
    assert m.final_min_txid == 7
    m.on_barrier_done(6, 3)
    m.on_barrier_done(6, 4)
    m.on_committed(6, 0)
    m.on_committed(6, 1)
    assert m.committed == 6 and not m.final_done and not m.can_complete  # 6 started before the request
    out = _round(m, 1.05)  # the final one starts at once
    assert out[0].txid == 7 and m.final_done and m.can_complete


def test_can_complete_needs_nothing_in_flight():
    m = _machine()
    m.request_final()
    m.tick(1.0, running=True)
    assert not m.can_complete
    m.on_barrier_done(6, 3)
    m.on_barrier_done(6, 4)
    m.on_committed(6, 0)
    assert not m.can_complete
    m.on_committed(6, 1)
    assert m.can_complete


def test_abandon_drops_the_checkpoint_in_flight_but_keeps_the_final_request():
    m = _machine()
    m.request_final()
    a = m.tick(1.0, running=True)
    m.abandon(unsaved=a)  # PREPARING(6) could not be saved
    assert m.phase is Phase.IDLE and m.committed == 5 and m.final_requested and not m.final_done
    assert m.on_barrier_done(6, 3) is None  # the abandoned checkpoint's messages are ignored
    m.tick(1.0, running=True)
    m.on_barrier_done(6, 3)
    m.on_barrier_done(6, 4)
    m.abandon()  # Redis lost while committing
    assert m.phase is Phase.IDLE and m.on_committed(6, 0) is None


def test_abandon_of_an_unsaved_committed_record_does_not_count_it():
    m = _machine()
    m.request_final()
    out = _round(m, 1.0)
    assert m.final_done and m.committed == 6
    m.abandon(unsaved=out[-1])  # COMMITTED(6) could not be saved: the record still says COMMITTING(6)
    assert m.committed == 5 and not m.final_done and not m.can_complete and m.phase is Phase.IDLE


def test_recovery_resets_phase_and_the_final_request():
    m = _machine()
    m.request_final()
    m.tick(1.0, running=True)
    m.on_barrier_done(6, 3)
    m.recovered(5)  # rolled back to 5 while 6 was preparing
    assert m.phase is Phase.IDLE and m.waiting == set() and m.committed == 5
    assert not m.final_requested and not m.final_done
    assert m.on_barrier_done(6, 4) is None  # from before the rollback
    assert m.tick(1.5, running=True) is None  # no final request: the interval applies again
    assert m.tick(2.0, running=True).txid == 6
    m2 = _machine()
    m2.request_final()
    _round(m2, 1.0)
    assert m2.final_done
    m2.recovered(6)  # a rollback after the final checkpoint: the input must be done again
    assert not m2.final_done and not m2.can_complete
    assert m2.tick(3.0, running=True).txid == 7


def test_import_loads_neither_redis_nor_zmq():
    code = ("import sys, topology_runtime.reliability.checkpoint_coordinator; "
            "print('redis' in sys.modules, 'zmq' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
