"""The in-memory transactional spout's rows: tuple rows are kept as they are (immutable, no copy
for a large data set), list rows are copied, and either way a batch and its replay emit the
same rows whatever the caller changes afterwards."""

from __future__ import annotations

import copy

from topology_runtime.transactional import MemoryTransactionalSpout


def test_tuple_rows_are_kept_and_list_rows_copied():
    tuples = [("a",), ("b",), ("c",)]
    lists = [["x"], ["y"]]
    spout = MemoryTransactionalSpout({0: tuples, 1: lists}, ["word"], 2)
    assert all(kept is given for kept, given in zip(spout.data[0], tuples))
    assert spout.data[0] is not tuples  # the partition list itself is the spout's own
    assert all(kept == given and kept is not given for kept, given in zip(spout.data[1], lists))
    tuples.append(("late",))
    lists[0][0] = "changed"
    assert spout.data == {0: [("a",), ("b",), ("c",)], 1: [["x"], ["y"]]}


def test_batches_and_replays_emit_the_same_rows():
    rows = [(f"w{i}",) for i in range(5)]
    spout = copy.deepcopy(MemoryTransactionalSpout({0: rows}, ["word"], 2))  # a task's copy
    first: list = []
    meta = spout.emit_partition_batch_new(None, first.append, 0, None)
    second: list = []
    meta2 = spout.emit_partition_batch_new(None, second.append, 0, meta)
    replay: list = []
    spout.emit_partition_batch(None, replay.append, 0, meta2)
    assert (meta, meta2) == ([0, 2], [2, 2])
    assert first == rows[:2] and second == replay == rows[2:4]
    last: list = []
    assert spout.emit_partition_batch_new(None, last.append, 0, meta2) == [4, 1] and last == rows[4:]
    assert spout.exhausted({0: [4, 1]}) and not spout.exhausted({0: meta2})
