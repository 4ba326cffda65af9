"""Storm's Trident testing operations (its trident/testing package), shared by the Trident tests."""

from __future__ import annotations

import json

from topology_runtime.trident import Aggregator, Filter, Function, ReducerAggregator


class Split(Function):
    """Storm's testing Split: splits on a space, skipping empty tokens."""

    def execute(self, tup, collector):
        for w in tup[0].split(" "):
            if w:
                collector.emit([w])


class StringLength(Function):
    def execute(self, tup, collector):
        collector.emit([len(tup[0])])


class TrueFilter(Filter):
    def is_keep(self, tup):
        return True


class CountAsAggregator(Aggregator):
    """Storm's testing CountAsAggregator: ``[count]``, ``[0]`` for an empty partition."""

    def init(self, batch_id, collector):
        return [0]

    def aggregate(self, state, tup, collector):
        state[0] += 1

    def complete(self, state, collector):
        collector.emit([state[0]])


class TuplifyArgs(Function):
    """Storm's testing TuplifyArgs: the JSON list of lists in the argument, one tuple each."""

    def execute(self, tup, collector):
        for row in json.loads(tup[0]):
            collector.emit(row)


class CountReducer(ReducerAggregator):
    def init(self):
        return 0

    def reduce(self, acc, tup):
        return acc + 1
