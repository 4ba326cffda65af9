"""What runs each Trident operation inside a segment's bolt (Storm's planner/processor).

A processor is prepared once per task (``prepare``) and bound once per batch (``bind``): binding
returns ``push(parent_index, row)`` (called for each row that reaches it) and ``finish()``
(called at the batch's end, parents first), both closures over the batch's own state. A row is
a plain list of the node's input stream values; ``emit(row)`` hands a row to the node's children.
Append (``each``, ``state_query``): input + function values; fresh (aggregations, ``map``): the
function's values only; project: the chosen fields."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .operations import (
    Aggregator,
    CombinerAggregator,
    Filter,
    Function,
    ReducerAggregator,
    TridentCollector,
)
from .tuple import TridentTuple

Emit = Callable[[list], None]
Push = Callable[[int, list], None]
Finish = Callable[[], None]


@dataclass
class OperationContext:
    """What an operation's ``prepare`` is told: its task's place among the component's tasks
    (``partition_index`` / ``num_partitions``), its input fields, the topology's config."""

    conf: dict
    partition_index: int
    num_partitions: int
    input_fields: list[str]
    component_id: str


class BatchInfo:
    """The batch a binding serves: its id (a TransactionAttempt, or a DRPC request id) and
    txid (None for DRPC: no transaction)."""

    __slots__ = ("batch_id", "txid")

    def __init__(self, batch_id: Any, txid: int | None) -> None:
        self.batch_id, self.txid = batch_id, txid


class _Collector(TridentCollector):
    __slots__ = ("emit",)

    def __init__(self, emit: Emit) -> None:
        self.emit = emit  # type: ignore[method-assign]


class _AppendCollector(TridentCollector):
    """Appends emitted values to the current input row."""

    __slots__ = ("row", "out")

    def __init__(self, out: Emit) -> None:
        self.row: list = []
        self.out = out

    def emit(self, values: list) -> None:
        self.out(self.row + list(values))


class Processor:
    input_fields: list[str]

    def prepare(self, ctx: OperationContext, task: Any) -> None:
        pass

    def bind(self, batch: BatchInfo, emit: Emit) -> tuple[Push, Finish | None]:
        raise NotImplementedError

    def cleanup(self) -> None:
        op = getattr(self, "op", None)
        if op is not None and hasattr(op, "cleanup"):
            op.cleanup()


def _prepare_op(op: Any, ctx: OperationContext, input_fields: list[str]) -> None:
    if hasattr(op, "prepare"):
        op.prepare(ctx.conf, OperationContext(ctx.conf, ctx.partition_index, ctx.num_partitions,
                                              list(input_fields), ctx.component_id))


class Pass(Processor):
    """Identity: where a spout's rows enter, between two repartitions, and ``merge``."""

    def __init__(self, input_fields: list[str]) -> None:
        self.input_fields = input_fields

    def bind(self, batch, emit):
        return (lambda pi, row: emit(row)), None


class Each(Processor):
    def __init__(self, input_fields: list[str], positions: list[int], op: Function) -> None:
        self.input_fields, self.positions, self.op = input_fields, positions, op

    def prepare(self, ctx, task):
        _prepare_op(self.op, ctx, [self.input_fields[p] for p in self.positions])

    def bind(self, batch, emit):
        view = TridentTuple([self.input_fields[p] for p in self.positions], self.positions)
        collector = _AppendCollector(emit)
        execute, point = self.op.execute, view.point

        def push(pi: int, row: list) -> None:
            collector.row = row
            execute(point(row), collector)
        return push, None


class EachFilter(Processor):
    def __init__(self, input_fields: list[str], positions: list[int], op: Filter) -> None:
        self.input_fields, self.positions, self.op = input_fields, positions, op

    def prepare(self, ctx, task):
        _prepare_op(self.op, ctx, [self.input_fields[p] for p in self.positions])

    def bind(self, batch, emit):
        view = TridentTuple([self.input_fields[p] for p in self.positions], self.positions)
        keep, point = self.op.is_keep, view.point

        def push(pi: int, row: list) -> None:
            if keep(point(row)):
                emit(row)
        return push, None


class MapEach(Processor):
    """``map`` (one row out per row) and ``flat_map`` (any number): fresh rows."""

    def __init__(self, input_fields: list[str], fn: Callable, flat: bool, width: int, op_name: str) -> None:
        self.input_fields, self.fn, self.flat, self.width, self.op_name = input_fields, fn, flat, width, op_name

    def bind(self, batch, emit):
        view = TridentTuple(self.input_fields, range(len(self.input_fields)))
        fn, point, width, name = self.fn, view.point, self.width, self.op_name

        def check(values: Any) -> list:
            out = list(values)
            if len(out) != width:
                raise ValueError(f"{name}: returned {len(out)} value(s) for {width} output field(s): {out!r:.200}")
            return out

        if self.flat:
            def push(pi: int, row: list) -> None:
                for values in fn(point(row)) or ():
                    emit(check(values))
        else:
            def push(pi: int, row: list) -> None:
                emit(check(fn(point(row))))
        return push, None


class Peek(Processor):
    def __init__(self, input_fields: list[str], fn: Callable) -> None:
        self.input_fields, self.fn = input_fields, fn

    def bind(self, batch, emit):
        view = TridentTuple(self.input_fields, range(len(self.input_fields)))
        fn = self.fn

        def push(pi: int, row: list) -> None:
            fn(view.point(row))
            emit(row)
        return push, None


class Project(Processor):
    def __init__(self, input_fields: list[str], positions: list[int]) -> None:
        self.input_fields, self.positions = input_fields, positions

    def bind(self, batch, emit):
        ps = self.positions
        return (lambda pi, row: emit([row[p] for p in ps])), None


# --- aggregation ------------------------------------------------------------------------------
class AggRunner:
    """One aggregator's life in a batch partition: ``start()`` -> state, ``add(state, view)``,
    ``end(state, out)`` emitting lists of values. ``partial`` combiners fold values already
    combined (the second stage of a two-stage aggregation) instead of calling ``init``."""

    def __init__(self, agg: Any, positions: list[int], partial: bool = False) -> None:
        self.agg, self.positions, self.partial = agg, positions, partial
        if isinstance(agg, CombinerAggregator):
            self.kind = "combiner"
        elif isinstance(agg, ReducerAggregator):
            self.kind = "reducer"
        elif isinstance(agg, Aggregator):
            self.kind = "aggregator"
        else:
            raise TypeError(f"not an aggregator: {type(agg).__name__}")

    def start(self, batch_id: Any, out: Emit) -> Any:
        if self.kind == "combiner":
            return [self.agg.zero()]
        if self.kind == "reducer":
            return [self.agg.init()]
        return [self.agg.init(batch_id, _Collector(out))]

    def add(self, st: list, view: TridentTuple, out: Emit) -> None:
        agg = self.agg
        if self.kind == "combiner":
            st[0] = agg.combine(st[0], view[0] if self.partial else agg.init(view))
        elif self.kind == "reducer":
            st[0] = agg.reduce(st[0], view)
        else:
            agg.aggregate(st[0], view, _Collector(out))

    def end(self, st: list, out: Emit) -> None:
        if self.kind == "aggregator":
            self.agg.complete(st[0], _Collector(out))
        else:
            out([st[0]])


class Aggregate(Processor):
    """``partition_aggregate`` / a stage of ``aggregate`` (grouped or not; several aggregators
    chained: the output is the cross product of what each emitted). ``single``: the global
    stage of a per-batch aggregation, which emits on the designated task (partition 0) even
    when the batch brought it nothing, and elsewhere only if it received rows."""

    def __init__(self, input_fields: list[str], group: list[int] | None, runners: list[AggRunner],
                 single: bool = False) -> None:
        self.input_fields, self.group, self.runners, self.single = input_fields, group, runners, single
        self.designated = True

    def prepare(self, ctx, task):
        self.designated = ctx.partition_index == 0
        for r in self.runners:
            _prepare_op(r.agg, ctx, [self.input_fields[p] for p in r.positions])

    def bind(self, batch, emit):
        runners, group = self.runners, self.group
        views = [TridentTuple([self.input_fields[p] for p in r.positions], r.positions) for r in runners]
        bid = batch.batch_id
        seen = [False]
        if group is None:
            outs: list[list] = [[] for _ in runners]
            states = [r.start(bid, outs[i].append) for i, r in enumerate(runners)]
            if len(runners) == 1:
                r0, v0, s0, o0 = runners[0], views[0], states[0], outs[0].append

                def push(pi: int, row: list) -> None:
                    seen[0] = True
                    r0.add(s0, v0.point(row), o0)
            else:
                def push(pi: int, row: list) -> None:
                    seen[0] = True
                    for i, r in enumerate(runners):
                        r.add(states[i], views[i].point(row), outs[i].append)

            def finish() -> None:
                if self.single and not seen[0] and not self.designated:
                    return
                for i, r in enumerate(runners):
                    r.end(states[i], outs[i].append)
                for values in _cross(outs):
                    emit(values)
            return push, finish

        if len(runners) == 1 and len(group) == 1 and runners[0].kind == "combiner":
            return self._bind_one_combiner(emit)
        groups: dict[Any, tuple[list, list, list]] = {}  # key -> (key values, states, outs)

        def push_grouped(pi: int, row: list) -> None:
            kv = [row[p] for p in group]
            k = kv[0] if len(kv) == 1 else tuple(kv)
            g = groups.get(k)
            if g is None:
                outs = [[] for _ in runners]
                g = groups[k] = (kv, [r.start(bid, outs[i].append) for i, r in enumerate(runners)], outs)
            for i, r in enumerate(runners):
                r.add(g[1][i], views[i].point(row), g[2][i].append)

        def finish_grouped() -> None:
            for kv, states, outs in groups.values():
                for i, r in enumerate(runners):
                    r.end(states[i], outs[i].append)
                for values in _cross(outs):
                    emit(kv + values)
        return push_grouped, finish_grouped


    def _bind_one_combiner(self, emit: Emit) -> tuple[Push, Finish]:
        """The common case (``group_by([f])`` then a combiner: every grouped count or sum, and the
        partials of ``persistent_aggregate``): one dict of key -> accumulated value, no per-group
        bookkeeping; the same rows as the general path."""
        runner = self.runners[0]
        agg, g0, missing = runner.agg, self.group[0], _MISSING  # type: ignore[index]
        combine, zero = agg.combine, agg.zero
        acc: dict[Any, Any] = {}
        if runner.partial:
            p0 = runner.positions[0]

            def push(pi: int, row: list) -> None:
                k = row[g0]
                cur = acc.get(k, missing)
                acc[k] = combine(zero() if cur is missing else cur, row[p0])
        else:
            init = agg.init
            point = TridentTuple([self.input_fields[p] for p in runner.positions], runner.positions).point

            def push(pi: int, row: list) -> None:
                k = row[g0]
                cur = acc.get(k, missing)
                acc[k] = combine(zero() if cur is missing else cur, init(point(row)))

        def finish() -> None:
            for k, v in acc.items():
                emit([k, v])
        return push, finish


_MISSING = object()


def _cross(outs: list[list]) -> list[list]:
    rows: list[list] = [[]]
    for emitted in outs:
        rows = [r + list(v) for r in rows for v in emitted]
    return rows


# --- state ------------------------------------------------------------------------------------
def _views(fields: list[str], positions: list[int], rows: list[list]) -> list[TridentTuple]:
    """One view per buffered row, sharing the template's names and positions (they never change)."""
    template = TridentTuple(fields, positions)
    out = []
    new = TridentTuple.__new__
    for r in rows:
        v = new(TridentTuple)
        v.fields, v._positions, v._index, v._row = template.fields, template._positions, template._index, r
        out.append(v)
    return out


class _StateOperation(Processor):
    """An operation on a state partition that buffers the batch partition's rows and acts on
    them all at its end (``_finish``)."""

    def __init__(self, input_fields: list[str], positions: list[int], op: Any, state_id: int) -> None:
        self.input_fields, self.positions, self.op, self.state_id = input_fields, positions, op, state_id

    def prepare(self, ctx, task):
        _prepare_op(self.op, ctx, [self.input_fields[p] for p in self.positions])
        self.state = task.state(self.state_id)

    def bind(self, batch, emit):
        rows: list[list] = []
        fields = [self.input_fields[p] for p in self.positions]
        return (lambda pi, row: rows.append(row)), (lambda: self._finish(batch, emit, rows, fields))

    def _finish(self, batch: BatchInfo, emit: Emit, rows: list[list], fields: list[str]) -> None:
        raise NotImplementedError


class StateQuery(_StateOperation):
    """At the batch partition's end one ``batch_retrieve`` for all its rows, then ``execute``
    per row (appending)."""

    def _finish(self, batch, emit, rows, fields):
        if not rows:
            return
        views = _views(fields, self.positions, rows)
        results = self.op.batch_retrieve(self.state, views)
        if len(results) != len(rows):
            raise ValueError(f"{type(self.op).__name__}.batch_retrieve returned {len(results)} result(s) "
                             f"for {len(rows)} tuple(s)")
        collector = _AppendCollector(emit)
        for row, view, res in zip(rows, views, results):
            collector.row = row
            self.op.execute(view, res, collector)


class PartitionPersist(_StateOperation):
    """At the batch partition's end (a committer's: the commit phase, in txid order)
    ``begin_commit``, the updater, ``commit``; nothing when no row came (unless the state
    commits empty batches)."""

    def _finish(self, batch, emit, rows, fields):
        state = self.state
        if not rows:
            if batch.txid is not None and getattr(state, "commits_empty_batches", False):
                # a replay may bring this partition nothing where its first attempt wrote
                state.begin_commit(batch.txid)
                state.commit(batch.txid)
            return
        views = _views(fields, self.positions, rows)
        if hasattr(state, "begin_commit"):
            state.begin_commit(batch.txid)
        self.op.update_state(state, views, _Collector(emit))
        if hasattr(state, "commit"):
            state.commit(batch.txid)


class Join(Processor):
    """An inner equi-join within one batch partition: rows buffered per side and key; at the
    batch's end, per key present on every side, the cross product of the sides' rows as
    ``key values + each side's other fields``."""

    def __init__(self, input_fields: list[list[str]], keys: list[list[int]], rest: list[list[int]]) -> None:
        self.sides_fields, self.keys, self.rest = input_fields, keys, rest
        self.input_fields = input_fields[0]

    def bind(self, batch, emit):
        n = len(self.keys)
        table: dict[Any, list[list[list]]] = {}

        def push(pi: int, row: list) -> None:
            k = tuple(row[p] for p in self.keys[pi])
            sides = table.get(k)
            if sides is None:
                sides = table[k] = [[] for _ in range(n)]
            sides[pi].append([row[p] for p in self.rest[pi]])

        def finish() -> None:
            for k, sides in table.items():
                if not all(sides):
                    continue
                for combo in _cross(sides):
                    emit(list(k) + combo)
        return push, finish
