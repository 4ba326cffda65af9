"""A spout task's pending map (Storm's SpoutExecutor): 2 buckets, so a tuple times out T..2T after
emit (or after its last reset), and an ACK/FAIL that comes after the timeout is ignored."""

from __future__ import annotations

from topology_runtime.reliability.acker import ACK, FAIL, RESET, Acker
from topology_runtime.reliability.spout_pending import SpoutPending


def test_add_complete_len_msg_ids():
    p = SpoutPending()
    assert len(p) == 0
    p.add(1, "m1", 0.5)
    p.add(2, "m2", 0.7)
    assert len(p) == 2
    assert sorted(p.msg_ids()) == ["m1", "m2"]
    assert p.complete(1) == ("m1", 0.5)
    assert len(p) == 1
    assert p.complete(1) is None  # a second ACK/FAIL for the same root is ignored
    assert p.msg_ids() == ["m2"]


def test_tick_expires_between_t_and_2t():
    p = SpoutPending()
    p.add(1, "m1", 0.0)
    assert p.tick() == []  # first tick after emit: < 2T may have passed, still pending
    assert len(p) == 1
    assert p.tick() == [("m1", 0.0)]  # second tick: timed out
    assert len(p) == 0
    assert p.tick() == []


def test_tick_reports_only_the_oldest_generation():
    p = SpoutPending()
    p.add(1, "old", 0.0)
    p.tick()
    p.add(2, "new", 10.0)
    assert p.tick() == [("old", 0.0)]
    assert p.msg_ids() == ["new"]
    assert p.tick() == [("new", 10.0)]


def test_complete_after_timeout_returns_none():
    p = SpoutPending()
    p.add(1, "m1", 0.0)
    p.tick()
    p.tick()
    assert p.complete(1) is None


def test_reset_refreshes():
    p = SpoutPending()
    p.add(1, "m1", 3.0)
    p.tick()
    p.reset(1)  # would have expired on the next tick
    assert p.tick() == []
    assert p.msg_ids() == ["m1"]
    assert p.tick() == [("m1", 3.0)]  # emit time is kept across resets


def test_repeated_resets_keep_a_tuple_alive_indefinitely():
    p = SpoutPending()
    p.add(1, "m1", 0.0)
    for _ in range(10):
        p.tick()
        p.reset(1)
    assert p.complete(1) == ("m1", 0.0)


def test_reset_of_unknown_or_timed_out_root_is_a_no_op():
    p = SpoutPending()
    p.reset(99)
    assert len(p) == 0
    p.add(1, "m1", 0.0)
    p.tick()
    p.tick()
    p.reset(1)
    assert len(p) == 0
    assert p.tick() == []


def test_same_msg_id_under_two_roots_are_separate_entries():
    p = SpoutPending()
    p.add(1, "m", 0.0)
    p.add(2, "m", 1.0)
    assert p.complete(1) == ("m", 0.0)
    assert p.msg_ids() == ["m"]


# --- Storm's TopologyIntegrationTest shapes, with a clock ticking every T -------------------------
class _Sim:
    """One spout task + one acker, ticked together every ``timeout`` seconds; the spout records its
    ack/fail callbacks with the time they happen."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.now = 0.0
        self.next_tick = timeout
        self.pending = SpoutPending()
        self.acker = Acker()
        self.acked: list[tuple[str, float]] = []
        self.failed: list[tuple[str, float]] = []
        self.spout_task = 3

    def advance(self, to: float) -> None:
        while self.next_tick <= to:
            self.now = self.next_tick
            for msg_id, _ in self.pending.tick():
                self.failed.append((msg_id, self.now))
            self.acker.tick()
            self.next_tick += self.timeout
        self.now = to

    def emit(self, root: int, msg_id: str, edge: int) -> None:
        self.pending.add(root, msg_id, self.now)
        self._route(self.acker.init(root, edge, self.spout_task))

    def bolt_ack(self, root: int, edge: int) -> None:
        self._route(self.acker.ack(root, edge))

    def bolt_fail(self, root: int) -> None:
        self._route(self.acker.fail(root))

    def bolt_reset(self, root: int) -> None:
        self._route(self.acker.reset_timeout(root))

    def _route(self, out) -> None:
        if out is None:
            return
        assert out.spout_task == self.spout_task
        if out.kind == RESET:
            self.pending.reset(out.root)
            return
        entry = self.pending.complete(out.root)
        if entry is None:
            return  # already timed out: ignored
        (self.acked if out.kind == ACK else self.failed).append((entry[0], self.now))


def test_storm_test_timeout_shape():
    """testTimeout (timeout 10): ack every other tuple; 1 and 3 acked, 2 not failed at +9s,
    failed by +21s; its late ack is then ignored."""
    sim = _Sim(timeout=10)
    sim.advance(0.5)
    for root, msg in ((101, "1"), (102, "2"), (103, "3")):
        sim.emit(root, msg, edge=root * 7)
    sim.bolt_ack(101, 101 * 7)
    sim.bolt_ack(103, 103 * 7)
    assert [m for m, _ in sim.acked] == ["1", "3"]

    sim.advance(9.5)
    assert sim.failed == []
    sim.advance(21)
    assert [m for m, _ in sim.failed] == ["2"]
    assert 10 <= sim.failed[0][1] - 0.5 <= 20  # T..2T after emit

    sim.bolt_ack(102, 102 * 7)  # straggler after the timeout: no second callback
    assert [m for m, _ in sim.acked] == ["1", "3"]
    assert len(sim.failed) == 1


def test_tuple_emitted_just_before_a_tick_times_out_after_about_t():
    sim = _Sim(timeout=10)
    sim.advance(9.9)
    sim.emit(1, "late", edge=5)
    sim.advance(19.9)
    assert sim.failed == []
    sim.advance(20)
    assert sim.failed == [("late", 20)]


def test_storm_test_reset_timeout_shape():
    """testResetTimeout: tuple 1 is reset every T/2 and outlives 2T while un-reset tuple 2 fails;
    tuple 1 is then acked and never failed."""
    sim = _Sim(timeout=10)
    sim.emit(1, "1", edge=0x111)
    sim.emit(2, "2", edge=0x222)
    t = 0.0
    while t < 55:
        t += 5
        sim.advance(t)
        sim.bolt_reset(1)
    assert [m for m, _ in sim.failed] == ["2"]
    assert sim.failed[0][1] <= 20
    assert sim.pending.msg_ids() == ["1"]
    assert 1 in sim.acker.pending  # the acker entry was kept alive by the resets too
    sim.bolt_ack(1, 0x111)
    assert sim.acked == [("1", 55)]
    assert [m for m, _ in sim.failed] == ["2"]
    assert len(sim.pending) == 0


def test_fail_from_bolt_reaches_spout_once():
    sim = _Sim(timeout=10)
    sim.emit(1, "1", edge=0x9)
    sim.bolt_fail(1)
    assert sim.failed == [("1", 0.0)]
    sim.advance(100)  # no second (timeout) failure
    assert sim.failed == [("1", 0.0)]
    assert sim.acked == []


def test_spout_times_out_before_the_acker_drops_the_entry():
    """2 buckets vs the acker's 3: the spout's timeout is the authoritative failure."""
    sim = _Sim(timeout=10)
    sim.emit(1, "1", edge=0x9)
    sim.advance(20)
    assert sim.failed == [("1", 20)]
    assert 1 in sim.acker.pending  # the acker (3 buckets) still holds it
    out = sim.acker.fail(1)
    assert out is not None and out.kind == FAIL
    sim._route(out)  # the acker's late FAIL for a timed-out tuple is ignored by the spout
    assert sim.failed == [("1", 20)]
