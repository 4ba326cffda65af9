"""Spouts a Trident stream starts from: the transactional and opaque partitioned spouts of
this project (Redis Streams, Kafka, in memory, or a user's) and ``FixedBatchSpout``."""

from __future__ import annotations

from typing import Any

from ..transactional.spouts import (
    MemoryTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)
from .tuple import TridentError

TRANSACTIONAL, OPAQUE = "transactional", "opaque"


class FixedBatchSpout(MemoryTransactionalSpout):
    """Emits ``tuples`` (lists of values of ``fields``) in batches of up to ``batch_size``; a
    replay emits the same batch; once every tuple was emitted the spout is exhausted, and a
    topology whose spouts all are completes after its last batch commits."""

    def __init__(self, fields: list[str], batch_size: int, tuples: list[list]) -> None:
        if int(batch_size) < 1:
            raise ValueError(f"FixedBatchSpout: batch_size must be at least 1, got {batch_size!r}")
        super().__init__({0: [list(t) for t in tuples]}, fields, int(batch_size))


def spout_kind(spout: Any) -> str:
    """Which exactly-once pairings the spout allows (reference: Storm's spout/state table)."""
    return OPAQUE if isinstance(spout, OpaquePartitionedTransactionalSpout) else TRANSACTIONAL


def check_spout(spout: Any, txid: str) -> None:
    if not isinstance(spout, (PartitionedTransactionalSpout, OpaquePartitionedTransactionalSpout,
                              TransactionalSpout)):
        raise TridentError(
            f"new_stream({txid!r}): expected a transactional or opaque partitioned spout (e.g. "
            f"RedisStreamsOpaqueTransactionalSpout, KafkaOpaqueTransactionalSpout, FixedBatchSpout), got "
            f"{type(spout).__name__}")
    fields = getattr(spout, "fields", None)
    if not fields:
        raise TridentError(f"new_stream({txid!r}): the spout {type(spout).__name__} declares no fields")
