"""Connectors to external systems: Redis Streams spouts for plain (``redis_stream``) and
transactional (``redis_streams_transactional``) topologies; Kafka spouts and bolt (``kafka``)."""

from typing import Any

_NAMES = {
    "RedisStreamSpout": "redis_stream", "RedisStreamReplaySpout": "redis_stream",
    "RedisStreamsTransactionalSpout": "redis_streams_transactional",
    "RedisStreamsOpaqueTransactionalSpout": "redis_streams_transactional",
    "KafkaSpout": "kafka", "KafkaBolt": "kafka",
    "KafkaTransactionalSpout": "kafka_transactional", "KafkaOpaqueTransactionalSpout": "kafka_transactional",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    # Lazy: the transactional spouts import the transactional package, which imports them back.
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
