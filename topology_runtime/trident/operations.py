"""What a user writes for Trident (Storm's operation interfaces, snake_case) and the built-ins.

A plain callable works where a Function is expected (it returns an iterable of value lists) and
where a Filter is expected (it returns a bool)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from .tuple import TridentTuple

log = logging.getLogger(__name__)


class TridentCollector:
    """``emit(values)`` hands values (a list) on; what they become (appended to the input, or a
    fresh tuple) is the operation's rule. ``report_error(e)`` logs it (the batch goes on)."""

    def emit(self, values: list) -> None:  # pragma: no cover - replaced by the runtime's
        raise NotImplementedError

    def report_error(self, error: BaseException) -> None:
        log.error("trident operation reported: %s: %s", type(error).__name__, error)


class Operation:
    def prepare(self, conf: dict, context: Any) -> None:
        """``context.partition_index`` / ``context.num_partitions``: this task's place."""

    def cleanup(self) -> None:
        pass


class Function(Operation):
    def execute(self, tup: TridentTuple, collector: TridentCollector) -> None:
        raise NotImplementedError


class Filter(Operation):
    def is_keep(self, tup: TridentTuple) -> bool:
        raise NotImplementedError


class CombinerAggregator(Operation):
    """``init(tup)`` per tuple, ``combine(a, b)`` associative, ``zero()`` its identity (it is
    folded into every partial, as in Storm). One output field."""

    def init(self, tup: TridentTuple) -> Any:
        raise NotImplementedError

    def combine(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def zero(self) -> Any:
        raise NotImplementedError


class ReducerAggregator(Operation):
    """``init()`` then ``reduce(acc, tup)`` per tuple. One output field; no partial step."""

    def init(self) -> Any:
        raise NotImplementedError

    def reduce(self, acc: Any, tup: TridentTuple) -> Any:
        raise NotImplementedError


class Aggregator(Operation):
    """``init(batch_id, collector)`` per batch partition (per group when grouped),
    ``aggregate(state, tup, collector)`` per tuple, ``complete(state, collector)`` at its end;
    each may emit any number of tuples."""

    def init(self, batch_id: Any, collector: TridentCollector) -> Any:
        raise NotImplementedError

    def aggregate(self, state: Any, tup: TridentTuple, collector: TridentCollector) -> None:
        raise NotImplementedError

    def complete(self, state: Any, collector: TridentCollector) -> None:
        raise NotImplementedError


class StateUpdater(Operation):
    """``update_state(state, tuples, collector)`` once per batch partition, in the commit phase;
    what it emits is the state's new-values stream."""

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        raise NotImplementedError


class QueryFunction(Operation):
    """``batch_retrieve(state, tuples) -> list`` (one result per tuple, one call per batch
    partition), then ``execute(tup, result, collector)`` per tuple (its emits are appended)."""

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list:
        raise NotImplementedError

    def execute(self, tup: TridentTuple, result: Any, collector: TridentCollector) -> None:
        collector.emit([result])


# --- plain callables --------------------------------------------------------------------------
class _CallableFunction(Function):
    def __init__(self, fn: Callable[[TridentTuple], Iterable[list] | None]) -> None:
        self.fn = fn

    def execute(self, tup: TridentTuple, collector: TridentCollector) -> None:
        out = self.fn(tup)
        if out is not None:
            for values in out:
                collector.emit(values)


class _CallableFilter(Filter):
    def __init__(self, fn: Callable[[TridentTuple], bool]) -> None:
        self.fn = fn

    def is_keep(self, tup: TridentTuple) -> bool:
        return bool(self.fn(tup))


def as_function(fn: Any, op: str) -> Function:
    from .tuple import TridentError

    if isinstance(fn, Function):
        return fn
    if isinstance(fn, Operation) or not callable(fn):
        raise TridentError(f"{op}: expected a Function or a callable returning value lists, got {type(fn).__name__}")
    return _CallableFunction(fn)


def as_filter(fn: Any, op: str) -> Filter:
    from .tuple import TridentError

    if isinstance(fn, Filter):
        return fn
    if isinstance(fn, Operation) or not callable(fn):
        raise TridentError(f"{op}: expected a Filter or a callable returning a bool, got {type(fn).__name__}")
    return _CallableFilter(fn)


# --- built-ins --------------------------------------------------------------------------------
class Count(CombinerAggregator):
    def init(self, tup: TridentTuple) -> int:
        return 1

    def combine(self, a: int, b: int) -> int:
        return a + b

    def zero(self) -> int:
        return 0


class Sum(CombinerAggregator):
    """Sums its one input field (a None input is an error, as Storm's: put FilterNull first)."""

    def init(self, tup: TridentTuple) -> Any:
        v = tup[0]
        if v is None:
            raise TypeError(f"Sum: a None value in {tup.fields[0]!r} (filter it out with FilterNull first)")
        return v

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def zero(self) -> int:
        return 0


class FilterNull(Filter):
    """Drops a tuple if any of its input fields is None."""

    def is_keep(self, tup: TridentTuple) -> bool:
        return all(v is not None for v in tup)


class Equals(Filter):
    """Keeps a tuple whose input fields are all equal."""

    def is_keep(self, tup: TridentTuple) -> bool:
        vals = tup.values
        return all(v == vals[0] for v in vals[1:])


class Negate(Filter):
    def __init__(self, inner: Filter) -> None:
        self.inner = as_filter(inner, "Negate")

    def prepare(self, conf: dict, context: Any) -> None:
        self.inner.prepare(conf, context)

    def is_keep(self, tup: TridentTuple) -> bool:
        return not self.inner.is_keep(tup)


class Debug(Filter):
    """Logs every tuple (at INFO, prefixed with ``name``) and keeps it."""

    def __init__(self, name: str = "DEBUG") -> None:
        self.name = name

    def is_keep(self, tup: TridentTuple) -> bool:
        log.info("%s: %s", self.name, list(tup))
        return True


class MapGet(QueryFunction):
    """The state's value for each input tuple's values as the key (None when absent)."""

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list:
        return list(state.multi_get([t.values for t in tuples]))


class TupleCollectionGet(QueryFunction):
    """Every ``[key..., value]`` entry of the state partition, for each input tuple (pair it
    with ``broadcast()`` to read the whole state)."""

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list:
        entries = [list(e) for e in state.get_tuples()] if tuples else []
        return [entries] * len(tuples)

    def execute(self, tup: TridentTuple, result: Any, collector: TridentCollector) -> None:
        for entry in result:
            collector.emit(entry)


class FirstN:
    """An assembly: the first ``n`` tuples of each batch (with ``sort_field``: the ``n``
    smallest, ``reverse=True`` the largest), per partition, then once more globally. Use as
    ``stream.apply_assembly(FirstN(5, "count", reverse=True))``."""

    def __init__(self, n: int, sort_field: str | None = None, reverse: bool = False) -> None:
        if int(n) < 1:
            raise ValueError(f"FirstN: n must be at least 1, got {n!r}")
        self.n, self.sort_field, self.reverse = int(n), sort_field, bool(reverse)

    def apply(self, stream: Any) -> Any:
        agg = _FirstNAgg(self.n, self.sort_field, self.reverse)
        fields = list(stream.output_fields)
        return (stream.partition_aggregate(fields, agg, fields)
                .global_().partition_aggregate(fields, _FirstNAgg(self.n, self.sort_field, self.reverse), fields))


class _FirstNAgg(Aggregator):
    def __init__(self, n: int, sort_field: str | None, reverse: bool) -> None:
        self.n, self.sort_field, self.reverse = n, sort_field, reverse

    def init(self, batch_id: Any, collector: TridentCollector) -> list:
        return []

    def aggregate(self, state: list, tup: TridentTuple, collector: TridentCollector) -> None:
        state.append(tup.values)

    def complete(self, state: list, collector: TridentCollector) -> None:
        rows = state
        if self.sort_field is not None:
            i = self._index
            rows = sorted((r for r in state if r[i] is not None), key=lambda r: r[i], reverse=self.reverse)
        for r in rows[:self.n]:
            collector.emit(r)

    def prepare(self, conf: dict, context: Any) -> None:
        self._index = context.input_fields.index(self.sort_field) if self.sort_field is not None else 0


class MinMaxBy(Aggregator):
    """``min_by`` / ``max_by``: the whole tuple with the smallest (largest) value of ``field``
    in each batch partition; None values are skipped; an empty partition emits nothing."""

    def __init__(self, field: str, largest: bool) -> None:
        self.field, self.largest = field, largest

    def prepare(self, conf: dict, context: Any) -> None:
        self._index = context.input_fields.index(self.field)

    def init(self, batch_id: Any, collector: TridentCollector) -> list:
        return [None]

    def aggregate(self, state: list, tup: TridentTuple, collector: TridentCollector) -> None:
        v = tup[self._index]
        if v is None:
            return
        best = state[0]
        if best is None or (v > best[self._index] if self.largest else v < best[self._index]):
            state[0] = tup.values

    def complete(self, state: list, collector: TridentCollector) -> None:
        if state[0] is not None:
            collector.emit(state[0])
