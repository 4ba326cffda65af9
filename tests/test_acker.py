"""The acker's XOR state machine (Storm's daemon/Acker.java): reference §1 and §5 scenarios."""

from __future__ import annotations

import itertools
import random

import pytest

from topology_runtime.reliability.acker import ACK, FAIL, RESET, TIMEOUT_BUCKET_NUM, Acker, AckOutcome

SPOUT = 7
ROOT = 0xDEADBEEF


def _val(acker: Acker, root: int) -> int:
    return acker.pending.get(root).val


def _ticks_survived(acker: Acker, root: int, limit: int = 10) -> int:
    for n in range(limit):
        acker.tick()
        if root not in acker.pending:
            return n
    raise AssertionError(f"root {root:#x} never expired")


# --- the seed's worked example (4-bit ids, two spouts, two ackers) ---------------------------------
def test_seed_worked_example_4_bit():
    sid1, sid2 = 1, 2
    stid1, stid2, tid1 = 0b1010, 0b1011, 0b1100
    acker1, acker2 = Acker(), Acker()

    # Spouts notify their acker: [stid, sid]; the ack val starts as the spout tuple's id.
    assert acker1.init(stid1, stid1, sid1) is None
    assert acker2.init(stid2, stid2, sid2) is None
    assert _val(acker1, stid1) == 0b1010
    assert _val(acker2, stid2) == 0b1011

    # Bolt1 emits tid1 anchored to both: XOR tid1 into each root.
    assert acker1.ack(stid1, tid1) is None
    assert acker2.ack(stid2, tid1) is None
    assert _val(acker1, stid1) == 0b0110
    assert _val(acker2, stid2) == 0b0111

    # Bolt1 acks both inputs.
    assert acker1.ack(stid1, stid1) is None
    assert acker2.ack(stid2, stid2) is None
    assert _val(acker1, stid1) == 0b1100
    assert _val(acker2, stid2) == 0b1100

    # Bolt2 acks tid1, which carries both roots: both reach 0000 and the spouts are acked.
    assert acker1.ack(stid1, tid1) == AckOutcome(ACK, sid1, stid1)
    assert acker2.ack(stid2, tid1) == AckOutcome(ACK, sid2, stid2)
    assert len(acker1) == 0 and len(acker2) == 0


def test_seed_example_as_storm_sends_it():
    """Storm folds the emit into the ack: Bolt1 sends stid ^ outAckVal(tid1) in one message."""
    acker = Acker()
    acker.init(0b1010, 0b1010, 1)
    assert acker.ack(0b1010, 0b1010 ^ 0b1100) is None
    assert _val(acker, 0b1010) == 0b1100
    assert acker.ack(0b1010, 0b1100) == AckOutcome(ACK, 1, 0b1010)


# --- order independence ----------------------------------------------------------------------------
def test_acks_before_init_complete_when_init_arrives():
    acker = Acker()
    a, b = 0x1111, 0x2222
    assert acker.ack(ROOT, a) is None
    assert acker.ack(ROOT, a ^ b) is None
    assert acker.pending.get(ROOT).spout_task == -1
    assert _val(acker, ROOT) == b
    assert acker.init(ROOT, b, SPOUT) == AckOutcome(ACK, SPOUT, ROOT)
    assert ROOT not in acker.pending


def test_fail_before_init_is_held_until_init():
    acker = Acker()
    assert acker.fail(ROOT) is None
    assert ROOT in acker.pending
    assert acker.pending.get(ROOT).failed is True
    assert acker.init(ROOT, 0x55, SPOUT) == AckOutcome(FAIL, SPOUT, ROOT)
    assert len(acker) == 0


@pytest.mark.parametrize("order", list(itertools.permutations(["init", "ack", "fail"])))
def test_init_ack_fail_in_every_order(order):
    """init(v) + ack(v) completes the tree; a fail only wins if it is seen, with init, before the
    tree completes; val == 0 wins over failed when both hold at the same decision."""
    acker = Acker()
    v = 0xABCDEF
    send = {
        "init": lambda: acker.init(ROOT, v, SPOUT),
        "ack": lambda: acker.ack(ROOT, v),
        "fail": lambda: acker.fail(ROOT),
    }
    outs = [send[m]() for m in order]
    emitted = [(m, o) for m, o in zip(order, outs) if o is not None]
    assert len(emitted) == 1
    msg, out = emitted[0]
    # Expected: the first moment init has been seen and either val==0 or failed holds.
    seen: set[str] = set()
    for m in order:
        seen.add(m)
        if "init" in seen and ({"ack"} <= seen or "fail" in seen):
            expected_kind = ACK if "ack" in seen else FAIL
            break
    assert msg == m
    assert out == AckOutcome(expected_kind, SPOUT, ROOT)
    # Whatever arrives after the decision is a straggler: an orphan that never reports.
    if order[-1] != msg:
        assert acker.pending.get(ROOT).spout_task == -1


def test_zero_wins_over_failed():
    acker = Acker()
    assert acker.fail(ROOT) is None
    assert acker.ack(ROOT, 0x99) is None
    assert acker.init(ROOT, 0x99, SPOUT) == AckOutcome(ACK, SPOUT, ROOT)


def test_fail_after_init_fails_and_removes():
    acker = Acker()
    acker.init(ROOT, 0x42, SPOUT)
    assert acker.fail(ROOT) == AckOutcome(FAIL, SPOUT, ROOT)
    assert ROOT not in acker.pending


def test_zero_out_task_emit_acks_at_once():
    acker = Acker()
    assert acker.init(ROOT, 0, SPOUT) == AckOutcome(ACK, SPOUT, ROOT)
    assert len(acker) == 0


def test_roots_are_independent():
    acker = Acker()
    acker.init(1, 0x10, 100)
    acker.init(2, 0x20, 200)
    assert acker.ack(2, 0x20) == AckOutcome(ACK, 200, 2)
    assert _val(acker, 1) == 0x10
    assert acker.fail(1) == AckOutcome(FAIL, 100, 1)


# --- reset_timeout ---------------------------------------------------------------------------------
def test_reset_returns_reset_and_keeps_entry():
    acker = Acker()
    acker.init(ROOT, 0x77, SPOUT)
    assert acker.reset_timeout(ROOT) == AckOutcome(RESET, SPOUT, ROOT)
    assert acker.reset_timeout(ROOT) == AckOutcome(RESET, SPOUT, ROOT)
    assert _val(acker, ROOT) == 0x77
    assert acker.ack(ROOT, 0x77) == AckOutcome(ACK, SPOUT, ROOT)


def test_reset_refreshes_entry_so_it_survives_rotation():
    acker = Acker()
    acker.init(ROOT, 0x77, SPOUT)
    acker.tick()
    acker.tick()  # would be dropped by the next tick
    assert acker.reset_timeout(ROOT) == AckOutcome(RESET, SPOUT, ROOT)
    assert _ticks_survived(acker, ROOT) == TIMEOUT_BUCKET_NUM - 1


def test_reset_before_init_reports_nothing():
    acker = Acker()
    assert acker.reset_timeout(ROOT) is None
    assert ROOT in acker.pending
    assert acker.init(ROOT, 0x3, SPOUT) is None
    assert acker.reset_timeout(ROOT) == AckOutcome(RESET, SPOUT, ROOT)


# --- timeouts (tick) -------------------------------------------------------------------------------
def test_tick_drops_untouched_entry_silently_after_three_rotations():
    acker = Acker()
    assert acker.init(ROOT, 0x5, SPOUT) is None
    assert acker.tick() == 0
    assert acker.tick() == 0
    assert ROOT in acker.pending
    assert acker.tick() == 1  # dropped; tick returns a count, never an outcome
    assert ROOT not in acker.pending
    assert len(acker) == 0


def test_init_and_ack_do_not_refresh_an_existing_entry():
    acker = Acker()
    acker.ack(ROOT, 0x1)  # creates the entry
    acker.tick()
    acker.init(ROOT, 0x3, SPOUT)  # does not refresh
    acker.tick()
    acker.ack(ROOT, 0x1)  # does not refresh either; val 0x1 ^ 0x3 ^ 0x1
    assert _val(acker, ROOT) == 0x3
    assert acker.tick() == 1
    assert ROOT not in acker.pending


def test_fail_refreshes_a_held_entry():
    acker = Acker()
    acker.fail(ROOT)  # held: no INIT yet
    acker.tick()
    acker.tick()
    assert acker.fail(ROOT) is None  # refresh
    assert _ticks_survived(acker, ROOT) == TIMEOUT_BUCKET_NUM - 1


def test_fail_refresh_keeps_entry_until_late_init():
    acker = Acker()
    acker.fail(ROOT)
    acker.tick()
    acker.tick()
    acker.fail(ROOT)
    acker.tick()
    acker.tick()
    assert acker.init(ROOT, 0x9, SPOUT) == AckOutcome(FAIL, SPOUT, ROOT)


def test_entry_dropped_by_rotation_loses_its_state():
    """After expiry, a late INIT starts a fresh entry: the earlier acks are gone."""
    acker = Acker()
    acker.ack(ROOT, 0x6)
    for _ in range(TIMEOUT_BUCKET_NUM):
        acker.tick()
    assert acker.init(ROOT, 0x6, SPOUT) is None
    assert _val(acker, ROOT) == 0x6


# --- stragglers ------------------------------------------------------------------------------------
def test_stragglers_after_completion_are_orphans_that_rotate_away():
    acker = Acker()
    acker.init(ROOT, 0x30, SPOUT)
    assert acker.ack(ROOT, 0x30) == AckOutcome(ACK, SPOUT, ROOT)
    assert acker.ack(ROOT, 0x44) is None
    orphan = acker.pending.get(ROOT)
    assert orphan.spout_task == -1
    assert acker.ack(ROOT, 0x44) is None  # val back to 0, still no output without a spout task
    assert acker.fail(ROOT) is None
    assert acker.reset_timeout(ROOT) is None
    assert acker.pending.get(ROOT) is orphan
    assert _ticks_survived(acker, ROOT) == TIMEOUT_BUCKET_NUM - 1
    assert len(acker) == 0


def test_stragglers_after_fail_are_orphans():
    acker = Acker()
    acker.init(ROOT, 0x30, SPOUT)
    assert acker.fail(ROOT) == AckOutcome(FAIL, SPOUT, ROOT)
    assert acker.ack(ROOT, 0x30) is None
    assert acker.fail(ROOT) is None
    assert acker.pending.get(ROOT).spout_task == -1
    for _ in range(TIMEOUT_BUCKET_NUM):
        acker.tick()
    assert len(acker) == 0


# --- randomized tuple DAGs with 64-bit ids, delivered in any order --------------------------------
class _Tup:
    __slots__ = ("anchors", "out_ack_val")

    def __init__(self, anchors: dict[int, int]) -> None:
        self.anchors = anchors  # root -> this tuple's edge id in that root's tree
        self.out_ack_val = 0


def _simulate(rng: random.Random, n_roots: int, fail_one: bool):
    """Run a random topology as Storm's collectors would; return (messages, spout_task per root,
    roots whose tree contains the failed tuple). Messages are (kind, root, *args)."""
    msgs: list[tuple] = []
    spout_of: dict[int, int] = {}
    live: list[_Tup] = []
    for _ in range(n_roots):
        root = rng.getrandbits(64)
        spout_of[root] = rng.randrange(1, 5)
        init_val = 0
        for _ in range(rng.choice([0, 1, 1, 2, 3])):  # out tasks; 0 -> init val 0
            edge = rng.getrandbits(64)
            init_val ^= edge
            live.append(_Tup({root: edge}))
        msgs.append(("init", root, init_val, spout_of[root]))

    failed_roots: set[int] = set()
    to_fail = None
    budget = 6 * n_roots  # bound the number of emitted tuples
    while live:
        t = live.pop(rng.randrange(len(live)))
        if fail_one and to_fail is None and rng.random() < 0.15:
            to_fail = t
        for _ in range(rng.choice([0, 0, 1, 2]) if budget > 0 else 0):
            # Anchors: the input, sometimes twice (self-anchor), plus other unacked tuples.
            anchors = [t] * rng.choice([1, 1, 1, 2])
            anchors += rng.sample(live, min(len(live), rng.choice([0, 0, 1, 2])))
            for _ in range(rng.choice([0, 1, 1, 2])):  # out tasks
                budget -= 1
                out: dict[int, int] = {}
                for a in anchors:
                    if not a.anchors:
                        continue
                    edge = rng.getrandbits(64)
                    a.out_ack_val ^= edge
                    for r in a.anchors:
                        out[r] = out.get(r, 0) ^ edge
                live.append(_Tup(out))
        if t is to_fail:
            for r in t.anchors:
                msgs.append(("fail", r))
                failed_roots.add(r)
        else:
            for r, eid in t.anchors.items():
                msgs.append(("ack", r, eid ^ t.out_ack_val))
    if fail_one and to_fail is None:  # make sure something fails: fail a fresh root's tuple
        root = rng.getrandbits(64)
        spout_of[root] = 1
        msgs += [("init", root, 0x1234, 1), ("fail", root)]
        failed_roots.add(root)
    return msgs, spout_of, failed_roots


def _deliver(ackers: list[Acker], msgs: list[tuple]) -> list[tuple[int, AckOutcome]]:
    outs = []
    for i, (kind, root, *args) in enumerate(msgs):
        acker = ackers[root % len(ackers)]  # fields grouping on the root id
        out = getattr(acker, kind)(root, *args)
        if out is not None:
            outs.append((i, out))
    return outs


@pytest.mark.parametrize("seed", range(40))
def test_random_dags_any_order_ack_each_root_once_after_its_last_message(seed):
    rng = random.Random(seed)
    msgs, spout_of, _ = _simulate(rng, n_roots=rng.randrange(1, 8), fail_one=False)
    rng.shuffle(msgs)
    ackers = [Acker() for _ in range(rng.choice([1, 2, 3]))]
    outs = _deliver(ackers, msgs)

    last = {m[1]: i for i, m in enumerate(msgs)}
    assert sorted(o.root for _, o in outs) == sorted(spout_of)  # each root exactly once
    for i, o in outs:
        assert o == AckOutcome(ACK, spout_of[o.root], o.root)
        assert i == last[o.root]
    assert sum(len(a) for a in ackers) == 0


@pytest.mark.parametrize("seed", range(40))
def test_random_dags_with_one_failed_tuple_fail_its_roots(seed):
    rng = random.Random(1000 + seed)
    msgs, spout_of, failed = _simulate(rng, n_roots=rng.randrange(1, 8), fail_one=True)
    assert failed
    rng.shuffle(msgs)
    ackers = [Acker() for _ in range(rng.choice([1, 2]))]
    outs = _deliver(ackers, msgs)

    last = {m[1]: i for i, m in enumerate(msgs)}
    init_at = {m[1]: i for i, m in enumerate(msgs) if m[0] == "init"}
    first_fail_at: dict[int, int] = {}
    for i, m in enumerate(msgs):
        if m[0] == "fail":
            first_fail_at.setdefault(m[1], i)
    assert sorted(o.root for _, o in outs) == sorted(spout_of)  # one outcome per root
    for i, o in outs:
        r = o.root
        if r in failed:
            assert o == AckOutcome(FAIL, spout_of[r], r)
            assert i == max(init_at[r], first_fail_at[r])
        else:
            assert o == AckOutcome(ACK, spout_of[r], r)
            assert i == last[r]
    # Stragglers of failed roots linger as orphans, reported never, and rotate away.
    for a in ackers:
        assert all(e.spout_task == -1 for _, e in a.pending.items())
        for _ in range(TIMEOUT_BUCKET_NUM):
            assert a.tick() >= 0
        assert len(a) == 0


def _deliver_in_lists(acker: Acker, msgs: list[tuple]) -> list[AckOutcome]:
    """As a worker applies a batch: consecutive inits as one ``init_all``, consecutive acks as
    one ``ack_all``, fails one by one."""
    outs: list[AckOutcome] = []
    for kind, group in itertools.groupby(msgs, key=lambda m: m[0]):
        args = [m[1:] for m in group]
        if kind == "init":
            outs += acker.init_all(args)
        elif kind == "ack":
            outs += acker.ack_all(args)
        else:
            outs += [o for o in (acker.fail(*a) for a in args) if o is not None]
    return outs


@pytest.mark.parametrize("seed", range(40))
def test_inits_and_acks_as_lists_decide_as_one_by_one(seed):
    rng = random.Random(2000 + seed)
    msgs, _, _ = _simulate(rng, n_roots=rng.randrange(1, 12), fail_one=seed % 2 == 1)
    rng.shuffle(msgs)
    one, listed = Acker(), Acker()
    singles = [o for _, o in _deliver([one], msgs)]
    assert _deliver_in_lists(listed, msgs) == singles
    assert {r: (e.val, e.spout_task, e.failed) for r, e in listed.pending.items()} == \
        {r: (e.val, e.spout_task, e.failed) for r, e in one.pending.items()}
