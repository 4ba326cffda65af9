"""The Trident API: TridentTopology, Stream, GroupedStream, TridentState and chained
aggregations (Storm's names in snake_case). Every call checks its fields at once and adds nodes
to the topology's logical graph (graph.py); ``TridentTopology.build`` compiles it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..api.builder import Topology
from . import processors as P
from .graph import ALL, DRPC, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE, OP, PARTITION, SHUFFLE, SPOUT, Graph, Node, StateRef
from .operations import (
    Aggregator,
    CombinerAggregator,
    MinMaxBy,
    QueryFunction,
    ReducerAggregator,
    StateUpdater,
    as_filter,
    as_function,
)
from .tuple import TridentError, check_new_fields, field_list, positions
from .updaters import GlobalCombinerUpdater, GlobalReducerUpdater, MapCombinerUpdater, MapReducerUpdater


def _is_agg(x: Any) -> bool:
    return isinstance(x, (CombinerAggregator, ReducerAggregator, Aggregator))


def _agg_args(op: str, input_fields: Any, agg: Any, function_fields: Any) -> tuple[Any, Any, Any]:
    """(input_fields, agg, function_fields), accepting the form without input fields
    (``persistent_aggregate(factory, Count(), ["count"])``)."""
    if _is_agg(input_fields) and function_fields is None:
        input_fields, agg, function_fields = None, input_fields, agg
    if not _is_agg(agg):
        raise TridentError(f"{op}: expected a CombinerAggregator, ReducerAggregator or Aggregator, "
                           f"got {type(agg).__name__}")
    fn = field_list(op, function_fields, "function fields")
    if not fn:
        raise TridentError(f"{op}: name the aggregation's output field(s), e.g. ['count']")
    if isinstance(agg, (CombinerAggregator, ReducerAggregator)) and len(fn) != 1:
        raise TridentError(f"{op}: a {type(agg).__name__} has one output field, got {fn}")
    return field_list(op, input_fields, "input fields"), agg, fn


class TridentTopology:
    """A Trident topology: streams from transactional spouts and DRPC functions, compiled by
    ``build()`` onto transactional batches."""

    def __init__(self) -> None:
        self.graph = Graph()
        self._txids: set[str] = set()
        self._functions: set[str] = set()

    def new_stream(self, txid: str, spout: Any) -> Stream:
        """``txid`` names where the spout's coordinator keeps its transactions (in Redis):
        unique per topology and stable across runs of it."""
        from ..api.names import name_list
        from .spouts import check_spout

        name_list([txid], "txid", "new_stream")
        if txid in self._txids:
            raise TridentError(f"new_stream: txid {txid!r} is used twice (each spout needs its own)")
        check_spout(spout, txid)
        self._txids.add(txid)
        fields = check_new_fields(f"new_stream({txid!r})", list(spout.fields))
        node = self.graph.add(SPOUT, [], fields, processor=spout, names=(txid,))
        return Stream(self, self.graph.add(OP, [node], fields, processor=P.Pass(fields)))

    def new_drpc_stream(self, function: str) -> Stream:
        from ..drpc.protocol import check_function

        check_function(function)
        if function in self._functions:
            raise TridentError(f"new_drpc_stream: DRPC function {function!r} is defined twice")
        self._functions.add(function)
        node = self.graph.add(DRPC, [], ["args"], function=function, names=(function,))
        return Stream(self, self.graph.add(OP, [node], ["args"], processor=P.Pass(["args"])))

    def new_static_state(self, factory: Any) -> TridentState:
        _check_factory("new_static_state", factory)
        return TridentState(self, None, self.graph.new_state(factory, static=True))

    def merge(self, *streams: Stream) -> Stream:
        """Every tuple of every stream, per batch; fields: the first stream's (by position)."""
        if len(streams) == 1 and isinstance(streams[0], (list, tuple)):
            streams = tuple(streams[0])
        if len(streams) < 2:
            raise TridentError("merge: give at least two streams")
        nodes = [s._node for s in streams]
        fields = nodes[0].fields
        return Stream(self, self.graph.add(OP, nodes, fields, processor=P.Pass(fields)))

    def join(self, s1: Stream, fields1: Sequence[str], s2: Stream, fields2: Sequence[str],
             out_fields: Sequence[str]) -> Stream:
        """An inner equi-join within each batch: output ``join key (once) + s1's other fields +
        s2's other fields``, named ``out_fields``."""
        f1, f2 = field_list("join", fields1), field_list("join", fields2)
        if not f1 or not f2 or len(f1) != len(f2):
            raise TridentError(f"join: the two sides need as many join fields, got {f1} and {f2}")
        k1, k2 = positions("join (first stream)", f1, s1.output_fields), positions("join (second stream)", f2,
                                                                                  s2.output_fields)
        rest1 = [i for i in range(len(s1.output_fields)) if i not in k1]
        rest2 = [i for i in range(len(s2.output_fields)) if i not in k2]
        out = check_new_fields("join", field_list("join", out_fields) or [])
        if len(out) != len(f1) + len(rest1) + len(rest2):
            names = f1 + [s1.output_fields[i] for i in rest1] + [s2.output_fields[i] for i in rest2]
            raise TridentError(f"join: out_fields {out} must name {len(names)} field(s): the key then each "
                               f"side's other fields, e.g. {names}")
        p1 = s1._partition((FIELDS, f1))._node
        p2 = s2._partition((FIELDS, f2))._node
        proc = P.Join([s1.output_fields, s2.output_fields], [k1, k2], [rest1, rest2])
        return Stream(self, self.graph.add(OP, [p1, p2], out, processor=proc))

    def build(self) -> Topology:
        from .compiler import compile_topology

        return compile_topology(self.graph)


def _check_factory(op: str, factory: Any) -> None:
    if not callable(getattr(factory, "make_state", None)):
        raise TridentError(f"{op}: expected a state factory (make_state(conf, partition_index, num_partitions)), "
                           f"e.g. MemoryMapState() or RedisMapState.opaque(), got {type(factory).__name__}")


class Stream:
    def __init__(self, topology: TridentTopology, node: Node, names: tuple[str, ...] = ()) -> None:
        self._t, self._node, self._names = topology, node, names

    @property
    def output_fields(self) -> list[str]:
        return list(self._node.fields)

    # --- plumbing ------------------------------------------------------------------------------
    def _op(self, processor: Any, fields: list[str], parents: list[Node] | None = None, **kw: Any) -> Stream:
        node = self._t.graph.add(OP, parents or [self._node], fields, processor=processor, names=self._names, **kw)
        return Stream(self._t, node, self._names)

    def _partition(self, grouping: tuple) -> Stream:
        s = self
        if self._node.kind == PARTITION:  # two repartitions in a row: a pass-through between them
            s = self._op(P.Pass(self.output_fields), self.output_fields)
        node = self._t.graph.add(PARTITION, [s._node], s.output_fields, processor=grouping, names=self._names)
        return Stream(self._t, node, self._names)

    def _input(self) -> list[str]:
        return self.output_fields

    # --- per tuple -----------------------------------------------------------------------------
    def each(self, input_fields: Sequence[str], fn: Any, function_fields: Sequence[str] | None = None) -> Stream:
        """With ``function_fields``: a Function whose emits are appended to the input tuple (zero
        emits drop it); without: a Filter."""
        ins = field_list("each", input_fields, "input fields")
        pos = positions("each", ins, self.output_fields)
        if function_fields is None:
            return self._op(P.EachFilter(self._input(), pos, as_filter(fn, "each")), self.output_fields)
        new = check_new_fields("each", field_list("each", function_fields) or [], self.output_fields)
        return self._op(P.Each(self._input(), pos, as_function(fn, "each")), self.output_fields + new)

    def filter(self, filter_or_fields: Any, filter: Any = None) -> Stream:
        """``filter(f)`` on every field, or ``filter(input_fields, f)``."""
        if filter is None:
            return self.each(self.output_fields, filter_or_fields)
        return self.each(filter_or_fields, filter)

    def map(self, fn: Callable, output_fields: Sequence[str] | None = None) -> Stream:
        """``fn(tup) -> values``: the values replace the tuple (same fields unless given)."""
        out = self.output_fields if output_fields is None else check_new_fields("map", field_list("map", output_fields) or [])
        return self._op(P.MapEach(self._input(), fn, False, len(out), "map"), out)

    def flat_map(self, fn: Callable, output_fields: Sequence[str] | None = None) -> Stream:
        out = (self.output_fields if output_fields is None
               else check_new_fields("flat_map", field_list("flat_map", output_fields) or []))
        return self._op(P.MapEach(self._input(), fn, True, len(out), "flat_map"), out)

    def peek(self, fn: Callable) -> Stream:
        return self._op(P.Peek(self._input(), fn), self.output_fields)

    def project(self, fields: Sequence[str]) -> Stream:
        keep = field_list("project", fields) or []
        pos = positions("project", keep, self.output_fields)
        return self._op(P.Project(self._input(), pos), check_new_fields("project", keep))

    # --- repartitions --------------------------------------------------------------------------
    def shuffle(self) -> Stream:
        return self._partition((SHUFFLE,))

    def local_or_shuffle(self) -> Stream:
        return self._partition((LOCAL_OR_SHUFFLE,))

    def partition_by(self, fields: Sequence[str]) -> Stream:
        f = field_list("partition_by", fields) or []
        positions("partition_by", f, self.output_fields)
        return self._partition((FIELDS, f))

    def global_(self) -> Stream:
        """Every tuple of every batch to one task (the lowest)."""
        return self._partition((GLOBAL,))

    def batch_global(self) -> Stream:
        """All tuples of a batch to one task (here the lowest, as ``global_``)."""
        return self._partition((GLOBAL,))

    def broadcast(self) -> Stream:
        return self._partition((ALL,))

    def group_by(self, fields: Sequence[str]) -> GroupedStream:
        f = field_list("group_by", fields) or []
        if not f:
            raise TridentError("group_by: name at least one field")
        positions("group_by", f, self.output_fields)
        return GroupedStream(self, f)

    # --- naming and parallelism -----------------------------------------------------------------
    def parallelism_hint(self, n: int) -> Stream:
        if not isinstance(n, int) or n < 1:
            raise TridentError(f"parallelism_hint: a positive int, got {n!r}")
        self._node.parallelism = n
        for p in self._node.parents:  # right after new_stream: the spout's own parallelism
            if p.kind == SPOUT:
                p.parallelism = n
        return self

    def name(self, label: str) -> Stream:
        """Labels this operation and those after it: they show in the component ids."""
        from ..api.names import name_list

        name_list([label], "label", "name")
        if self._node.kind == OP:
            self._node.names = (*self._node.names, label)
        return Stream(self._t, self._node, (*self._names, label))

    def apply_assembly(self, assembly: Any) -> Stream:
        return assembly.apply(self)

    # --- aggregations --------------------------------------------------------------------------
    def partition_aggregate(self, input_fields: Any, agg: Any = None, function_fields: Any = None) -> Stream:
        ins, agg, fn = _agg_args("partition_aggregate", input_fields, agg, function_fields)
        pos = positions("partition_aggregate", ins, self.output_fields)
        runner = P.AggRunner(agg, pos)
        return self._op(P.Aggregate(self._input(), None, [runner]), check_new_fields("partition_aggregate", fn))

    def aggregate(self, input_fields: Any, agg: Any = None, function_fields: Any = None) -> Stream:
        """One result per batch (over every partition): combiners pre-aggregate per partition."""
        return self.chained_agg()._add("aggregate", input_fields, agg, function_fields).chain_end()

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        return ChainedAggregatorDeclarer(self, None)

    def min_by(self, field: str) -> Stream:
        positions("min_by", [field], self.output_fields)
        return self._op(P.Aggregate(self._input(), None, [P.AggRunner(MinMaxBy(field, False), list(range(
            len(self.output_fields))))]), self.output_fields)

    def max_by(self, field: str) -> Stream:
        positions("max_by", [field], self.output_fields)
        return self._op(P.Aggregate(self._input(), None, [P.AggRunner(MinMaxBy(field, True), list(range(
            len(self.output_fields))))]), self.output_fields)

    def persistent_aggregate(self, factory: Any, input_fields: Any, agg: Any = None,
                             function_fields: Any = None) -> TridentState:
        """A running total across batches in ``factory``'s state (one value, under one key)."""
        _check_factory("persistent_aggregate", factory)
        ins, agg, fn = _agg_args("persistent_aggregate", input_fields, agg, function_fields)
        pos = positions("persistent_aggregate", ins, self.output_fields)
        check_new_fields("persistent_aggregate", fn)
        if isinstance(agg, CombinerAggregator):
            partial = self._op(P.Aggregate(self._input(), None, [P.AggRunner(agg, pos)]), fn)
            total = partial.global_()._op(P.Aggregate(fn, None, [P.AggRunner(agg, [0], partial=True)], single=True), fn)
            return total._persist(factory, fn, GlobalCombinerUpdater(agg), fn)
        if isinstance(agg, ReducerAggregator):
            g = self.global_()
            names = [self.output_fields[p] for p in pos]
            return g._persist(factory, names, GlobalReducerUpdater(agg, names), fn)
        raise TridentError("persistent_aggregate: takes a CombinerAggregator or a ReducerAggregator "
                           f"(an Aggregator's output is not one value), got {type(agg).__name__}")

    def partition_persist(self, factory: Any, input_fields: Sequence[str], updater: StateUpdater,
                          function_fields: Sequence[str] | None = None) -> TridentState:
        _check_factory("partition_persist", factory)
        if not isinstance(updater, StateUpdater):
            raise TridentError(f"partition_persist: expected a StateUpdater, got {type(updater).__name__}")
        ins = field_list("partition_persist", input_fields) or []
        positions("partition_persist", ins, self.output_fields)
        fn = check_new_fields("partition_persist", field_list("partition_persist", function_fields) or [])
        return self._persist(factory, ins, updater, fn)

    def _persist(self, factory: Any, ins: list[str], updater: StateUpdater, fn: list[str]) -> TridentState:
        state = self._t.graph.new_state(factory)
        pos = positions("partition_persist", ins, self.output_fields)
        s = self._op(P.PartitionPersist(self._input(), pos, updater, state.id), fn, state=state, persist=True)
        return TridentState(self._t, s._node, state)

    def state_query(self, state: TridentState, input_fields: Sequence[str], query_fn: QueryFunction,
                    function_fields: Sequence[str]) -> Stream:
        if not isinstance(state, TridentState):
            raise TridentError(f"state_query: expected a TridentState (from persistent_aggregate, partition_persist "
                               f"or new_static_state), got {type(state).__name__}")
        if not isinstance(query_fn, QueryFunction):
            raise TridentError(f"state_query: expected a QueryFunction (e.g. MapGet()), got {type(query_fn).__name__}")
        ins = field_list("state_query", input_fields) or []
        pos = positions("state_query", ins, self.output_fields)
        new = check_new_fields("state_query", field_list("state_query", function_fields) or [], self.output_fields)
        return self._op(P.StateQuery(self._input(), pos, query_fn, state.state.id), self.output_fields + new,
                        state=state.state)


class GroupedStream:
    """``group_by``'s result: aggregations and queries per group (output: the group fields,
    then the function fields)."""

    def __init__(self, stream: Stream, fields: list[str]) -> None:
        self.stream, self.group_fields = stream, fields

    @property
    def output_fields(self) -> list[str]:
        return self.stream.output_fields

    def to_stream(self) -> Stream:
        return self.stream

    def each(self, input_fields: Sequence[str], fn: Any, function_fields: Sequence[str] | None = None) -> GroupedStream:
        return GroupedStream(self.stream.each(input_fields, fn, function_fields), self.group_fields)

    def parallelism_hint(self, n: int) -> GroupedStream:
        self.stream.parallelism_hint(n)
        return self

    def name(self, label: str) -> GroupedStream:
        return GroupedStream(self.stream.name(label), self.group_fields)

    def partition_aggregate(self, input_fields: Any, agg: Any = None, function_fields: Any = None) -> Stream:
        ins, agg, fn = _agg_args("partition_aggregate", input_fields, agg, function_fields)
        s = self.stream
        pos = positions("partition_aggregate", ins, s.output_fields)
        gpos = positions("partition_aggregate", self.group_fields, s.output_fields)
        out = check_new_fields("partition_aggregate", self.group_fields + fn)
        return s._op(P.Aggregate(s._input(), gpos, [P.AggRunner(agg, pos)]), out)

    def aggregate(self, input_fields: Any, agg: Any = None, function_fields: Any = None) -> Stream:
        return self.chained_agg()._add("aggregate", input_fields, agg, function_fields).chain_end()

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        return ChainedAggregatorDeclarer(self.stream, self.group_fields)

    def persistent_aggregate(self, factory: Any, input_fields: Any, agg: Any = None,
                             function_fields: Any = None) -> TridentState:
        """Per group, across batches, in a map state keyed by the group values: combiners
        pre-aggregate per partition before the repartition; reducers ship every tuple."""
        _check_factory("persistent_aggregate", factory)
        ins, agg, fn = _agg_args("persistent_aggregate", input_fields, agg, function_fields)
        s, g = self.stream, self.group_fields
        pos = positions("persistent_aggregate", ins, s.output_fields)
        gpos = positions("persistent_aggregate", g, s.output_fields)
        out = check_new_fields("persistent_aggregate", g + fn)
        if isinstance(agg, CombinerAggregator):
            partial = s._op(P.Aggregate(s._input(), gpos, [P.AggRunner(agg, pos)]), out)
            return partial._partition((FIELDS, g))._persist(factory, out, MapCombinerUpdater(agg, len(g)), out)
        if isinstance(agg, ReducerAggregator):
            names = [s.output_fields[p] for p in pos]
            return s._partition((FIELDS, g))._persist(factory, g + names, MapReducerUpdater(agg, len(g), names), out)
        raise TridentError("persistent_aggregate: takes a CombinerAggregator or a ReducerAggregator, "
                           f"got {type(agg).__name__}")

    def state_query(self, state: TridentState, input_fields: Sequence[str], query_fn: QueryFunction,
                    function_fields: Sequence[str]) -> Stream:
        return self.stream.partition_by(self.group_fields).state_query(state, input_fields, query_fn, function_fields)


class ChainedAggregatorDeclarer:
    """``chained_agg().aggregate(...).aggregate(...).chain_end()`` (or ``partition_aggregate``):
    several aggregators in one pass; the output is the cross product of their results, fields in
    order (grouped: the group fields first)."""

    def __init__(self, stream: Stream, group: list[str] | None) -> None:
        self.stream, self.group = stream, group
        self.mode: str | None = None
        self.aggs: list[tuple[list[int], Any, list[str]]] = []

    def _add(self, mode: str, input_fields: Any, agg: Any, function_fields: Any) -> ChainedAggregatorDeclarer:
        ins, agg, fn = _agg_args(mode, input_fields, agg, function_fields)
        if self.mode not in (None, mode):
            raise TridentError(f"chained_agg: {mode} after {self.mode}: a chain is all per batch or all per partition")
        self.mode = mode
        self.aggs.append((positions(mode, ins, self.stream.output_fields), agg, fn))
        return self

    def aggregate(self, input_fields: Any, agg: Any = None, function_fields: Any = None) -> ChainedAggregatorDeclarer:
        return self._add("aggregate", input_fields, agg, function_fields)

    def partition_aggregate(self, input_fields: Any, agg: Any = None,
                            function_fields: Any = None) -> ChainedAggregatorDeclarer:
        return self._add("partition_aggregate", input_fields, agg, function_fields)

    def chain_end(self) -> Stream:
        if not self.aggs:
            raise TridentError("chain_end: no aggregator in the chain")
        s, g = self.stream, self.group or []
        fn = [f for _, _, out in self.aggs for f in out]
        out = check_new_fields("chain_end", g + fn)
        gpos = positions("chain_end", g, s.output_fields) if self.group is not None else None
        runners = [P.AggRunner(agg, pos) for pos, agg, _ in self.aggs]
        if self.mode == "partition_aggregate":
            return s._op(P.Aggregate(s._input(), gpos, runners), out)
        repartition = (FIELDS, g) if self.group is not None else (GLOBAL,)
        single = self.group is None
        if all(isinstance(a, CombinerAggregator) for _, a, _ in self.aggs):
            partial = s._op(P.Aggregate(s._input(), gpos, runners), out)
            n = len(g)
            combine = [P.AggRunner(agg, [n + i], partial=True) for i, (_, agg, _) in enumerate(self.aggs)]
            gp = list(range(n)) if self.group is not None else None
            return partial._partition(repartition)._op(P.Aggregate(out, gp, combine, single=single), out)
        moved = s._partition(repartition)
        return moved._op(P.Aggregate(s.output_fields, gpos, runners, single=single), out)


class TridentState:
    """A state made by ``persistent_aggregate`` / ``partition_persist`` (or a static one)."""

    def __init__(self, topology: TridentTopology, node: Node | None, state: StateRef) -> None:
        self._t, self._node, self.state = topology, node, state

    def parallelism_hint(self, n: int) -> TridentState:
        """The state's number of partitions (its persist's tasks)."""
        if not isinstance(n, int) or n < 1:
            raise TridentError(f"parallelism_hint: a positive int, got {n!r}")
        if self._node is None:
            raise TridentError("parallelism_hint: a static state takes the parallelism of its queries")
        self._node.parallelism = n
        return self

    def new_values_stream(self) -> Stream:
        """What the state's updater emitted (persistent_aggregate: the group fields and the new
        value), produced in the commit phase."""
        if self._node is None:
            raise TridentError("new_values_stream: a static state has no updates")
        return Stream(self._t, self._node)
