"""The acker, rotating map and spout pending map as plain state machines (no I/O), against the
scenarios of Storm's reference (storm-internals.md §1, §5) and the worked XOR example of the
acking write-up (seed 000)."""

from __future__ import annotations

import random

from topology_runtime.reliability import ACK, FAIL, RESET, Acker, AckOutcome, RotatingMap, SpoutPending


# --- RotatingMap -----------------------------------------------------------------------------------
def test_rotating_map_put_get_remove_and_len():
    m = RotatingMap(3)
    m.put("a", 1)
    m.put("b", 2)
    assert m.get("a") == 1 and "b" in m and len(m) == 2
    assert m.remove("a") == 1 and "a" not in m and m.remove("a") is None
    assert len(m) == 1


def test_rotating_map_expiry_lifetimes_and_refresh():
    expired = []
    m = RotatingMap(3, on_expire=lambda k, v: expired.append(k))
    m.put("x", 1)
    m.rotate()
    m.rotate()
    assert "x" in m and expired == []  # survives 2 rotations
    m.rotate()
    assert "x" not in m and expired == ["x"]  # dies on the 3rd
    m2 = RotatingMap(2)
    m2.put("y", 1)
    m2.rotate()
    m2.put("y", 2)  # re-put moves it to the head bucket
    m2.rotate()
    assert m2.get("y") == 2
    assert m2.rotate() == {"y": 2}


def test_rotating_map_put_removes_key_from_older_buckets():
    m = RotatingMap(3)
    m.put("k", 1)
    m.rotate()
    m.put("k", 2)
    assert len(m) == 1 and m.get("k") == 2


# --- Acker -----------------------------------------------------------------------------------------
def test_seed_worked_example_4_bit():
    """stid1=1010 (acker1), stid2=1011 (acker2); tid1=1100 multi-anchored to both."""
    acker1, acker2 = Acker(), Acker()
    stid1, stid2, tid1 = 0b1010, 0b1011, 0b1100
    assert acker1.init(stid1, stid1, spout_task=1) is None
    assert acker2.init(stid2, stid2, spout_task=2) is None
    # Bolt1 acks stid1/stid2 and emits tid1 anchored to both: XOR in the new edge.
    assert acker1.ack(stid1, tid1) is None
    assert acker2.ack(stid2, tid1) is None
    assert acker1.pending.get(stid1).val == 0b0110
    assert acker2.pending.get(stid2).val == 0b0111
    assert acker1.ack(stid1, stid1) is None
    assert acker2.ack(stid2, stid2) is None
    assert acker1.pending.get(stid1).val == 0b1100
    assert acker2.pending.get(stid2).val == 0b1100
    # Bolt2 acks tid1: both trees reach 0000 and are acked to their spouts.
    assert acker1.ack(stid1, tid1) == AckOutcome(ACK, 1, stid1)
    assert acker2.ack(stid2, tid1) == AckOutcome(ACK, 2, stid2)
    assert len(acker1) == 0 and len(acker2) == 0


def test_acks_before_init_complete_when_init_arrives():
    a = Acker()
    assert a.ack(7, 0b0101) is None
    assert a.ack(7, 0b0011) is None
    assert a.init(7, 0b0110, spout_task=3) == AckOutcome(ACK, 3, 7)


def test_fail_before_init_is_reported_when_init_arrives():
    a = Acker()
    assert a.fail(9) is None  # no spout task known yet
    assert a.init(9, 0b1, spout_task=4) == AckOutcome(FAIL, 4, 9)


def test_zero_wins_over_failed():
    a = Acker()
    a.fail(5)
    a.ack(5, 0b11)
    assert a.init(5, 0b11, spout_task=1) == AckOutcome(ACK, 1, 5)


def test_fail_after_init_fails_root():
    a = Acker()
    a.init(5, 0b11, spout_task=1)
    assert a.fail(5) == AckOutcome(FAIL, 1, 5)
    assert len(a) == 0


def test_reset_keeps_entry_and_refreshes_it():
    a = Acker()
    a.init(1, 0b1, spout_task=2)
    a.tick()
    a.tick()
    assert a.reset_timeout(1) == AckOutcome(RESET, 2, 1)
    a.tick()
    a.tick()
    assert 1 in a.pending  # refreshed: survived 4 rotations in all
    assert a.ack(1, 0b1) == AckOutcome(ACK, 2, 1)


def test_tick_drops_silently_after_three_rotations_and_init_ack_do_not_refresh():
    a = Acker()
    a.init(1, 0b111, spout_task=2)
    a.tick()
    a.ack(1, 0b001)  # an ack does not refresh an existing entry
    a.tick()
    assert 1 in a.pending
    assert a.tick() == 1  # dropped, nothing reported (the spout's own timeout fails it)
    assert 1 not in a.pending


def test_stragglers_after_completion_are_orphans_that_rotate_away():
    a = Acker()
    a.init(1, 0b1, spout_task=2)
    assert a.ack(1, 0b1) == AckOutcome(ACK, 2, 1)
    assert a.ack(1, 0b10) is None  # straggler: a new orphan entry without a spout task
    assert a.pending.get(1).spout_task == -1
    for _ in range(3):
        a.tick()
    assert len(a) == 0


def test_zero_out_tasks_acks_at_once():
    assert Acker().init(42, 0, spout_task=1) == AckOutcome(ACK, 1, 42)


class _Tree:
    """Storm's collector arithmetic, to drive the acker with real 64-bit trees and DAGs."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.messages: list[tuple] = []
        self.n_tuples = 0

    def spout_emit(self, root: int, n_out: int) -> list[dict]:
        edges = [self.rng.getrandbits(64) for _ in range(n_out)]
        init = 0
        for e in edges:
            init ^= e
        self.messages.append(("init", root, init))
        return [{"anchors": {root: e}, "out": 0} for e in edges]

    def emit(self, anchors: list[dict]) -> dict:
        child: dict[int, int] = {}
        for a in anchors:
            edge = self.rng.getrandbits(64)
            a["out"] ^= edge
            for r in a["anchors"]:
                child[r] = child.get(r, 0) ^ edge
        return {"anchors": child, "out": 0}

    def ack(self, t: dict) -> None:
        for r, i in t["anchors"].items():
            self.messages.append(("ack", r, i ^ t["out"]))

    def fail(self, t: dict) -> None:
        for r in t["anchors"]:
            self.messages.append(("fail", r, 0))


def _deliver(acker: Acker, messages: list[tuple]) -> list[AckOutcome]:
    out = []
    for kind, root, val in messages:
        o = acker.init(root, val, 1) if kind == "init" else acker.ack(root, val) if kind == "ack" else acker.fail(root)
        if o is not None:
            out.append(o)
    return out


def _random_dag(rng: random.Random, roots: list[int], fail_one: bool = False) -> list[tuple]:
    tree = _Tree(rng)
    frontier = []
    for r in roots:
        frontier += tree.spout_emit(r, rng.randint(0, 3))
    steps = 0
    failed = False
    while frontier and steps < 200:
        steps += 1
        k = min(len(frontier), rng.randint(1, 3))
        inputs = [frontier.pop(rng.randrange(len(frontier))) for _ in range(k)]
        for _ in range(rng.randint(0, 3) if steps < 60 else 0):
            frontier.append(tree.emit(inputs))  # multi-anchored when k > 1
        for t in inputs:
            if fail_one and not failed and t["anchors"]:
                tree.fail(t)
                failed = True
            else:
                tree.ack(t)
    for t in frontier:
        tree.ack(t)
    return tree.messages


def test_random_trees_in_any_order_ack_each_root_exactly_once():
    rng = random.Random(1234)
    for trial in range(200):
        roots = [rng.getrandbits(64) for _ in range(rng.randint(1, 3))]
        messages = _random_dag(rng, roots)
        order = list(messages)
        rng.shuffle(order)
        acker = Acker()
        outcomes = _deliver(acker, order)
        assert sorted(o.root for o in outcomes if o.kind == ACK) == sorted(roots), f"trial {trial}"
        assert all(o.kind == ACK for o in outcomes)
        # Never before the last message of that root.
        for root in roots:
            last = max(i for i, m in enumerate(order) if m[1] == root)
            prefix = [m for m in order[:last] if m[1] == root]
            assert all(x.root != root for x in _deliver(Acker(), prefix)), "acked before its last message"


def test_random_dag_with_a_failed_tuple_fails_its_root():
    rng = random.Random(99)
    hits = 0
    for _ in range(100):
        root = rng.getrandbits(64)
        messages = _random_dag(rng, [root], fail_one=True)
        if not any(m[0] == "fail" for m in messages):
            continue
        hits += 1
        rng.shuffle(messages)
        outcomes = _deliver(Acker(), messages)
        # The failed tuple is never acked, so its edge keeps the XOR non-zero: the tree fails.
        assert outcomes == [AckOutcome(FAIL, 1, root)]
    assert hits > 50


# --- SpoutPending ----------------------------------------------------------------------------------
def test_spout_pending_timeout_between_t_and_2t():
    p = SpoutPending()
    p.add(1, "m1", 0.0)
    assert p.tick() == []  # after T: still pending
    assert p.tick() == [("m1", 0.0)]  # after 2T: timed out
    assert p.complete(1) is None  # a late ack is ignored


def test_spout_pending_reset_refreshes_and_complete_removes():
    p = SpoutPending()
    p.add(1, "keep", 0.0)
    p.add(2, "drop", 0.0)
    p.tick()
    p.reset(1)
    assert p.tick() == [("drop", 0.0)]
    assert p.complete(1) == ("keep", 0.0)
    assert len(p) == 0
