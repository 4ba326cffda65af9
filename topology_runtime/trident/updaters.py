"""The state updaters ``persistent_aggregate`` plans use (Storm's MapCombinerAggStateUpdater,
MapReducerAggStateUpdater, CombinerAggStateUpdater, ReducerAggStateUpdater): one
``multi_update`` per batch partition, so a map state reads once and writes once."""

from __future__ import annotations

from typing import Any

from .operations import CombinerAggregator, ReducerAggregator, StateUpdater, TridentCollector
from .tuple import TridentTuple


class MapCombinerUpdater(StateUpdater):
    """Rows ``group values + [partial]``: partials of one key (from several upstream tasks) are
    combined, then ``stored is None ? partial : combine(stored, partial)``; emits
    ``group values + [new value]`` per key."""

    def __init__(self, agg: CombinerAggregator, n_group: int) -> None:
        self.agg, self.n = agg, n_group

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        n, combine = self.n, self.agg.combine
        partials: dict[Any, list] = {}
        for t in tuples:
            vals = t.values
            key = tuple(vals[:n])
            cur = partials.get(key)
            partials[key] = [vals[n]] if cur is None else [combine(cur[0], vals[n])]
        keys = [list(k) for k in partials]
        updaters = [_combine_into(combine, p[0]) for p in partials.values()]
        for k, new in zip(keys, state.multi_update(keys, updaters)):
            collector.emit(k + [new])


def _combine_into(combine, partial):
    return lambda stored: partial if stored is None else combine(stored, partial)


class MapReducerUpdater(StateUpdater):
    """Rows grouped by key; per key ``acc = stored ?? init()``, then ``reduce`` over the key's
    rows of the batch (the reducer sees the input fields after the group fields)."""

    def __init__(self, agg: ReducerAggregator, n_group: int, input_fields: list[str]) -> None:
        self.agg, self.n, self.input_fields = agg, n_group, input_fields

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        n = self.n
        by_key: dict[Any, list[list]] = {}
        for t in tuples:
            vals = t.values
            by_key.setdefault(tuple(vals[:n]), []).append(vals[n:])
        keys = [list(k) for k in by_key]
        updaters = [self._reducer(rows) for rows in by_key.values()]
        for k, new in zip(keys, state.multi_update(keys, updaters)):
            collector.emit(k + [new])

    def _reducer(self, rows: list[list]):
        agg, fields = self.agg, self.input_fields

        def update(stored: Any) -> Any:
            acc = agg.init() if stored is None else stored
            for r in rows:
                acc = agg.reduce(acc, TridentTuple.of(fields, r))
            return acc
        return update


class GlobalCombinerUpdater(StateUpdater):
    """A non-grouped combiner total: exactly one partial per batch (the global stage emits one
    even for an empty batch); ``state.update(combine(stored, partial))``; emits ``[new]``."""

    def __init__(self, agg: CombinerAggregator) -> None:
        self.agg = agg

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        combine = self.agg.combine
        partial = tuples[0][0]
        for t in tuples[1:]:
            partial = combine(partial, t[0])
        collector.emit([state.update(_combine_into(combine, partial))])


class GlobalReducerUpdater(StateUpdater):
    def __init__(self, agg: ReducerAggregator, input_fields: list[str]) -> None:
        self.agg, self.input_fields = agg, input_fields

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        agg, rows = self.agg, [t.values for t in tuples]

        def update(stored: Any) -> Any:
            acc = agg.init() if stored is None else stored
            for r in rows:
                acc = agg.reduce(acc, TridentTuple.of(self.input_fields, r))
            return acc
        collector.emit([state.update(update)])
