"""The checkpoint spout and stateful executor machines, against Storm's CheckpointSpoutTest
and StatefulBoltExecutorTest scenarios (reference §5)."""

from __future__ import annotations

from state import InMemoryKeyValueState
from state.checkpoint import COMMITTED, COMMITTING, PREPARING, CheckPointState
from topology_runtime.reliability.checkpointing import CheckpointBarrier, CheckpointSpoutMachine, StatefulBoltMachine


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self, dt: float = 0.0) -> float:
        self.t += dt
        return self.t


def _drive(m: CheckpointSpoutMachine, now: float, saved: list):
    out, save = m.next(now)
    if save is not None:
        saved.append(save)
    return out


def _ack(m, txid, saved):
    s = m.on_ack(txid)
    if s is not None:
        saved.append(s)


def test_init_state_first_then_nothing_until_interval():
    saved: list = []
    m = CheckpointSpoutMachine(CheckPointState(-1, COMMITTED), 1000, 0.0)
    assert _drive(m, 0.0, saved) == (-1, "INITSTATE")
    assert _drive(m, 0.0, saved) is None  # one in flight
    _ack(m, -1, saved)
    assert saved == [] and _drive(m, 0.5, saved) is None  # testInitState: ack emits nothing


def test_prepare_after_interval():
    saved: list = []
    m = CheckpointSpoutMachine(CheckPointState(-1, COMMITTED), 1000, 0.0)
    _drive(m, 0.0, saved)
    _ack(m, -1, saved)
    assert _drive(m, 1.0, saved) == (0, "PREPARE")  # testPrepare
    assert saved == [CheckPointState(0, PREPARING)]  # saved before it is emitted
    _ack(m, 0, saved)
    assert saved[-1] == CheckPointState(0, COMMITTING)
    assert _drive(m, 1.0, saved) == (0, "COMMIT")
    _ack(m, 0, saved)
    assert saved[-1] == CheckPointState(0, COMMITTED)


def test_prepare_with_fail_rolls_back_then_retries():
    """testPrepareWithFail: PREPARE(1) fails -> ROLLBACK(1) fails -> ROLLBACK(1) -> INITSTATE(0) -> PREPARE(1)."""
    saved: list = []
    m = CheckpointSpoutMachine(CheckPointState(0, COMMITTED), 1000, 0.0)
    emits = [_drive(m, 0.0, saved)]
    _ack(m, 0, saved)
    emits.append(_drive(m, 1.0, saved))
    m.on_fail(1)
    emits.append(_drive(m, 1.0, saved))
    m.on_fail(1)
    emits.append(_drive(m, 1.0, saved))
    _ack(m, 1, saved)
    emits.append(_drive(m, 1.0, saved))
    _ack(m, 0, saved)
    emits.append(_drive(m, 2.5, saved))
    assert emits == [(0, "INITSTATE"), (1, "PREPARE"), (1, "ROLLBACK"), (1, "ROLLBACK"), (0, "INITSTATE"),
                     (1, "PREPARE")]
    assert CheckPointState(0, COMMITTED) in saved


def test_failed_commit_is_resent():
    saved: list = []
    m = CheckpointSpoutMachine(CheckPointState(0, COMMITTED), 1000, 0.0)
    _drive(m, 0.0, saved)
    _ack(m, 0, saved)
    _drive(m, 1.0, saved)
    _ack(m, 1, saved)
    assert _drive(m, 1.0, saved) == (1, "COMMIT")
    m.on_fail(1)
    assert _drive(m, 1.0, saved) == (1, "COMMIT")  # testCommit: roll forward


def test_recovery_rollback_and_commit():
    saved: list = []
    m = CheckpointSpoutMachine(CheckPointState(100, PREPARING), 1000, 0.0)
    assert _drive(m, 0.0, saved) == (100, "ROLLBACK")  # testRecoveryRollback
    _ack(m, 100, saved)
    assert _drive(m, 0.0, saved) == (99, "INITSTATE")  # testRecoveryRollbackAck
    _ack(m, 99, saved)
    assert _drive(m, 1.0, saved) == (100, "PREPARE")
    m2 = CheckpointSpoutMachine(CheckPointState(100, COMMITTING), 1000, 0.0)
    assert _drive(m2, 0.0, []) == (100, "COMMIT")  # testRecoveryCommit


def test_final_checkpoint_is_immediate_and_reported():
    saved: list = []
    m = CheckpointSpoutMachine(CheckPointState(3, COMMITTED), 60_000, 0.0)
    _drive(m, 0.0, saved)
    _ack(m, 3, saved)
    assert _drive(m, 0.1, saved) is None
    m.request_final(0.1)
    assert _drive(m, 0.1, saved) == (4, "PREPARE")
    _ack(m, 4, saved)
    assert not m.final_done
    assert _drive(m, 0.1, saved) == (4, "COMMIT")
    _ack(m, 4, saved)
    assert m.final_done


def test_a_hold_puts_off_new_checkpoints_but_not_the_one_under_way():
    """A savepoint copying the committed state holds new checkpoints; the step in flight still
    completes, and a bounded run's final checkpoint is never held."""
    saved: list = []
    m = CheckpointSpoutMachine(CheckPointState(-1, COMMITTED), 100, 0.0)
    _drive(m, 0.0, saved)
    _ack(m, -1, saved)
    assert m.would_start(0.1)
    assert m.next(0.1, hold=True) == (None, None)  # held: the record stays COMMITTED
    assert m.next(5.0, hold=True) == (None, None)
    assert m.next(5.0)[0] == (0, "PREPARE")  # released
    _ack(m, 0, saved)
    assert not m.would_start(5.0)
    assert m.next(5.0, hold=True)[0] == (0, "COMMIT")  # the checkpoint under way completes
    _ack(m, 0, saved)
    assert saved[-1] == CheckPointState(0, COMMITTED)
    m.request_final(5.0)
    assert not m.would_start(5.0)
    assert m.next(5.0, hold=True)[0] == (1, "PREPARE")


def test_barrier_waits_for_every_input_and_ignores_stale():
    b = CheckpointBarrier(3)
    assert [b.arrive(5, "PREPARE") for _ in range(3)] == ["wait", "wait", "handle"]
    b.handled(5, "PREPARE")
    assert [b.arrive(4, "COMMIT") for _ in range(3)] == ["wait", "wait", "stale"]
    assert [b.arrive(5, "ROLLBACK") for _ in range(3)] == ["wait", "wait", "handle"]
    b.handled(5, "ROLLBACK")
    assert b.last_txid == 4


class Bolt:
    def __init__(self):
        self.calls = []

    def init_state(self, state):
        self.calls.append("init")

    def pre_prepare(self, txid):
        self.calls.append(f"pre_prepare({txid})")

    def pre_commit(self, txid):
        self.calls.append(f"pre_commit({txid})")

    def pre_rollback(self):
        self.calls.append("pre_rollback")


def test_tuples_before_init_are_held_then_replayed_on_initstate():
    m = StatefulBoltMachine(Bolt(), InMemoryKeyValueState())
    m.pending_tuples += ["t1", "t2"]
    ok, acks, fails, replay = m.handle(-1, "INITSTATE")
    assert ok and replay == ["t1", "t2"] and m.initialized and m.bolt.calls == ["init"]
    assert m.handle(-1, "INITSTATE") == (True, [], [], [])  # never re-initialised


def test_prepare_before_init_fails_the_checkpoint_then_rollback_works():
    m = StatefulBoltMachine(Bolt(), InMemoryKeyValueState())
    assert m.handle(0, "PREPARE")[0] is False
    ok, *_ = m.handle(0, "ROLLBACK")
    assert ok and m.bolt.calls == ["pre_rollback"]


def test_input_acked_only_after_commit_and_failed_on_rollback():
    state = InMemoryKeyValueState()
    m = StatefulBoltMachine(Bolt(), state)
    m.handle(-1, "INITSTATE")
    state.put("k", 1)
    m.acked.append("a")
    assert m.handle(0, "PREPARE") == (True, [], [], [])
    m.acked.append("b")  # processed after the prepare: belongs to the next checkpoint
    assert m.handle(0, "COMMIT") == (True, ["a"], [], [])
    assert m.bolt.calls == ["init", "pre_prepare(0)", "pre_commit(0)"]
    assert state.committed_txid == 0
    m.handle(1, "PREPARE")
    m.acked.append("c")
    ok, acks, fails, _ = m.handle(1, "ROLLBACK")
    assert ok and acks == [] and fails == ["b", "c"]
