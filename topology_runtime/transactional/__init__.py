"""Transactional topologies (Storm's seed "Design 3"): batches with txids processed in parallel,
committed strictly in txid order, replayed whole on failure.

Built on the plain runtime: the coordinator is a spout, emitters and batch bolts are
CoordinatedBolt wrappers whose per-batch counts travel on a direct coordination stream.
"""

from ..connectors.redis_streams_transactional import (
           RedisStreamsOpaqueTransactionalSpout,
           RedisStreamsTransactionalSpout,
)
from ..reliability.transactional import TransactionAttempt
from .batch import BatchBolt, Committer
from .builder import TransactionalTopologyBuilder
from .spouts import MemoryTransactionalSpout, OpaquePartitionedTransactionalSpout, PartitionedTransactionalSpout

__all__ = ["BatchBolt", "Committer", "MemoryTransactionalSpout", "OpaquePartitionedTransactionalSpout",
           "PartitionedTransactionalSpout", "RedisStreamsOpaqueTransactionalSpout",
           "RedisStreamsTransactionalSpout", "TransactionAttempt", "TransactionalTopologyBuilder"]
