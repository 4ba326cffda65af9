"""Trident's API in-process (no cluster): Storm's build-time field validation (T8), tuple views
(T12), deterministic component ids (T10), the compiled components' readable names, the refused
pairings and merges, and the doc examples (T15) run through the processors of one task.

The harness at the top runs a stream's operations for one batch in this process: every
operation from the stream's source to the stream, each node's processor prepared and bound as a
segment bolt's task does it, repartitions taken as pass-throughs (one task sees the whole
batch), or, with ``partition_index`` and ``num_partitions``, as the task of that partition."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from trident_components import CountAsAggregator, CountReducer, Split, StringLength, TrueFilter

from topology_runtime.api.builder import TopologyError
from topology_runtime.connectors import RedisStreamsOpaqueTransactionalSpout, RedisStreamsTransactionalSpout
from topology_runtime.trident import (
    Aggregator,
    CombinerAggregator,
    Count,
    Debug,
    Equals,
    Filter,
    FilterNull,
    FirstN,
    FixedBatchSpout,
    Function,
    MapGet,
    MemoryMapState,
    Negate,
    RedisMapState,
    StateUpdater,
    Sum,
    TridentError,
    TridentTopology,
    TridentTuple,
    TupleCollectionGet,
)
from topology_runtime.trident.graph import DRPC, PARTITION, SPOUT
from topology_runtime.trident.processors import BatchInfo, Each, OperationContext, Project
from topology_runtime.trident.updaters import MapCombinerUpdater


# --- operations of Storm's tests and docs ------------------------------------------------------
# --- the in-process harness --------------------------------------------------------------------
class _Task:
    """What a processor's ``prepare`` gets as its task: this partition of the states it uses."""

    def __init__(self, topology: TridentTopology, conf: dict, index: int, n: int) -> None:
        self.t, self.conf, self.index, self.n = topology, conf, index, n
        self.states: dict[int, Any] = {}

    def state(self, state_id: int) -> Any:
        if state_id not in self.states:
            factory = self.t.graph.states[state_id].factory
            self.states[state_id] = factory.make_state(self.conf, self.index, self.n)
        return self.states[state_id]


def run_batch(topology: TridentTopology, stream: Any, rows: list[list], *, txid: int = 1,
              batch_id: Any = "batch-1", partition_index: int = 0, num_partitions: int = 1,
              conf: dict | None = None) -> list[list]:
    """The rows ``stream`` gives for one batch of ``rows`` from its source, run in one task."""
    target = getattr(stream, "_node", None) or stream.stream._node
    needed: dict[int, Any] = {}
    todo = [target]
    while todo:
        n = todo.pop()
        if n.id not in needed:
            needed[n.id] = n
            todo.extend(n.parents)
    nodes = sorted(needed.values(), key=lambda n: n.id)
    sources = [n for n in nodes if n.kind in (SPOUT, DRPC)]
    assert len(sources) == 1, "one source per harness run"
    task = _Task(topology, conf or {}, partition_index, num_partitions)
    out: list[list] = []
    pushes: dict[int, Any] = {}
    finishes: dict[int, Any] = {}
    info = BatchInfo(batch_id, txid)
    for n in reversed(nodes):  # children first: an emit calls their pushes
        if n.kind in (SPOUT, DRPC):
            continue
        targets = [(pushes[c.id], pi) for c in n.children if c.id in pushes
                   for pi, p in enumerate(c.parents) if p is n]
        if n is target:
            targets.append((lambda pi, row: out.append(list(row)), 0))

        def emit(row, targets=targets):
            for push, pi in targets:
                push(pi, row)
        if n.kind == PARTITION:
            pushes[n.id] = lambda pi, row, emit=emit: emit(row)
            continue
        proc = n.processor
        proc.prepare(OperationContext(task.conf, partition_index, num_partitions,
                                      list(getattr(proc, "input_fields", [])), "harness"), task)
        pushes[n.id], finishes[n.id] = proc.bind(info, emit)
    source = sources[0]
    for child in source.children:
        if child.id in pushes:
            for row in rows:
                pushes[child.id](0, list(row))
    for n in nodes:  # parents first
        f = finishes.get(n.id)
        if f is not None:
            f()
    return out


def spout_stream(t: TridentTopology, fields: list[str], txid: str = "tx") -> Any:
    return t.new_stream(txid, FixedBatchSpout(fields, 10, [[None] * len(fields)]))


def multiset(rows: list[list]) -> Counter:
    return Counter(json.dumps(r) for r in rows)


# --- T8: build-time field validation --------------------------------------------------------------
def _sentences(t: TridentTopology) -> Any:
    return t.new_stream("tx-sentences", FixedBatchSpout(["sentence"], 3, [["the cow"]]))


def _words(t: TridentTopology) -> Any:
    return _sentences(t).each(["sentence"], Split(), ["word"])


T8_CASES = {
    "each": (lambda t: _sentences(t).each(["sentence1"], Split(), ["word"]), "sentence1", ["sentence"]),
    "group_by": (lambda t: _words(t).group_by(["word1"]), "word1", ["sentence", "word"]),
    "grouped aggregate": (lambda t: _words(t).group_by(["word"]).aggregate(["word1"], Count(), ["count"]),
                          "word1", ["sentence", "word"]),
    "project": (lambda t: _sentences(t).project(["sentence1"]), "sentence1", ["sentence"]),
    "partition_by": (lambda t: _sentences(t).partition_by(["sentence1"]), "sentence1", ["sentence"]),
    "partition_aggregate": (lambda t: _words(t).partition_aggregate(["word1"], Count(), ["count"]),
                            "word1", ["sentence", "word"]),
    "grouped persistent_aggregate": (
        lambda t: _words(t).group_by(["word"]).persistent_aggregate(MemoryMapState(), ["non-existent"], Count(),
                                                                     ["count"]),
        "non-existent", ["sentence", "word"]),
    "partition_persist": (
        lambda t: _sentences(t).partition_persist(MemoryMapState(), ["non-existent"], MapCombinerUpdater(Count(), 1),
                                                  ["count"]),
        "non-existent", ["sentence"]),
    "state_query on a DRPC stream": (
        lambda t: t.new_drpc_stream("words").each(["args"], Split(), ["word"]).group_by(["word"]).state_query(
            _words(t).group_by(["word"]).persistent_aggregate(MemoryMapState(), Count(), ["count"]),
            ["word1"], MapGet(), ["count"]),
        "word1", ["args", "word"]),
    "filter": (lambda t: _sentences(t).each(["nope"], FilterNull()), "nope", ["sentence"]),
    "min_by": (lambda t: _sentences(t).min_by("nope"), "nope", ["sentence"]),
    "chained aggregate": (lambda t: _words(t).chained_agg().aggregate(["nope"], Sum(), ["s"]), "nope",
                          ["sentence", "word"]),
    "join": (lambda t: (lambda w: t.join(w, ["nope"], w, ["word"], ["word", "a", "b"]))(_words(t)), "nope",
             ["sentence", "word"]),
}


@pytest.mark.parametrize("case", list(T8_CASES))
def test_an_unknown_input_field_is_refused_at_the_call_naming_it_and_the_fields_that_exist(case):
    make, bad, existing = T8_CASES[case]
    with pytest.raises(TridentError) as e:
        make(TridentTopology())
    assert repr(bad) in str(e.value)
    assert repr(existing) in str(e.value)
    assert isinstance(e.value, TopologyError)


def test_the_valid_t8_pipeline_builds():
    t = TridentTopology()
    words = _words(t)
    counts = words.group_by(["word"]).persistent_aggregate(MemoryMapState(), Count(), ["count"])
    words.group_by(["word"]).aggregate(["word"], Count(), ["n"])
    words.partition_aggregate(["word"], Count(), ["n"])
    words.project(["word"]).partition_by(["word"])
    words.project(["sentence"]).partition_persist(MemoryMapState(), ["sentence"], MapCombinerUpdater(Count(), 0), ["c"])
    (t.new_drpc_stream("words").each(["args"], Split(), ["word"]).group_by(["word"])
     .state_query(counts, ["word"], MapGet(), ["count"]).each(["count"], FilterNull())
     .aggregate(["count"], Sum(), ["sum"]))
    topology = t.build()
    assert "spout-tx-sentences" in topology.components and "spout-words" in topology.components


# --- duplicate output fields --------------------------------------------------------------------------
DUPLICATES = {
    "each appends an existing field": (lambda t, s: s.each(["sentence"], Split(), ["sentence"]), "sentence"),
    "each names a field twice": (lambda t, s: s.each(["sentence"], Split(), ["w", "w"]), "w"),
    "state_query appends an existing field": (
        lambda t, s: s.state_query(s.group_by(["sentence"]).persistent_aggregate(MemoryMapState(), Count(), ["c"]),
                                   ["sentence"], MapGet(), ["sentence"]), "sentence"),
    "grouped aggregate outputs the group field again": (
        lambda t, s: s.group_by(["sentence"]).aggregate(Count(), ["sentence"]), "sentence"),
    "chained aggregations name one output twice": (
        lambda t, s: s.chained_agg().aggregate(Count(), ["n"]).aggregate(Count(), ["n"]).chain_end(), "n"),
    "project names a field twice": (lambda t, s: s.project(["sentence", "sentence"]), "sentence"),
    "map names a field twice": (lambda t, s: s.map(lambda tup: [1, 2], ["a", "a"]), "a"),
    "join names an output twice": (lambda t, s: t.join(s, ["sentence"], s.each(["sentence"], Split(), ["w"]),
                                                       ["sentence"], ["k", "k"]), "k"),
}


@pytest.mark.parametrize("case", list(DUPLICATES))
def test_a_duplicate_output_field_is_refused_naming_it(case):
    make, dup = DUPLICATES[case]
    t = TridentTopology()
    with pytest.raises(TridentError, match="duplicate field") as e:
        make(t, _sentences(t))
    assert repr(dup) in str(e.value)


def test_fields_given_as_one_string_are_refused_with_the_fix():
    s = _sentences(TridentTopology())
    with pytest.raises(TridentError, match=r"for one write \['sentence'\]"):
        s.project("sentence")
    with pytest.raises(TridentError, match=r"for one write \['word'\]"):
        s.each(["sentence"], Split(), "word")


# --- T12: tuple views ---------------------------------------------------------------------------------
def test_t12_a_fresh_tuple_reads_by_field_and_position():
    t = TridentTuple.of(["a", "b", "c"], [3, 2, 1])
    assert (t["a"], t["b"], t["c"]) == (3, 2, 1)
    assert (t[0], t[1], t[2]) == (3, 2, 1)
    assert t.values == [3, 2, 1] and len(t) == 3 and list(t) == [3, 2, 1]
    assert t.get("z", "none") == "none"
    with pytest.raises(KeyError, match="'z'"):
        t["z"]


def test_t12_a_projection_sees_only_its_fields_in_their_order():
    fields = ["a", "b", "c", "d", "e"]
    row = [3, 2, 1, 4, 5]
    view = TridentTuple(["d", "a"], [fields.index("d"), fields.index("a")]).point(row)
    assert view.values == [4, 3]
    assert (view[0], view[1], view["d"], view["a"]) == (4, 3, 4, 3)
    with pytest.raises(KeyError, match="'b'"):
        view["b"]
    # select((c, a)) on [1, 2, 3]
    assert TridentTuple(["c", "a"], [2, 0]).point([1, 2, 3]).values == [3, 1]


def test_t12_appends_then_a_projection_then_an_append_resolve_to_the_newest_value():
    t = TridentTopology()
    s = spout_stream(t, ["a", "b", "c"])
    appended = (s.each([], lambda tup: [[4, 5]], ["d", "e"])
                .each([], lambda tup: [[7]], ["f"]))
    assert appended.output_fields == ["a", "b", "c", "d", "e", "f"]
    assert run_batch(t, appended, [[1, 2, 3]]) == [[1, 2, 3, 4, 5, 7]]
    root = spout_stream(t, ["a", "b"], "tx-root").each([], lambda tup: [[3]], ["c"])
    assert run_batch(t, root, [["a", 1]]) == [["a", 1, 3]]

    seen: list[Any] = []
    s2 = spout_stream(t, ["a", "b", "c"], "tx2")
    projected = (s2.each([], lambda tup: [[5]], ["e"]).each([], lambda tup: [[6]], ["f"])
                 .project(["a", "f", "b"]).each([], lambda tup: [[8]], ["c"]))
    assert projected.output_fields == ["a", "f", "b", "c"]
    last = projected.peek(lambda tup: seen.append((tup["c"], tup["a"], tup["f"], tup.values)))
    assert run_batch(t, last, [[1, 2, 3]]) == [[1, 6, 2, 8]]
    assert seen == [(8, 1, 6, [1, 6, 2, 8])]


def test_t12_an_operation_reads_its_input_fields_by_position_within_them():
    got: list[Any] = []

    class Record(Function):
        def execute(self, tup, collector):
            got.append((tup[0], tup[1], tup["c"], tup["a"], tup.fields))
            collector.emit([tup[0] * 10 + tup[1]])

    each = Each(["a", "b", "c"], [2, 0], Record())
    each.prepare(OperationContext({}, 0, 1, ["a", "b", "c"], "x"), None)
    rows: list[list] = []
    push, finish = each.bind(BatchInfo("b", 1), rows.append)
    push(0, [1, 2, 3])
    push(0, [7, None, 9])
    assert finish is None
    assert got == [(3, 1, 3, 1, ["c", "a"]), (9, 7, 9, 7, ["c", "a"])]
    assert rows == [[1, 2, 3, 31], [7, None, 9, 97]]  # the whole input, the function's value appended
    proj = Project(["a", "b", "c"], [2, 0])
    out: list[list] = []
    ppush, _ = proj.bind(BatchInfo("b", 1), out.append)
    ppush(0, [1, 2, 3])
    assert out == [[3, 1]]


# --- T10: deterministic component ids ------------------------------------------------------------------
def _named_topology():
    t = TridentTopology()
    s = t.new_stream("tx-ids", FixedBatchSpout(["sentence"], 3, [["the cow"]]))
    (s.name("abc").each(["sentence"], Split(), ["word"]).partition_by(["word"])
     .name("def").each(["word"], StringLength(), ["len"]).partition_by(["len"])
     .name("ghi").each(["word"], FilterNull()).group_by(["word"])
     .persistent_aggregate(MemoryMapState(), Count(), ["count"]))
    t.new_drpc_stream("q").each(["args"], Split(), ["w"]).aggregate(Count(), ["n"])
    return t.build()


def test_t10_component_ids_are_the_same_over_repeated_builds_and_carry_the_labels():
    first = _named_topology()
    ids = sorted(first.components)
    for _ in range(100):
        assert sorted(_named_topology().components) == ids
    bolts = [c for c in ids if c.startswith("b-")]
    assert bolts == ["b-0-abc", "b-1-abc-def", "b-2-abc-def-ghi", "b-3-abc-def-ghi", "b-4-split-aggregate",
                     "b-5-aggregate"]


def test_the_compiled_components_have_readable_names():
    t = TridentTopology()
    counts = (t.new_stream("tx-words", FixedBatchSpout(["sentence"], 3, [["the cow"]]))
              .each(["sentence"], Split(), ["word"]).group_by(["word"])
              .persistent_aggregate(MemoryMapState(), Count(), ["count"]))
    (t.new_drpc_stream("words").each(["args"], Split(), ["word"]).group_by(["word"])
     .state_query(counts, ["word"], MapGet(), ["count"]).each(["count"], FilterNull())
     .aggregate(["count"], Sum(), ["sum"]))
    assert sorted(t.build().components) == [
        "b-0-split-aggregate", "b-1-persist", "b-2-split", "b-3-query-filter_null-aggregate", "b-4-aggregate",
        "coord-tx-words", "join-words", "prepare-words", "results-words", "return-words", "spout-tx-words",
        "spout-words"]


def test_a_plain_callables_name_shows_in_its_component():
    t = TridentTopology()

    def tokenize(tup):
        return [[w] for w in tup[0].split()]
    t.new_drpc_stream("f").each(["args"], tokenize, ["w"]).shuffle().each(["w"], FilterNull())
    assert [c for c in sorted(t.build().components) if c.startswith("b-")] == ["b-0-tokenize", "b-1-filter_null"]


# --- refused pairings and merges ------------------------------------------------------------------------
def test_an_opaque_spout_with_a_transactional_map_state_is_refused_at_build():
    t = TridentTopology()
    s = t.new_stream("tx-opaque", RedisStreamsOpaqueTransactionalSpout(["s"], ["word"]))
    s.group_by(["word"]).persistent_aggregate(RedisMapState.transactional(key_prefix="p"), Count(), ["count"])
    with pytest.raises(TridentError) as e:
        t.build()
    msg = str(e.value)
    assert "opaque" in msg and "'tx-opaque'" in msg and "transactional map state" in msg
    assert "RedisMapState.opaque()" in msg


@pytest.mark.parametrize("state", [RedisMapState.opaque(key_prefix="p"), RedisMapState.non_transactional(key_prefix="p"),
                                   MemoryMapState()], ids=["opaque", "non-transactional", "memory"])
def test_an_opaque_spout_with_other_states_builds(state):
    t = TridentTopology()
    s = t.new_stream("tx-opaque", RedisStreamsOpaqueTransactionalSpout(["s"], ["word"]))
    s.group_by(["word"]).persistent_aggregate(state, Count(), ["count"])
    assert "spout-tx-opaque" in t.build().components


def test_a_transactional_spout_with_a_transactional_map_state_builds():
    t = TridentTopology()
    s = t.new_stream("tx-t", RedisStreamsTransactionalSpout(["s"], ["word"]))
    s.group_by(["word"]).persistent_aggregate(RedisMapState.transactional(key_prefix="p"), Count(), ["count"])
    assert "b-1-persist" in t.build().components


def test_merging_or_joining_streams_of_two_spouts_is_refused_naming_both():
    t = TridentTopology()
    a = t.new_stream("tx-a", FixedBatchSpout(["word"], 2, [["x"]]))
    b = t.new_stream("tx-b", FixedBatchSpout(["word"], 2, [["y"]]))
    t.merge(a, b).each(["word"], FilterNull())
    with pytest.raises(TridentError) as e:
        t.build()
    msg = str(e.value)
    assert "'tx-a'" in msg and "'tx-b'" in msg and "different spouts" in msg

    t2 = TridentTopology()
    a2 = t2.new_stream("tx-a", FixedBatchSpout(["word"], 2, [["x"]]))
    b2 = t2.new_stream("tx-b", FixedBatchSpout(["word"], 2, [["y"]]))
    t2.join(a2, ["word"], b2, ["word"], ["word"])
    with pytest.raises(TridentError, match="'tx-a'.*'tx-b'.*different spouts"):
        t2.build()


def test_merging_a_drpc_stream_with_a_spouts_stream_is_refused():
    t = TridentTopology()
    a = t.new_stream("tx-a", FixedBatchSpout(["word"], 2, [["x"]]))
    d = t.new_drpc_stream("q")
    t.merge(a, d)
    with pytest.raises(TridentError, match="'tx-a'.*'q'|'q'.*'tx-a'"):
        t.build()


def test_other_refusals_name_what_is_wrong():
    t = TridentTopology()
    t.new_stream("tx", FixedBatchSpout(["w"], 2, [["x"]]))
    with pytest.raises(TridentError, match="'tx' is used twice"):
        t.new_stream("tx", FixedBatchSpout(["w"], 2, [["x"]]))
    t.new_drpc_stream("f")
    with pytest.raises(TridentError, match="'f' is defined twice"):
        t.new_drpc_stream("f")
    with pytest.raises(TridentError, match="no stream"):
        TridentTopology().build()
    t = TridentTopology()
    s = spout_stream(t, ["a"])
    with pytest.raises(TridentError, match="one output field"):
        s.aggregate(Count(), ["a1", "a2"])
    with pytest.raises(TridentError, match="state factory"):
        s.partition_persist(object(), ["a"], MapCombinerUpdater(Count(), 0))
    with pytest.raises(TridentError, match="StateUpdater"):
        s.partition_persist(MemoryMapState(), ["a"], Count())
    with pytest.raises(TridentError, match="merge: give at least two streams"):
        t.merge(s)
    with pytest.raises(TridentError, match="out_fields"):
        t.join(s, ["a"], s.each(["a"], Split(), ["b"]), ["a"], ["a"])


# --- T15: the doc examples, in one task ---------------------------------------------------------------
def test_t15_each_appends_a_functions_emits_and_zero_emits_drop_the_tuple():
    t = TridentTopology()

    class MyFunction(Function):
        def execute(self, tup, collector):
            for i in range(tup["b"]):
                collector.emit([i])
    s = spout_stream(t, ["a", "b", "c"]).each(["b"], MyFunction(), ["d"])
    assert s.output_fields == ["a", "b", "c", "d"]
    assert run_batch(t, s, [[1, 2, 3], [4, 1, 6], [3, 0, 8]]) == [[1, 2, 3, 0], [1, 2, 3, 1], [4, 1, 6, 0]]


def test_t15_a_filter_keeps_matching_tuples_whole():
    t = TridentTopology()

    class MyFilter(Filter):
        def is_keep(self, tup):
            return tup[0] == 1 and tup[1] == 2
    s = spout_stream(t, ["a", "b", "c"]).each(["b", "a"][::-1], MyFilter())
    assert s.output_fields == ["a", "b", "c"]
    assert run_batch(t, s, [[1, 2, 3], [2, 1, 1], [2, 3, 4]]) == [[1, 2, 3]]
    # a plain callable as the filter, and filter() on every field
    f = spout_stream(t, ["a", "b", "c"], "tx2").filter(lambda tup: tup["c"] > 1)
    assert run_batch(t, f, [[1, 2, 3], [2, 1, 1], [2, 3, 4]]) == [[1, 2, 3], [2, 3, 4]]


PARTITIONS = [[["a", 1], ["b", 2]], [["a", 3], ["c", 8]], [["e", 1], ["d", 9], ["d", 10]]]


def _per_partition(t, stream, partitions):
    return [run_batch(t, stream, rows, partition_index=i, num_partitions=len(partitions))
            for i, rows in enumerate(partitions)]


def test_t15_partition_aggregate_replaces_each_partitions_tuples():
    t = TridentTopology()
    s = spout_stream(t, ["a", "b"]).partition_aggregate(["b"], Sum(), ["sum"])
    assert s.output_fields == ["sum"]
    assert _per_partition(t, s, PARTITIONS) == [[[3]], [[11]], [[20]]]


DEVICES = [
    [[123, 2], [113, 54], [23, 28], [237, 37], [12, 23], [62, 17], [98, 42]],
    [[64, 18], [72, 54], [2, 28], [742, 71], [98, 45], [62, 12], [19, 174]],
    [[27, 94], [82, 23], [9, 86], [53, 71], [74, 37], [51, 49], [37, 98]],
]


def test_t15_min_by_and_max_by_per_partition():
    t = TridentTopology()
    s = spout_stream(t, ["device-id", "count"])
    assert _per_partition(t, s.min_by("count"), DEVICES) == [[[123, 2]], [[62, 12]], [[82, 23]]]
    assert _per_partition(t, s.max_by("count"), DEVICES) == [[[113, 54]], [[19, 174]], [[37, 98]]]
    assert s.min_by("count").output_fields == ["device-id", "count"]
    # an empty partition gives nothing; None values are skipped
    assert run_batch(t, s.min_by("count"), []) == []
    assert run_batch(t, s.max_by("count"), [[1, None], [2, 5]]) == [[2, 5]]


def test_t15_chained_partition_aggregations_give_one_tuple_per_partition():
    t = TridentTopology()
    s = (spout_stream(t, ["a", "b"]).chained_agg()
         .partition_aggregate(Count(), ["count"]).partition_aggregate(["b"], Sum(), ["sum"]).chain_end())
    assert s.output_fields == ["count", "sum"]
    assert _per_partition(t, s, PARTITIONS) == [[[2, 3]], [[2, 11]], [[3, 20]]]


def test_t15_project_keeps_the_named_fields_in_their_order():
    t = TridentTopology()
    s = spout_stream(t, ["a", "b", "c", "d"]).project(["b", "d"])
    assert s.output_fields == ["b", "d"]
    assert run_batch(t, s, [[1, 2, 3, 4], [5, 6, 7, 8]]) == [[2, 4], [6, 8]]
    s2 = spout_stream(t, ["a", "b", "c", "d"], "tx2").project(["d", "a"])
    assert run_batch(t, s2, [[1, 2, 3, 4]]) == [[4, 1]]


# --- the other operations, in one task -------------------------------------------------------------------
def test_map_flat_map_and_peek():
    t = TridentTopology()
    s = spout_stream(t, ["a", "b"])
    same = s.map(lambda tup: [tup["b"], tup["a"]])
    assert same.output_fields == ["a", "b"]
    assert run_batch(t, same, [[1, 2]]) == [[2, 1]]
    renamed = s.map(lambda tup: [tup["a"] + tup["b"]], ["total"])
    assert renamed.output_fields == ["total"] and run_batch(t, renamed, [[1, 2], [3, 4]]) == [[3], [7]]
    flat = s.flat_map(lambda tup: [[tup["a"], i] for i in range(tup["b"])], ["a", "i"])
    assert run_batch(t, flat, [[1, 2], [3, 0], [4, 1]]) == [[1, 0], [1, 1], [4, 0]]
    seen: list = []
    peeked = s.peek(lambda tup: seen.append(tup.values))
    assert run_batch(t, peeked, [[1, 2], [3, 4]]) == [[1, 2], [3, 4]] and seen == [[1, 2], [3, 4]]
    wrong = s.map(lambda tup: [1, 2, 3])
    with pytest.raises(ValueError, match="3 value"):
        run_batch(t, wrong, [[1, 2]])


def test_built_in_filters():
    t = TridentTopology()
    s = spout_stream(t, ["a", "b"])
    rows = [[1, 1], [1, None], [None, 2], [2, 3]]
    assert run_batch(t, s.each(["a", "b"], FilterNull()), rows) == [[1, 1], [2, 3]]
    assert run_batch(t, s.each(["a"], FilterNull()), rows) == [[1, 1], [1, None], [2, 3]]
    assert run_batch(t, s.each(["a", "b"], Equals()), rows) == [[1, 1]]
    assert run_batch(t, s.each(["a", "b"], Negate(Equals())), rows) == rows[1:]
    assert run_batch(t, s.each(["a"], Negate(lambda tup: tup[0] == 1)), rows) == [[None, 2], [2, 3]]
    assert run_batch(t, s.each(["a", "b"], Debug("d")), rows) == rows


def test_a_plain_callable_is_a_function():
    t = TridentTopology()
    s = spout_stream(t, ["sentence"]).each(["sentence"], lambda tup: ([w] for w in tup[0].split()), ["word"])
    assert run_batch(t, s, [["the cow"], [""]]) == [["the cow", "the"], ["the cow", "cow"]]
    with pytest.raises(TridentError, match="expected a Function"):
        spout_stream(TridentTopology(), ["a"]).each(["a"], 42, ["b"])


def test_a_global_aggregate_emits_exactly_one_row_per_batch_even_when_empty():
    """T4's rule: the designated task (partition 0) emits for an empty batch, the others do not."""
    t = TridentTopology()
    d = t.new_drpc_stream("numwords").each(["args"], Split(), ["word"])
    agg = d.aggregate(CountAsAggregator(), ["count"]).project(["count"])
    assert run_batch(t, agg, [["the"]]) == [[1]]
    assert run_batch(t, agg, [[""]]) == [[0]]
    assert run_batch(t, agg, [["1 2 3 4 5 6 7 8"]]) == [[8]]
    assert run_batch(t, agg, [], partition_index=1, num_partitions=2) == []
    assert run_batch(t, agg, [["a b"]], partition_index=1, num_partitions=2) == [[2]]
    combiner = d.aggregate(Count(), ["count"])
    assert run_batch(t, combiner, [[""]]) == [[0]]
    assert run_batch(t, combiner, [["a b c"], ["d"]]) == [[4]]


def test_partition_aggregate_on_an_empty_partition_emits_the_zero():
    t = TridentTopology()
    s = spout_stream(t, ["a"])
    assert run_batch(t, s.partition_aggregate(Count(), ["n"]), []) == [[0]]
    assert run_batch(t, s.partition_aggregate(CountReducer(), ["n"]), []) == [[0]]
    assert run_batch(t, s.partition_aggregate(CountAsAggregator(), ["n"]), []) == [[0]]


def test_grouped_aggregations_emit_the_group_then_the_functions_fields():
    t = TridentTopology()
    s = spout_stream(t, ["val1", "val2"])
    rows = [["a", 1], ["b", 2], ["a", 3], ["c", 4]]
    g = s.group_by(["val1"]).aggregate(["val2"], Sum(), ["sum"])
    assert g.output_fields == ["val1", "sum"]
    assert multiset(run_batch(t, g, rows)) == multiset([["a", 4], ["b", 2], ["c", 4]])
    r = s.group_by(["val1"]).aggregate(CountReducer(), ["n"])
    assert multiset(run_batch(t, r, rows)) == multiset([["a", 2], ["b", 1], ["c", 1]])
    a = s.group_by(["val1"]).aggregate(CountAsAggregator(), ["n"])
    assert multiset(run_batch(t, a, rows)) == multiset([["a", 2], ["b", 1], ["c", 1]])
    chained = (s.group_by(["val1"]).chained_agg().aggregate(Count(), ["n"]).aggregate(["val2"], Sum(), ["sum"])
               .chain_end())
    assert chained.output_fields == ["val1", "n", "sum"]
    assert multiset(run_batch(t, chained, rows)) == multiset([["a", 2, 4], ["b", 1, 2], ["c", 1, 4]])
    # no group in the batch: no row (no zero tuple for grouped aggregations)
    assert run_batch(t, g, []) == []
    pa = s.group_by(["val1"]).partition_aggregate(["val2"], Sum(), ["sum"])
    assert multiset(run_batch(t, pa, rows)) == multiset([["a", 4], ["b", 2], ["c", 4]])


def test_chained_aggregations_mixing_kinds_in_one_pass():
    t = TridentTopology()
    s = spout_stream(t, ["word", "len"])
    chained = (s.chained_agg().aggregate(Count(), ["count"]).aggregate(["len"], Sum(), ["sum"])
               .aggregate(CountReducer(), ["n"]).chain_end())
    assert chained.output_fields == ["count", "sum", "n"]
    assert run_batch(t, chained, [["the", 3], ["cow", 3], ["jumped", 6]]) == [[3, 12, 3]]
    assert run_batch(t, chained, []) == [[0, 0, 0]]
    with pytest.raises(TridentError, match="a chain is all per batch or all per partition"):
        s.chained_agg().aggregate(Count(), ["a"]).partition_aggregate(Count(), ["b"])


def test_an_aggregator_emitting_several_rows_gives_their_cross_product_in_a_chain():
    class Twice(Aggregator):
        def init(self, batch_id, collector):
            return [batch_id]

        def aggregate(self, state, tup, collector):
            pass

        def complete(self, state, collector):
            collector.emit([f"{state[0]}-x"])
            collector.emit([f"{state[0]}-y"])
    t = TridentTopology()
    s = spout_stream(t, ["a"])
    c = s.chained_agg().partition_aggregate(Twice(), ["t"]).partition_aggregate(Count(), ["n"]).chain_end()
    assert run_batch(t, c, [[1], [2]], batch_id="B7") == [["B7-x", 2], ["B7-y", 2]]


def test_first_n_keeps_the_n_smallest_or_largest_or_the_first_seen():
    t = TridentTopology()
    s = spout_stream(t, ["word", "count"])
    rows = [["a", 5], ["b", 1], ["c", 9], ["d", 3], ["e", None]]
    assert run_batch(t, s.apply_assembly(FirstN(2, "count")), rows) == [["b", 1], ["d", 3]]
    assert run_batch(t, s.apply_assembly(FirstN(2, "count", reverse=True)), rows) == [["c", 9], ["a", 5]]
    assert run_batch(t, s.apply_assembly(FirstN(3)), rows) == rows[:3]
    assert s.apply_assembly(FirstN(2, "count")).output_fields == ["word", "count"]
    with pytest.raises(ValueError):
        FirstN(0)


def test_join_within_a_batch_cross_product_per_key_compact_fields():
    """The doc's example: ["key", "val1", "val2"] joined with ["x", "val1"] on key = x, out
    ["key", "a", "b", "c"]: the key once, then each side's other fields."""
    t = TridentTopology()
    s1 = spout_stream(t, ["key", "val1", "val2"])
    s2 = s1.map(lambda tup: [tup["key"], tup["val1"] + "!"], ["x", "val1"])
    j = t.join(s1, ["key"], s2, ["x"], ["key", "a", "b", "c"])
    assert j.output_fields == ["key", "a", "b", "c"]
    got = run_batch(t, j, [[1, "p", "q"], [2, "r", "s"], [1, "t", "u"]])
    assert multiset(got) == multiset([[1, "p", "q", "p!"], [1, "p", "q", "t!"], [1, "t", "u", "p!"],
                                      [1, "t", "u", "t!"], [2, "r", "s", "r!"]])
    with pytest.raises(TridentError, match=r"must name 4 field\(s\)"):
        t.join(s1, ["key"], s2, ["x"], ["key", "a", "b"])


def test_join_of_two_branches_emits_only_keys_on_both_sides():
    t = TridentTopology()
    d = t.new_drpc_stream("j")
    words = d.each(["args"], Split(), ["word"])
    lengths = words.each(["word"], StringLength(), ["len"]).project(["word", "len"])
    shouts = words.each(["word"], lambda tup: [[tup[0].upper()]] if tup[0] != "cow" else [], ["up"]).project(
        ["word", "up"])
    j = t.join(lengths, ["word"], shouts, ["word"], ["word", "len", "up"])
    got = run_batch(t, j, [["the cow the"]])
    assert multiset(got) == multiset([["the", 3, "THE"]] * 4)


def test_merge_emits_every_tuple_of_every_stream_under_the_first_streams_fields():
    """T5 in one task: a DRPC stream split into words and its length, merged."""
    t = TridentTopology()
    d = t.new_drpc_stream("splitter")
    s1 = d.each(["args"], Split(), ["word"]).project(["word"])
    s2 = d.each(["args"], StringLength(), ["len"]).project(["len"])
    m = t.merge(s1, s2)
    assert m.output_fields == ["word"]
    assert multiset(run_batch(t, m, [["the man"]])) == multiset([[7], ["the"], ["man"]])
    assert multiset(run_batch(t, m, [["hello"]])) == multiset([[5], ["hello"]])


def test_two_groupings_of_one_stream_merged():
    """T6 in one task."""
    t = TridentTopology()
    d = t.new_drpc_stream("tester").each(["args"], TrueFilter())
    a = d.group_by(["args"]).aggregate(CountAsAggregator(), ["count"])
    b = d.group_by(["args"]).aggregate(CountAsAggregator(), ["count"])
    m = t.merge(a, b)
    assert multiset(run_batch(t, m, [["the"]])) == multiset([["the", 1], ["the", 1]])


def test_word_count_and_query_through_a_memory_map_state():
    """T1 in one task: two batches persisted, then queries (MapGet, FilterNull, Sum) and the
    whole state (TupleCollectionGet)."""
    state = MemoryMapState()
    t = TridentTopology()
    counts = (spout_stream(t, ["sentence"]).each(["sentence"], Split(), ["word"]).group_by(["word"])
              .persistent_aggregate(state, Count(), ["count"]))
    new_values = counts.new_values_stream()
    words = (t.new_drpc_stream("words").each(["args"], Split(), ["word"]).group_by(["word"])
             .state_query(counts, ["word"], MapGet(), ["count"]).each(["count"], FilterNull())
             .aggregate(["count"], Sum(), ["sum"]).project(["sum"]))
    every = t.new_drpc_stream("all").broadcast().state_query(counts, ["args"], TupleCollectionGet(),
                                                             ["word", "n"]).project(["word", "n"])
    first = run_batch(t, new_values, [["hello the man said"], ["the"]], txid=1)
    assert multiset(first) == multiset([["hello", 1], ["the", 2], ["man", 1], ["said", 1]])
    assert run_batch(t, words, [["the"]]) == [[2]]
    assert run_batch(t, words, [["hello"]]) == [[1]]
    run_batch(t, new_values, [["the man on the moon"], ["where are you"]], txid=2)
    assert run_batch(t, words, [["the"]]) == [[4]]
    assert run_batch(t, words, [["man where you the"]]) == [[8]]
    assert run_batch(t, words, [["nothing"]]) == [[0]]
    # a replay of txid 2 (opaque) counts it once
    run_batch(t, new_values, [["the man on the moon"], ["where are you"]], txid=2)
    assert run_batch(t, words, [["the"]]) == [[4]]
    assert {tuple(r) for r in run_batch(t, every, [["x"]])} == {
        ("hello", 1), ("the", 4), ("man", 2), ("said", 1), ("on", 1), ("moon", 1), ("where", 1), ("are", 1),
        ("you", 1)}


def test_persistent_aggregates_with_a_reducer_and_without_a_group():
    t = TridentTopology()
    s = spout_stream(t, ["word"])
    grouped = s.group_by(["word"]).persistent_aggregate(MemoryMapState(), ["word"], CountReducer(), ["n"])
    total = s.persistent_aggregate(MemoryMapState(), Count(), ["total"])
    reduced = s.persistent_aggregate(MemoryMapState(), ["word"], CountReducer(), ["total"])
    for txid, batch in [(1, [["a"], ["b"], ["a"]]), (2, [["a"]]), (2, [["a"]]), (3, [])]:
        new = run_batch(t, grouped.new_values_stream(), batch, txid=txid)
        assert multiset(new) == multiset({1: [["a", 2], ["b", 1]], 2: [["a", 3]], 3: []}[txid])
        assert run_batch(t, total.new_values_stream(), batch, txid=txid) == {1: [[3]], 2: [[4]], 3: [[4]]}[txid]
        assert run_batch(t, reduced.new_values_stream(), batch, txid=txid) == (
            {1: [[3]], 2: [[4]], 3: []}[txid])


def test_partition_persist_with_a_custom_updater_and_its_new_values():
    class Lengths(StateUpdater):
        """Counts the words of each length; emits [len, new count]."""

        def update_state(self, state, tuples, collector):
            by_len = Counter(len(tup["word"]) for tup in tuples)
            keys = [[n] for n in by_len]
            news = state.multi_update(keys, [lambda old, k=k: (old or 0) + k for k in by_len.values()])
            for k, new in zip(keys, news):
                collector.emit([k[0], new])

    class Latest(StateUpdater):
        def update_state(self, state, tuples, collector):
            state.multi_put([[tup[0]] for tup in tuples], [tup[1] for tup in tuples])

    t = TridentTopology()
    lengths = MemoryMapState()
    latest = MemoryMapState()
    persisted = spout_stream(t, ["word"]).partition_persist(lengths, ["word"], Lengths(), ["len", "n"])
    news = persisted.new_values_stream()
    assert news.output_fields == ["len", "n"]
    sink = news.partition_persist(latest, ["len", "n"], Latest())
    assert multiset(run_batch(t, news, [["a"], ["bb"], ["cc"]], txid=1)) == multiset([[1, 1], [2, 2]])
    run_batch(t, sink.new_values_stream(), [["ddd"], ["e"]], txid=2)
    assert sorted(latest.make_state({}, 0, 1).get_tuples()) == [[1, 2], [3, 1]]
    assert sorted(lengths.make_state({}, 0, 1).get_tuples()) == [[1, 2], [2, 2], [3, 1]]


def test_combiner_with_an_identity_zero_is_folded_in_partials():
    class Max(CombinerAggregator):
        def init(self, tup):
            return tup[0]

        def combine(self, a, b):
            return max(a, b)

        def zero(self):
            return float("-inf")
    t = TridentTopology()
    s = spout_stream(t, ["v"]).aggregate(["v"], Max(), ["max"])
    assert run_batch(t, s, [[3], [9], [1]]) == [[9]]


def test_each_task_of_a_segment_prepares_its_own_operations():
    """Every task of a component is a copy of one template, and every batch of a task a copy of
    the task's bolt: each task must run its own prepared operations (its partition, its state
    partition), shared by its batches only."""
    import copy
    from types import SimpleNamespace

    from topology_runtime.api.components import TopologyContext

    class Where(Function):
        def prepare(self, conf, context):
            self.where = [context.partition_index, context.num_partitions]
            self.batches = 0

        def execute(self, tup, collector):
            self.batches += 1
            collector.emit([self.where, self.batches])

    t = TridentTopology()
    t.new_drpc_stream("q").shuffle().each(["args"], Where(), ["where", "n"]).parallelism_hint(3)
    topology = t.build()
    spec = topology.components["b-1-where"]
    assert spec.parallelism == 3
    tasks = {"b-1-where": [7, 8, 9]}
    instances = [spec.new_instance().delegate for _ in range(3)]  # as a worker makes its tasks
    got = []
    for batch in ("r1", "r2"):
        for index, (task_id, bolt) in enumerate(zip(tasks["b-1-where"], instances)):
            b = copy.deepcopy(bolt)  # as the coordination makes a batch's instance
            b.emit = lambda values, stream="default", **kw: got.append(values)
            b.prepare({}, TopologyContext(task_id, "b-1-where", index, tasks), batch)
            b.execute(SimpleNamespace(info=SimpleNamespace(component="b-0", stream="default"), values=[batch, "x"]))
            b.finish_batch()
    assert got == [["r1", "x", [0, 3], 1], ["r1", "x", [1, 3], 1], ["r1", "x", [2, 3], 1],
                   ["r2", "x", [0, 3], 2], ["r2", "x", [1, 3], 2], ["r2", "x", [2, 3], 2]]


def test_a_merge_with_a_repartition_of_itself_compiles_to_an_acyclic_topology():
    """The merge cannot be fused into the stream's own segment (which would read its own
    output): it runs with the repartitioned branch, the other branch's rows sent to it."""
    t = TridentTopology()
    words = t.new_drpc_stream("q").each(["args"], Split(), ["word"])
    upper = words.shuffle().each(["word"], lambda tup: [[tup[0].upper()]], ["up"]).project(["up"])
    t.merge(words.project(["word"]), upper).aggregate(Count(), ["n"])
    t2 = TridentTopology()
    s = spout_stream(t2, ["word"])
    t2.join(s, ["word"], s.partition_by(["word"]).each(["word"], StringLength(), ["len"]), ["word"],
            ["word", "len"])
    t2.merge(s, s.shuffle().each(["word"], FilterNull()))
    for topology in (t.build(), t2.build()):
        edges = {(g.source, cid) for cid, spec in topology.components.items() for g in spec.inputs}
        assert not any(src == dst for src, dst in edges)
        reach = {c: {d for s_, d in edges if s_ == c} for c in topology.components}
        for _ in topology.components:  # transitive closure: no component reaches itself
            reach = {c: ds | {e for d in ds for e in reach[d]} for c, ds in reach.items()}
        assert not any(c in ds for c, ds in reach.items()), reach
    assert [c for c in sorted(t.build().components) if c.startswith("b-")] == [
        "b-0-split", "b-1-lambda-aggregate", "b-2-aggregate"]
    # a merge in the harness: each word and its upper case
    assert multiset(run_batch(t, t.merge(words.project(["word"]), upper), [["a b"]])) == multiset(
        [["a"], ["b"], ["A"], ["B"]])
