"""Transactional topologies (Storm's seed "Design 3"): batches with txids processed in parallel,
committed strictly in txid order, replayed whole on failure.

Built on the plain runtime and the coordination layer: the coordinator is a spout; the emitters
and batch bolts run in coordination's CoordinatedBolt, whose per-batch counts travel on its direct
stream. One module per role: coordinator.py (the coordinator spout), emitter.py (the emitter),
batch_executor.py (what runs inside the CoordinatedBolt: Storm's BatchBoltExecutor and
TransactionalSpoutBatchExecutor, attempts on the wire, row chunks); their Redis records are
state/transactional.py's TransactionalState. The Redis Streams spouts live with the other
connectors (topology_runtime/connectors/) and are re-exported here on first use.
"""

from typing import Any

from ..coordination.batch import BatchBolt
from ..reliability.transactional import TransactionAttempt
from .batch import Committer
from .builder import TransactionalTopologyBuilder
from .spouts import (
    BatchCannotSucceed,
    MemoryTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)

__all__ = ["BatchBolt", "BatchCannotSucceed", "Committer", "MemoryTransactionalSpout", "OpaquePartitionedTransactionalSpout",
           "PartitionedTransactionalSpout", "RedisStreamsOpaqueTransactionalSpout",
           "RedisStreamsTransactionalSpout", "TransactionAttempt", "TransactionalSpout",
           "TransactionalTopologyBuilder"]


def __getattr__(name: str) -> Any:
    # Lazy: connectors sit above this layer (they implement its spout contracts).
    if name in ("RedisStreamsOpaqueTransactionalSpout", "RedisStreamsTransactionalSpout"):
        from importlib import import_module

        value = getattr(import_module("topology_runtime.connectors.redis_streams_transactional"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
