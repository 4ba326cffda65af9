"""Fields grouping's picker: the same task for the same key in every process, memo or not: the
task owning the key's group (state/keygroups.py)."""

from __future__ import annotations

from topology_runtime.api.builder import FIELDS
from topology_runtime.transport.wire import field_hash
from topology_runtime.worker import routing


def _plain(tasks, idx, groups=128):
    return lambda values: [tasks[(field_hash(values, idx) % groups) * len(tasks) // groups]]


def test_fields_picker_memo_agrees_with_the_hash_for_every_key_type(monkeypatch):
    monkeypatch.setattr(routing, "FIELDS_MEMO_KEYS", 50)  # the memo fills and is cleared many times
    tasks = [7, 8, 9, 10, 11]
    pick, plain = routing.make_picker(FIELDS, tasks, (1,), set(), 0), _plain(tasks, (1,))
    keys = [f"w{i}" for i in range(400)] + list(range(200)) + [float(i) for i in range(50)] + [True, None, b"x", [1, "a"]]
    for _ in range(2):  # the second pass is served by the memo where it holds the key
        for k in keys:
            assert pick([0, k]) == plain([0, k]), k
    # equal keys of different types keep their own hash (1 == 1.0 == True, not the same bytes)
    assert [pick([0, 1]), pick([0, 1.0]), pick([0, True])] == [plain([0, 1]), plain([0, 1.0]), plain([0, True])]


def test_fields_picker_on_two_fields_hashes_both():
    tasks = [1, 2, 3]
    pick, plain = routing.make_picker(FIELDS, tasks, (0, 2), set(), 0), _plain(tasks, (0, 2))
    for a in range(30):
        assert pick([f"k{a}", "ignored", a]) == plain([f"k{a}", "other", a])


def test_a_row_picker_picks_what_the_picker_picks_for_the_whole_values(monkeypatch):
    """A transactional chunk's rows are routed without their head: ``row_picker(pick, 1)`` on a
    row must choose the task ``pick`` chooses for ``[head, *row]``, memo or not, every key type."""
    monkeypatch.setattr(routing, "FIELDS_MEMO_KEYS", 50)
    tasks = [3, 4, 5, 6]
    for idx in ((1,), (2,)):
        pick = routing.make_picker(FIELDS, tasks, idx, set(), 0)
        by_row = routing.row_picker(pick, 1)
        keys = [f"w{i}" for i in range(300)] + list(range(100)) + [2.5, True, None, b"x", [1, "a"]]
        for _ in range(2):
            for k in keys:
                row = [k, "x"] if idx == (1,) else ["x", k]
                assert by_row(row) == pick([[7, 1], *row]), (idx, k)
    assert routing.row_picker(routing.make_picker(FIELDS, tasks, (0,), set(), 0), 1) is None  # key in the head
    assert routing.row_picker(routing.make_picker(FIELDS, tasks, (0, 1), set(), 0), 1) is None  # two fields
    assert routing.row_picker(lambda values: [3], 1) is None  # not a fields grouping
