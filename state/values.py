"""Exactly-once update helpers for transactional topologies (Storm's TransactionalValue and
OpaqueValue, Trident's TransactionalMap / OpaqueMap rules), in memory and over a Redis hash.

TransactionalValue(txid, value): a replay of the same txid is skipped (the batch is identical).
OpaqueValue(curr_txid, curr, prev): a replay of the same txid recomputes from ``prev`` (an opaque
batch may differ on replay); a newer txid moves ``curr`` to ``prev``; an older one is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast

import msgpack
import redis

from .layout import same_slot
from .serializer import dumps, loads


class TransactionalValue(NamedTuple):
    """Immutable; a named tuple so that a commit of thousands of keys builds them cheaply."""

    txid: int
    value: Any

    def update(self, txid: int, fn: Callable[[Any], Any]) -> TransactionalValue:
        if self.txid == txid:
            return self  # this batch was applied already: a replay changes nothing
        if self.txid > txid:  # commits come in txid order: an older txid is a stale run's (fenced off)
            raise ValueError(f"transactional value is at txid {self.txid}; cannot apply older txid {txid}")
        return TransactionalValue(txid, fn(self.value))


class OpaqueValue(NamedTuple):
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


# multi_add for transactional values: per field, skip when the stored txid is this batch's (a
# replay), else store [txid, value + delta]. Runs atomically in Redis, so it needs no WATCH;
# it checks every value before writing any.
# Lua 5.1 numbers are doubles: integer counts are exact below 2**53, and cmsgpack packs an
# integral number as an integer, so values stay ints for msgpack readers.
_ADD_SCRIPT = """
local txid = tonumber(ARGV[1])
local key = KEYS[1]
local pack, unpack_one, byte = cmsgpack.pack, cmsgpack.unpack_one, string.byte  -- locals: no global lookups per key
-- one array of deltas and one of fields: no per-argument parsing on either side
local deltas = cmsgpack.unpack(ARGV[2])
local names = cmsgpack.unpack(ARGV[3])
local head = string.char(146) .. pack(txid)  -- msgpack: a 2-array, then the txid
local n = #names
local out, m = {}, 0
local CHUNK = 2000  -- unpack() is bounded by Lua's C stack
for lo = 1, n, CHUNK do
  local hi = math.min(n, lo + CHUNK - 1)
  local raws = redis.call('HMGET', key, unpack(names, lo, hi))
  for j = lo, hi do
    local raw = raws[j - lo + 1]
    local base = 0
    local skip = false
    if raw then
      local stored, value
      if byte(raw, 1) == 146 then  -- [txid, value]: read both without building a table
        local at
        at, stored = unpack_one(raw, 1)
        at, value = unpack_one(raw, at)
      else
        local t = cmsgpack.unpack(raw)
        stored, value = t[1], t[2]
      end
      if stored == txid then
        skip = true
      elseif stored > txid then  -- commits come in txid order: an older one is a stale run's
        return redis.error_reply('field ' .. j .. ' is at txid ' .. string.format('%d', stored) .. ', after ' .. ARGV[1])
      elseif value ~= nil then
        if type(value) ~= 'number' then
          return redis.error_reply('field ' .. j .. ' holds a non-numeric value')
        end
        base = value
      end
    end
    if not skip then
      out[m + 1] = names[j]
      out[m + 2] = head .. pack(base + deltas[j])  -- [txid, value], no table either
      m = m + 2
    end
  end
end
-- every value checked before the first write: a bad one leaves the batch unapplied
for lo = 1, m, 2 * CHUNK do
  redis.call('HSET', key, unpack(out, lo, math.min(m, lo + 2 * CHUNK - 1)))
end
return m / 2
"""
_COUNT_LIMIT = 2**53  # exact integers in Lua's doubles


class ValueMap:
    """Transactional or opaque values in one Redis hash: ``multi_update`` applies one batch's
    updates to many keys in one WATCH/MULTI round trip (retried if another writer interferes)."""

    def __init__(self, client: redis.Redis, key: str, opaque: bool = False) -> None:
        self.redis = client
        self.key = key
        self.opaque = opaque

    def _decode(self, raw: bytes | None) -> Any:  # TransactionalValue or OpaqueValue, as the map is
        if raw is None:
            return None
        v = loads(raw)
        return OpaqueValue(*v) if self.opaque else TransactionalValue(*v)

    def _encode(self, k: Any, v: Any) -> bytes:
        return dumps(v, "value", k)  # a named tuple packs as the array [txid, value(, prev)]

    def get(self, keys: list) -> dict:
        # Replies are bytes (as in every cast below): msgpack values need a client that does not decode.
        raws = cast("list[bytes | None]",
                    self.redis.hmget(self.key, [dumps(k, "key", k) for k in keys]) if keys else [])
        return {k: self._decode(r) for k, r in zip(keys, raws)}

    def multi_add(self, txid: int, deltas: dict[Any, int | float]) -> int:
        """Add one batch's numeric deltas (counts, sums) in one atomic round trip; a replay of
        ``txid`` changes nothing. Same rule and stored format as ``multi_update`` with adders
        (a missing value counts as 0), without reading the values back into Python: a commit
        of thousands of keys costs one call. Opaque maps take the ``multi_update`` path.
        Returns how many keys changed."""
        keys, vals = list(deltas), list(deltas.values())  # C-level copies: no per-key Python
        # Checked in C (a set of types, min and max, and a sum that is NaN if any value is, which
        # min and max would pass); the per-key loop only names the bad key.
        if vals and not (set(map(type, vals)) <= {int, float} and -_COUNT_LIMIT < min(vals)
                         and max(vals) < _COUNT_LIMIT and (t := sum(vals)) == t):
            for k, d in zip(keys, vals):
                if type(d) not in (int, float) or not -_COUNT_LIMIT < d < _COUNT_LIMIT:
                    raise ValueError(f"multi_add: delta for key {k!r} must be an int or float below 2**53 in "
                                     f"size, got {d!r}")
        if self.opaque:
            def adder(d: int | float) -> Callable[[Any], Any]:
                return lambda v: (v or 0) + d

            return len(self.multi_update(txid, {k: adder(d) for k, d in zip(keys, vals)}))
        if not keys:
            return 0
        try:
            fields = list(map(msgpack.Packer(use_bin_type=True).pack, keys))  # one packer for the batch
        except (TypeError, ValueError, OverflowError):
            fields = [dumps(k, "key", k) for k in keys]  # raises naming the key at fault
        args = [txid, msgpack.packb(vals), msgpack.packb(fields, use_bin_type=False)]  # str type: Redis's cmsgpack lacks bin
        try:
            return int(self._add_script(keys=[self.key], args=args))
        except redis.ResponseError as e:
            if " is at txid " in str(e):
                i = int(str(e).split("field ", 1)[1].split(" ", 1)[0]) - 1
                raise ValueError(f"multi_add: key {keys[i]!r} in {self.key!r} {str(e).split(' ', 2)[2]}: commits come "
                                 "in txid order, so this is a stale run's batch; nothing of it was written") from None
            if "non-numeric" not in str(e):
                raise
            i = int(str(e).split("field ", 1)[1].split(" ", 1)[0]) - 1
            raise ValueError(f"multi_add: key {keys[i]!r} in {self.key!r} holds a non-numeric value; "
                             "nothing of this batch was written") from None

    @property
    def _add_script(self) -> Any:  # redis-py's Script
        script = getattr(self, "_script", None)
        if script is None:
            script = self._script = self.redis.register_script(_ADD_SCRIPT)
        return script

    def multi_update(self, txid: int, updates: dict[Any, Callable[[Any], Any]], initial: Any = None,
                     writer: str | None = None) -> dict:
        """Apply one batch's updates. ``writer`` (opaque maps): a stable name of this updater (a
        committer task). An opaque replay of ``txid`` may no longer contain a key that an earlier
        attempt of it updated; such a key would keep the stale attempt's value, so the writer's
        keys of its previous update of the same txid that this update lacks are reset to their
        ``prev``. Sound when a key always goes to the same writer (fields grouping)."""
        fields = {k: dumps(k, "key", k) for k in updates}
        wkey = same_slot(self.key, ":writers")  # WATCHed with the key: one hash slot
        track = self.opaque and writer is not None
        with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(*([self.key, wkey] if track else [self.key]))
                    stale: list[bytes] = []
                    if track:
                        rec = cast("bytes | None", pipe.hget(wkey, cast(str, writer)))  # track: a writer
                        if rec is not None:
                            rec_txid, rec_fields = loads(rec)
                            if rec_txid == txid:
                                now = set(fields.values())
                                stale = [f for f in rec_fields if f not in now]
                    names = list(fields.values()) + stale
                    raws = cast("list[bytes | None]", pipe.hmget(self.key, names) if names else [])
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
                    mapping: dict[Any, bytes] = {fields[k]: self._encode(k, v) for k, v in out.items()}
                    mapping.update({f: self._encode(f, v) for f, v in reset.items()})
                    if mapping:
                        pipe.hset(self.key, mapping=mapping)
                    if track:
                        pipe.hset(wkey, writer, dumps([txid, list(fields.values())], "value", writer))
                    pipe.execute()
                    return out
                except redis.WatchError:
                    continue
