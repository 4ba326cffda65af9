"""The exactly-once spout lineage (reliability/lineage.py): roots that name their spout task and
entry, barriers that mark where a checkpoint's data ends, commits that hand back exactly the
message ids a checkpoint covered, and failed roots resolved by index."""

from __future__ import annotations

from topology_runtime.reliability.lineage import SpoutLineage, spout_task_of


def test_roots_name_their_spout_task_and_resolve_to_their_entry():
    a, b = SpoutLineage(3), SpoutLineage(70_000)
    ra = [a.add(f"a{i}") for i in range(5)]
    rb = [b.add(("b", i)) for i in range(5)]
    assert len(set(ra) | set(rb)) == 10  # no two roots alike, across tasks too
    assert {spout_task_of(r) for r in ra} == {3} and {spout_task_of(r) for r in rb} == {70_000}
    assert [a.msg_id(r) for r in ra] == [f"a{i}" for i in range(5)]
    assert not SpoutLineage.known(a.msg_id(rb[0]))  # another task's root is not this task's entry


def test_a_commit_hands_back_what_its_barrier_followed_and_nothing_after():
    lin = SpoutLineage(1)
    roots = [lin.add(i) for i in range(3)]
    lin.barrier(1)
    late = [lin.add(i) for i in range(3, 5)]  # after barrier 1: checkpoint 2's
    assert len(lin) == 5
    assert lin.committed(1) == [0, 1, 2]
    assert len(lin) == 2
    assert not SpoutLineage.known(lin.msg_id(roots[0]))  # committed: no longer resolvable
    assert [lin.msg_id(r) for r in late] == [3, 4]  # indices still right after the trim
    assert lin.committed(1) == []  # a commit heard twice hands back nothing more


def test_a_later_commit_covers_every_earlier_barrier_and_a_commit_without_barrier_none():
    lin = SpoutLineage(2)
    assert lin.committed(7) == []  # a checkpoint this task emitted no barrier for
    for txid in (1, 2, 3):
        lin.add(f"x{txid}")
        lin.barrier(txid)
    lin.add("after")
    assert lin.committed(2) == ["x1", "x2"]
    assert lin.committed(3) == ["x3"]
    assert len(lin) == 1 and lin.msg_id(lin.prefix | lin.base) == "after"


def test_an_empty_interval_commits_nothing_and_keeps_the_sequence():
    lin = SpoutLineage(0)
    lin.barrier(1)
    assert lin.committed(1) == []
    r = lin.add("first")
    assert lin.msg_id(r) == "first"


def test_exactly_once_spouts_are_bounded_by_bytes_and_by_a_count_only_when_one_is_set():
    # Pending in exactly-once mode is a checkpoint interval's emits: the default count (1000)
    # would cap a spout at 1000 tuples per interval, so there only the byte bound holds by default.
    from topology_runtime.api.config import DEFAULT_MAX_SPOUT_PENDING, DEFAULTS, spout_pending_limits

    default_bytes = DEFAULTS["topology.max.spout.pending.bytes"]
    assert spout_pending_limits({}) == (DEFAULT_MAX_SPOUT_PENDING, default_bytes)
    assert spout_pending_limits({"topology.state.exactly.once": True}) == (None, default_bytes)
    assert spout_pending_limits({"topology.state.exactly.once": True, "topology.max.spout.pending": 50}) == (
        50, default_bytes)
