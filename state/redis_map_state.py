"""Trident map state in Redis (storm-redis's ``RedisMapState``, HASH mode).

Each partition (state task) keeps its entries in ONE hash, ``{PREFIX:INDEX}:map``: the hash tag
puts a partition in one Redis Cluster slot, and a batch's writes are one ``HSET``, so a crash
leaves a partition's batch all-or-nothing. Reads are one ``HMGET`` per call.

* field: msgpack of the key list (the group fields' values);
* value: msgpack of ``[txid, value]`` (transactional), ``[curr_txid, curr, prev]`` (opaque) or
  the raw value (non-transactional).

Without ``key_prefix`` the prefix is ``trident:NAME``, NAME the state's name the topology gives
it in the conf (``trident.state.name``: its spout's txid, then ``-2``, ``-3``... for a spout's
further states), so two states or two topologies never share keys and renaming a topology does
not orphan its state. A ``RedisError`` propagates: the runtime fails the batch and replays it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import redis

from .connection import connect, redacted
from .map_state import (
    LAST_TXID_KEY,
    MapState,
    NonTransactionalMap,
    OpaqueMap,
    SnapshottableMap,
    StateType,
    TransactionalMap,
)
from .serializer import dumps, loads
from .values import OpaqueValue, TransactionalValue

DEFAULT_PREFIX = "trident"
URL_KEY = "redis.url"
NAME_KEY = "trident.state.name"  # set by the Trident compiler for each persisted state


def partition_key(key_prefix: str, partition_index: int) -> str:
    """The hash of one partition: ``{PREFIX:INDEX}:map``."""
    return f"{{{key_prefix}:{partition_index}}}:map"


def current(state_type: str, wrapped: Any) -> Any:
    """The value a wrapped entry holds now (``curr`` for opaque)."""
    if wrapped is None:
        return None
    if state_type == StateType.OPAQUE:
        return wrapped.curr
    if state_type == StateType.TRANSACTIONAL:
        return wrapped.value
    return wrapped


class RedisHashBackingMap:
    """A ``BackingMap`` over one Redis hash: one HMGET per read, one HSET per write."""

    def __init__(self, client: redis.Redis, key: str, state_type: str) -> None:
        self.client = client
        self.key = key
        self.state_type = state_type

    def _decode(self, raw: bytes | None) -> Any:
        if raw is None:
            return None
        v = loads(raw)
        if self.state_type == StateType.OPAQUE:
            return OpaqueValue(*v)
        if self.state_type == StateType.TRANSACTIONAL:
            return TransactionalValue(*v)
        return v

    def multi_get(self, keys: list[list]) -> list:
        if not keys:
            return []
        fields = [dumps(list(k), "key", k) for k in keys]
        raws = cast("list[bytes | None]", self.client.hmget(self.key, fields))
        return [self._decode(r) for r in raws]

    def multi_put(self, keys: list[list], values: list) -> None:
        if not keys:
            return
        # A named tuple packs as an array: [txid, value] / [curr_txid, curr, prev].
        mapping: dict[Any, bytes] = {dumps(list(k), "key", k): dumps(v, "value", k) for k, v in zip(keys, values)}
        self.client.hset(self.key, mapping=mapping)

    def items(self) -> list[tuple[list, Any]]:
        """(key, wrapped value) of every entry, by HSCAN (no single huge reply)."""
        return [(loads(f), self._decode(raw)) for f, raw in self.client.hscan_iter(self.key)]


class RedisMap(SnapshottableMap):
    """The state ``RedisMapState`` makes: ``SnapshottableMap(XMap(RedisHashBackingMap))``."""

    def __init__(self, delegate: MapState, backing: RedisHashBackingMap, global_key: Sequence[Any] | None = None) -> None:
        super().__init__(delegate, global_key)
        self.backing = backing

    def get_tuples(self) -> list[list]:
        """``[key values..., current value]`` per entry of this partition."""
        rows = ([*k, current(self.backing.state_type, v)] for k, v in self.backing.items() if list(k) != LAST_TXID_KEY)
        return [r for r in rows if r[-1] is not None]  # None: a key only an abandoned attempt wrote

    def close(self) -> None:
        self.backing.client.close()


_MAPS: dict[str, Callable[[RedisHashBackingMap], MapState]] = {StateType.OPAQUE: OpaqueMap, StateType.TRANSACTIONAL: TransactionalMap,
         StateType.NON_TRANSACTIONAL: NonTransactionalMap}


class RedisMapState:
    """A state factory: picklable, connects only in ``make_state`` (on the worker). The Redis
    URL is ``url`` or else the topology conf's ``redis.url`` (any form of state/connection.py,
    ``redis+cluster://`` included)."""

    def __init__(self, state_type: str, url: str | None = None, key_prefix: str | None = None) -> None:
        if state_type not in StateType.ALL:
            raise ValueError(f"state_type must be one of {', '.join(StateType.ALL)}, got {state_type!r}")
        prefix = key_prefix
        if prefix is not None and (not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix):
            # braces would end the hash tag early and scatter a partition over slots
            raise ValueError(f"key_prefix must be a non-empty string without braces, got {key_prefix!r}")
        self.state_type = state_type
        self.url = url
        self.key_prefix = prefix

    @classmethod
    def transactional(cls, url: str | None = None, key_prefix: str | None = None) -> RedisMapState:
        return cls(StateType.TRANSACTIONAL, url, key_prefix)

    @classmethod
    def opaque(cls, url: str | None = None, key_prefix: str | None = None) -> RedisMapState:
        return cls(StateType.OPAQUE, url, key_prefix)

    @classmethod
    def non_transactional(cls, url: str | None = None, key_prefix: str | None = None) -> RedisMapState:
        return cls(StateType.NON_TRANSACTIONAL, url, key_prefix)

    def key(self, partition_index: int, conf: dict[str, Any] | None = None) -> str:
        prefix = self.key_prefix
        if prefix is None:
            name = (conf or {}).get(NAME_KEY)
            prefix = f"{DEFAULT_PREFIX}:{name}" if name else DEFAULT_PREFIX
            if "{" in prefix or "}" in prefix:
                raise ValueError(f"RedisMapState: the state name {name!r} holds a brace: give key_prefix=")
        return partition_key(prefix, partition_index)

    def make_state(self, conf: dict[str, Any] | None, partition_index: int, num_partitions: int) -> RedisMap:
        url = self.url or (conf or {}).get(URL_KEY)
        if not url:
            raise ValueError(f"RedisMapState needs a Redis URL: pass url= or set {URL_KEY!r} in the topology conf")
        backing = RedisHashBackingMap(connect(url), self.key(partition_index, conf), self.state_type)
        return RedisMap(_MAPS[self.state_type](backing), backing)

    def __repr__(self) -> str:
        return f"RedisMapState({self.state_type!r}, url={None if self.url is None else redacted(self.url)!r}, key_prefix={self.key_prefix!r})"
