"""Exactly-once update helpers for transactional topologies (Storm's TransactionalValue and
OpaqueValue, Trident's TransactionalMap / OpaqueMap rules), in memory and over a Redis hash.

TransactionalValue(txid, value): a replay of the same txid is skipped (the batch is identical).
OpaqueValue(curr_txid, curr, prev): a replay of the same txid recomputes from ``prev`` (an opaque
batch may differ on replay); a newer txid moves ``curr`` to ``prev``; an older one is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from .serializer import dumps, loads


@dataclass(frozen=True)
class TransactionalValue:
    txid: int
    value: Any

    def update(self, txid: int, fn: Callable[[Any], Any]) -> TransactionalValue:
        if self.txid == txid:
            return self  # this batch was applied already: a replay changes nothing
        return TransactionalValue(txid, fn(self.value))


@dataclass(frozen=True)
class OpaqueValue:
    curr_txid: int
    curr: Any
    prev: Any = None

    def get(self, txid: int | None = None) -> Any:
        if txid is None or self.curr_txid < txid:
            return self.curr
        if self.curr_txid == txid:
            return self.prev
        raise ValueError(f"opaque value is at txid {self.curr_txid}, behind it: {txid}")

    def update(self, txid: int, fn: Callable[[Any], Any]) -> OpaqueValue:
        if self.curr_txid > txid:
            raise ValueError(f"opaque value is at txid {self.curr_txid}; cannot apply older txid {txid}")
        base = self.prev if self.curr_txid == txid else self.curr
        return OpaqueValue(txid, fn(base), base)


class ValueMap:
    """Transactional or opaque values in one Redis hash: ``multi_update`` applies one batch's
    updates to many keys in one WATCH/MULTI round trip (retried if another writer interferes)."""

    def __init__(self, client: redis.Redis, key: str, opaque: bool = False) -> None:
        self.redis = client
        self.key = key
        self.opaque = opaque

    def _decode(self, raw: bytes | None):
        if raw is None:
            return None
        v = loads(raw)
        return OpaqueValue(v[0], v[1], v[2]) if self.opaque else TransactionalValue(v[0], v[1])

    def _encode(self, k: Any, v) -> bytes:
        data = [v.curr_txid, v.curr, v.prev] if self.opaque else [v.txid, v.value]
        return dumps(data, "value", k)

    def get(self, keys: list) -> dict:
        raws = self.redis.hmget(self.key, [dumps(k, "key", k) for k in keys]) if keys else []
        return {k: self._decode(r) for k, r in zip(keys, raws)}

    def multi_update(self, txid: int, updates: dict[Any, Callable[[Any], Any]], initial: Any = None,
                     writer: str | None = None) -> dict:
        """Apply one batch's updates. ``writer`` (opaque maps): a stable name of this updater (a
        committer task). An opaque replay of ``txid`` may no longer contain a key that an earlier
        attempt of it updated; such a key would keep the stale attempt's value, so the writer's
        keys of its previous update of the same txid that this update lacks are reset to their
        ``prev``. Sound when a key always goes to the same writer (fields grouping)."""
        fields = {k: dumps(k, "key", k) for k in updates}
        wkey = f"{self.key}:writers"
        track = self.opaque and writer is not None
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(*([self.key, wkey] if track else [self.key]))
                    stale: list[bytes] = []
                    if track:
                        rec = pipe.hget(wkey, writer)
                        if rec is not None:
                            rec_txid, rec_fields = loads(rec)
                            if rec_txid == txid:
                                now = set(fields.values())
                                stale = [f for f in rec_fields if f not in now]
                    names = list(fields.values()) + stale
                    raws = pipe.hmget(self.key, names) if names else []
                    out = {}
                    for (k, fn), raw in zip(updates.items(), raws):
                        cur = self._decode(raw)
                        if cur is None:
                            cur = OpaqueValue(-1, initial, initial) if self.opaque else TransactionalValue(-1, initial)
                        out[k] = cur.update(txid, fn)
                    reset = {}
                    for f, raw in zip(stale, raws[len(fields):]):
                        cur = self._decode(raw)
                        if cur is not None and cur.curr_txid == txid:
                            reset[f] = OpaqueValue(txid, cur.prev, cur.prev)  # as if this txid never touched it
                    pipe.multi()
                    mapping = {fields[k]: self._encode(k, v) for k, v in out.items()}
                    mapping.update({f: self._encode(f, v) for f, v in reset.items()})
                    if mapping:
                        pipe.hset(self.key, mapping=mapping)
                    if track:
                        pipe.hset(wkey, writer, dumps([txid, list(fields.values())], "value", writer))
                    pipe.execute()
                    return out
                except redis.WatchError:
                    continue
