"""State for topologies: key-value state with Storm's prepare/commit/rollback, in memory or in
Redis. Needs only redis-py and msgpack; never imports the runtime."""

from .checkpoint import CheckPointState
from .keyvalue import InMemoryKeyValueState, KeyValueState, StateError
from .recovery import RecoveryRefused, RecoveryReport, recover, reset
from .redis_kv import RedisKeyValueState
from .serializer import StateSerializationError
from .values import OpaqueValue, TransactionalValue, ValueMap

__all__ = ["OpaqueValue", "TransactionalValue", "ValueMap", "CheckPointState", "InMemoryKeyValueState", "KeyValueState", "RecoveryRefused", "RecoveryReport",
           "RedisKeyValueState", "StateError", "StateSerializationError", "recover", "reset"]
