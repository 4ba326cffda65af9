"""A transactional batch's default-stream tuples travel between coordinated bolts as per-target
row chunks (CHUNK_ROWS rows per tuple). Batches here are several chunks long, so chunks fill and
flush mid-batch (emitter rows, a batch bolt emitting in execute) and at finish, under shuffle,
fields, all and global groupings; every grouping must still be applied per row, every bolt must
see the rows as plain tuples of its source's default stream, and the counts must be exact. Bad
rows are rejected naming the component, stream and field, and nothing of their batch commits."""

from __future__ import annotations

import random

import pytest
import redis

from examples.transactional_count import KeyedCount, UpdateWordCounts
from state.values import ValueMap
from topology_runtime import LocalCluster
from topology_runtime.testing import wait_for
from topology_runtime.transactional import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
)
from topology_runtime.transactional.batch_executor import CHUNK_ROWS, RowChunks
from topology_runtime.transport.wire import WireTypeError
from topology_runtime.worker.bolt_executor import BoltExecutor


def test_row_chunks_fill_per_target_and_flush_the_rest():
    """The plain class: each row goes to the targets its route names; a chunk leaves at
    CHUNK_ROWS rows, the rest at flush; ``sent`` counts chunks per task."""
    sent: list[tuple[int, list, int]] = []
    head = [5, 77]

    def route(values):  # even rows to task 1, odd rows to tasks 1 and 2 (an all-grouped row)
        return [1] if values[1] % 2 == 0 else [1, 2]

    rows = RowChunks(route, lambda task, h, chunk: sent.append((task, h, list(chunk))), head)
    n = 2 * CHUNK_ROWS + 10
    for i in range(n):
        assert rows.add([head, i]) == route([head, i])
    assert [(t, len(c)) for t, _, c in sent] == [(1, CHUNK_ROWS), (1, CHUNK_ROWS), (2, CHUNK_ROWS)]
    counts = rows.flush()
    assert counts == {1: 3, 2: 2} and all(h is head for _, h, _ in sent)
    got: dict[int, list[int]] = {}
    for t, _, chunk in sent:
        got.setdefault(t, []).extend(v[0] for v in chunk)  # a row is the values after the head
    assert got == {1: list(range(n)), 2: [i for i in range(n) if i % 2]}  # every row once per target, in order
    assert rows.flush() == counts and len(sent) == 5  # nothing left to send


def test_row_router_checks_the_head_once_and_refuses_a_bad_row_value():
    """``row_router(stream, head)`` routes ``[head, *row]`` like ``router(stream)`` and refuses
    what ``check_values`` refuses, naming the component, stream and field."""

    class Route:
        fields = ["id", "word", "n"]

        @staticmethod
        def targets(values):
            return [len(values[1])]

    class Ex:  # just what row_router reads of a BoltExecutor
        component = "split"

        def _route(self, stream, direct):
            assert stream == "default" and not direct
            return Route

    head = [5, 77]
    targets = BoltExecutor.row_router(Ex(), "default", head)
    assert targets(["ab", 1]) == [2] and targets(("abc", None)) == [3]
    assert targets([["x", {"k": 1}], 2]) == [2]  # nested values: the full check, still carried
    with pytest.raises(WireTypeError, match="component 'split' stream 'default' field 'n'"):
        targets(["ab", object()])
    with pytest.raises(WireTypeError, match="component 'split' stream 'default' field 'word'"):
        targets([{1, 2}, 1])
    with pytest.raises(ValueError, match="component 'split' stream 'default': emitted 4 value"):
        targets(["ab", 1, 2])
    with pytest.raises(WireTypeError, match="component 'split' stream 'default' field 'id'"):
        BoltExecutor.row_router(Ex(), "default", object())  # the head, checked once up front


def test_row_router_on_a_fields_grouping_routes_each_row_as_router_routes_its_values():
    """With a fields grouping on a field of the row, rows are routed without building
    ``[head, *row]``: the same tasks as the whole values get, the same refusals."""
    from topology_runtime.api.builder import FIELDS
    from topology_runtime.worker import routing

    pick = routing.make_picker(FIELDS, [11, 12, 13], (1,), set(), 0)

    class Route:
        fields = ["id", "word", "n"]
        targets = staticmethod(pick)

    class Ex:
        component = "count"

        def _route(self, stream, direct):
            return Route

    head = [5, 77]
    targets = BoltExecutor.row_router(Ex(), "default", head)
    rows = [(f"w{i}", i) for i in range(500)] + [(i, None) for i in range(50)] + [(["n", 1], 2)]
    assert [targets(r) for r in rows] == [pick([head, *r]) for r in rows]
    with pytest.raises(WireTypeError, match="component 'count' stream 'default' field 'word'"):
        targets([{1, 2}, 1])


class Split(BatchBolt):
    """Emits one tuple per input while executing (not at finish): chunks fill mid-batch."""

    outputs = ["tx", "word", "n"]

    def prepare(self, conf, context, batch_id):
        self.id = batch_id

    def execute(self, tup):
        self.emit([self.id, tup["word"], 1])


class RowCount(BatchBolt):
    """Counts the rows it sees and checks they look like tuples of the spout's default stream."""

    outputs = ["tx", "who", "n"]

    def prepare(self, conf, context, batch_id):
        self.id, self.n, self.task = batch_id, 0, context.task_index
        self.name = f"{context.component_id}-{self.task}"

    def execute(self, tup):
        if not (tup.stream == "default" and tup.source_component == "spout" and tup.fields == ["tx", "word"]
                and tup[0] == self.id and isinstance(tup["word"], str)):
            raise AssertionError(f"a row arrived as {tup!r} ({tup.fields})")  # fails the batch: the run times out
        self.n += 1

    def finish_batch(self):
        self.emit([self.id, self.name, self.n])


class SaveTotals(BatchBolt, Committer):
    def prepare(self, conf, context, batch_id):
        self.id, self.totals = batch_id, {}
        self.values = ValueMap(redis.Redis.from_url(conf["redis.url"]), "chunk-totals")

    def execute(self, tup):
        self.totals[tup["who"]] = self.totals.get(tup["who"], 0) + tup["n"]

    def finish_batch(self):
        self.values.multi_add(self.id.txid, self.totals)


def test_row_chunks_keep_groupings_and_counts_exact(redis_url):
    rows_per_partition, take = 1500, 700  # 3 batches; up to 1,400 rows per emitter task per batch
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(40)]
    data = {p: [[rng.choice(vocab)] for _ in range(rows_per_partition)] for p in range(3)}
    truth: dict[str, int] = {}
    for part in data.values():
        for (w,) in part:
            truth[w] = truth.get(w, 0) + 1
    total = 3 * rows_per_partition
    assert take * 2 > 2 * CHUNK_ROWS  # an emitter task's rows for one target span several chunks

    b = TransactionalTopologyBuilder("chunks", "spout", MemoryTransactionalSpout(data, ["word"], take), 2)
    b.set_bolt("split", Split(), 2).shuffle_grouping("spout")
    b.set_bolt("count", KeyedCount(), 2).fields_grouping("split", ["word"])
    b.set_committer_bolt("update", UpdateWordCounts(), 2).fields_grouping("count", ["word"])
    b.set_bolt("every", RowCount(), 2).all_grouping("spout")
    b.set_bolt("one", RowCount(), 1).global_grouping("spout")
    b.set_committer_bolt("totals", SaveTotals(), 1).global_grouping("every").global_grouping("one")
    client = redis.Redis.from_url(redis_url)
    client.delete("word-counts", "chunk-totals")
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("chunks", b.create_topology(), {"redis.url": redis_url, "topology.max.spout.pending": 2},
                             timeout=120)
    assert status.state == "completed" and status.errors == []
    got = ValueMap(client, "word-counts").get(list(truth))
    assert {w: v.value for w, v in got.items()} == truth
    totals = ValueMap(client, "chunk-totals").get(["every-0", "every-1", "one-0"])
    assert {k: v.value for k, v in totals.items()} == {"every-0": total, "every-1": total, "one-0": total}
    # The metrics count the user's tuples, not the chunks that carried them.
    emitted = {name: c.emitted for name, c in status.components.items()}
    assert emitted["spout"] >= total * 4  # each row to split, every (x2) and one


class BadRows(MemoryTransactionalSpout):
    """Partition 1's second batch holds a row the stream cannot carry."""

    def __init__(self, data, take, bad):
        super().__init__(data, ["word"], take)
        self.bad = bad

    def emit_partition_batch_new(self, tx, emit, partition, last_meta):
        meta = super().emit_partition_batch_new(tx, emit, partition, last_meta)
        if partition == 1 and meta[0] >= self.take:
            emit(self.bad)
        return meta


def _run_bad(redis_url, name: str, bad) -> tuple[list[str], dict]:
    data = {p: [[f"w{i % 7}"] for i in range(600)] for p in range(2)}
    b = TransactionalTopologyBuilder(name, "spout", BadRows(data, 300, bad), 1)
    b.set_bolt("count", KeyedCount(), 2).fields_grouping("spout", ["word"])
    b.set_committer_bolt("update", UpdateWordCounts(), 1).fields_grouping("count", ["word"])
    client = redis.Redis.from_url(redis_url)
    key = f"counts-{name}"
    client.delete(key)
    with LocalCluster(workers=1) as cluster:
        run = cluster.submit(name, b.create_topology(), {"redis.url": redis_url, "count.key": key})
        try:
            assert wait_for(lambda: run.status().errors, timeout=60)
            errors = [e["error"] for e in run.status().errors]
        finally:
            run.kill(timeout=30)
    got = ValueMap(client, key).get([f"w{i}" for i in range(7)])
    return errors, {w: v.value for w, v in got.items() if v is not None}


def test_bad_row_names_component_stream_and_field_and_its_batch_never_commits(redis_url):
    errors, counts = _run_bad(redis_url, "badrow-len", ["w1", "extra"])
    assert any("component 'spout' stream 'default': emitted 3 value(s) but the stream declares 2 field(s)"
               in e for e in errors), errors
    # The first batch (300 rows per partition) committed; the second, with the bad row, never did.
    assert sum(counts.values()) == 600

    errors, counts = _run_bad(redis_url, "badrow-type", [object()])
    assert any("component 'spout' stream 'default' field 'word': object value" in e for e in errors), errors
    assert sum(counts.values()) == 600
