"""RedisKeyValueState: a task's key-value state in Redis, committed atomically.

Reads come from an in-memory view loaded once (lazily) and kept between checkpoints; writes are
buffered. ``prepare_commit`` is one MULTI/EXEC round trip (buffered writes into the prepare
hash plus the prepare txid), ``commit`` one script run (prepare hash merged into the state
hash, tombstones deleted, commit txid recorded, prepare hash dropped), so a crash never leaves
half a commit and prepared data survive until recovery decides. With ``replication``
(``topology.state.redis.min.replicas``) each prepare, commit and rollback is acknowledged only
once enough replicas have it (state/replication.py), else it raises NotReplicated.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis

from .keyvalue import KeyValueState, StateError
from .layout import task_key
from .replication import NO_WAIT, Replication, atomic
from .serializer import TOMBSTONE, dumps, loads

# KEYS: state, prepare, txid. ARGV: txid, tombstone. Idempotent: re-running a finished commit is a no-op.
COMMIT_SCRIPT = """
local prepared = redis.call('HGET', KEYS[3], 'prepare')
if prepared ~= ARGV[1] then
  if redis.call('HGET', KEYS[3], 'commit') == ARGV[1] then return -1 end
  return redis.error_reply('no prepared state for txid ' .. ARGV[1] .. ' (prepared: ' .. tostring(prepared) .. ')')
end
local p = redis.call('HGETALL', KEYS[2])
for i = 1, #p, 2 do
  if p[i + 1] == ARGV[2] then
    redis.call('HDEL', KEYS[1], p[i])
  else
    redis.call('HSET', KEYS[1], p[i], p[i + 1])
  end
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[3], 'commit', ARGV[1])
redis.call('HDEL', KEYS[3], 'prepare')
return #p / 2
"""

# KEYS: prepare, txid. Drops prepared data; the committed txid stays.
ROLLBACK_SCRIPT = """
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], 'prepare')
return 1
"""


_DELETED = object()
_PLAIN = frozenset((str, int, float, bool, bytes, type(None)))  # msgpack-able as they are (ints: range-checked)


class RedisKeyValueState(KeyValueState):
    def __init__(self, client: redis.Redis, topology_id: str, task: int | str,
                 replication: Replication = NO_WAIT) -> None:
        self.redis = client
        self.replication = replication
        self.topology_id = topology_id
        self.task = task
        self.k_state = task_key(topology_id, task, "state")
        self.k_prepare = task_key(topology_id, task, "prepare")
        self.k_txid = task_key(topology_id, task, "txid")
        self._commit = client.register_script(COMMIT_SCRIPT)
        self._rollback = client.register_script(ROLLBACK_SCRIPT)
        self._pending: dict = {}  # key -> value (or _DELETED) written since the last prepare
        self._view: dict | None = None  # key -> value as the bolt sees it (committed + prepared + pending)
        txids = client.hgetall(self.k_txid)
        self.committed_txid = int(txids[b"commit"]) if b"commit" in txids else -1
        self.prepared_txid = int(txids[b"prepare"]) if b"prepare" in txids else None

    # --- the view ----------------------------------------------------------------------------
    def _load(self) -> dict:
        """One load per task: committed data overlaid with what is prepared (a recovered task
        sees its prepared writes until recovery commits or rolls them back)."""
        if self._view is None:
            pipe = self.redis.pipeline(transaction=True)
            pipe.hgetall(self.k_state)
            pipe.hgetall(self.k_prepare)
            committed, prepared = pipe.execute()
            view = {loads(k): loads(v) for k, v in committed.items()}
            for k, v in prepared.items():
                if v == TOMBSTONE:
                    view.pop(loads(k), None)
                else:
                    view[loads(k)] = loads(v)
            for k, v in self._pending.items():
                if v is _DELETED:
                    view.pop(k, None)
                else:
                    view[k] = v
            self._view = view
        return self._view

    def get(self, key: Any, default: Any = None) -> Any:
        view = self._view
        if view is None:
            view = self._load()
        return view.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        # Checked now (the error names the key, in the bolt's execute); serialized at prepare,
        # once per key per checkpoint however often it was written.
        if type(key) not in _PLAIN:
            dumps(key, "key", key)
        if type(value) not in _PLAIN or (type(value) is int and not -(2**63) <= value < 2**64):
            dumps(value, "value", key)
        self._pending[key] = value
        view = self._view
        if view is None:
            view = self._load()
        view[key] = value

    def delete(self, key: Any) -> None:
        self._pending[key] = _DELETED
        view = self._view
        if view is None:
            view = self._load()
        view.pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._load().items()))

    # --- the protocol ------------------------------------------------------------------------
    def prepare_commit(self, txid: int) -> None:
        if txid <= self.committed_txid:
            raise StateError(f"task {self.task}: prepare_commit({txid}) but txid {self.committed_txid} is committed")
        data = {dumps(k, "key", k): (TOMBSTONE if v is _DELETED else dumps(v, "value", k))
                for k, v in self._pending.items()}
        if self.replication:
            commands = [("HSET", self.k_prepare, *(x for kv in data.items() for x in kv))] if data else []
            atomic(self.redis, self.k_txid, [*commands, ("HSET", self.k_txid, "prepare", txid)], self.replication)
        else:
            pipe = self.redis.pipeline(transaction=True)
            if data:
                pipe.hset(self.k_prepare, mapping=data)
            pipe.hset(self.k_txid, "prepare", txid)
            pipe.execute()
        self._pending = {}
        self.prepared_txid = txid

    def commit(self, txid: int) -> None:
        if self.prepared_txid != txid and self.committed_txid != txid:
            raise StateError(f"task {self.task}: commit({txid}) but the prepared txid is {self.prepared_txid}")
        keys = [self.k_state, self.k_prepare, self.k_txid]
        if self.replication:
            atomic(self.redis, self.k_txid, [("EVAL", COMMIT_SCRIPT, 3, *keys, txid, TOMBSTONE)], self.replication)
        else:
            self._commit(keys=keys, args=[txid, TOMBSTONE])
        self.committed_txid = txid
        self.prepared_txid = None

    def rollback(self) -> None:
        if self.replication:
            atomic(self.redis, self.k_txid, [("EVAL", ROLLBACK_SCRIPT, 2, self.k_prepare, self.k_txid)],
                   self.replication)
        else:
            self._rollback(keys=[self.k_prepare, self.k_txid])
        self._pending = {}
        self._view = None  # back to the committed data, reloaded on next access
        self.prepared_txid = None
