"""Trident: Storm's exactly-once stream API, compiled onto transactional batches.

``TridentTopology`` builds a graph of streams (stream.py); ``build()`` compiles it (compiler.py)
into segments of fused operations (segment.py, processors.py) coordinated per batch like any
transactional topology, with map states in Redis or memory (state/map_state.py,
state/redis_map_state.py) updated by Storm's transactional and opaque rules."""

from typing import Any

from .operations import (
    Aggregator,
    CombinerAggregator,
    Count,
    Debug,
    Equals,
    Filter,
    FilterNull,
    FirstN,
    Function,
    MapGet,
    Negate,
    Operation,
    QueryFunction,
    ReducerAggregator,
    StateUpdater,
    Sum,
    TridentCollector,
    TupleCollectionGet,
)
from .spouts import FixedBatchSpout
from .stream import ChainedAggregatorDeclarer, GroupedStream, Stream, TridentState, TridentTopology
from .tuple import TridentError, TridentTuple

__all__ = ["Aggregator", "ChainedAggregatorDeclarer", "CombinerAggregator", "Count", "Debug", "Equals", "Filter",
           "FilterNull", "FirstN", "FixedBatchSpout", "Function", "GroupedStream", "MapGet", "MemoryMapState",
           "Negate", "Operation", "QueryFunction", "RedisMapState", "ReducerAggregator", "StateUpdater", "Stream",
           "Sum", "TridentCollector", "TridentError", "TridentState", "TridentTopology", "TridentTuple",
           "TupleCollectionGet"]


def __getattr__(name: str) -> Any:
    # The states live in state/ (which never imports the runtime); loaded on first use.
    if name == "MemoryMapState":
        from state.map_state import MemoryMapState

        return MemoryMapState
    if name == "RedisMapState":
        from state.redis_map_state import RedisMapState

        return RedisMapState
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
