"""State for topologies: key-value state with Storm's prepare/commit/rollback, in memory or in
Redis. Needs only redis-py and msgpack; never imports the runtime.

Names load on first use, so the pure parts (``state.checkpoint_state``, ``state.layout``) can
be imported without loading redis-py."""

from importlib import import_module
from typing import Any

_NAMES = {
    "CheckPointState": "checkpoint_state",
    "InMemoryKeyValueState": "keyvalue", "KeyValueState": "keyvalue", "StateError": "keyvalue",
    "RecoveryRefused": "recovery", "RecoveryReport": "recovery", "recover": "recovery", "reset": "recovery",
    "RedisKeyValueState": "redis_kv",
    "StateSerializationError": "serializer", "JsonSerializer": "serializer", "MsgpackSerializer": "serializer",
    "Serializer": "serializer", "StringSerializer": "serializer",
    "MemoryStateProvider": "providers", "RedisStateProvider": "providers", "StateProvider": "providers",
    "StateProviderError": "providers",
    "OpaqueValue": "values", "TransactionalValue": "values", "ValueMap": "values",
    "TransactionalState": "transactional",
    "MemoryMapState": "map_state", "NonTransactionalMap": "map_state", "OpaqueMap": "map_state",
    "SnapshottableMap": "map_state", "TransactionalMap": "map_state",
    "RedisMapState": "redis_map_state",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_NAMES[name]}"), name)
    globals()[name] = value
    return value
