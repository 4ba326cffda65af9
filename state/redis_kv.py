"""RedisKeyValueState: a task's key-value state in Redis, committed atomically.

Reads come from an in-memory view loaded once (lazily) and kept between checkpoints; writes are
buffered. ``prepare_commit`` is one MULTI/EXEC round trip (buffered writes into the prepare
hash plus the prepare txid), ``commit`` one script run (prepare hash merged into the state
hash, tombstones deleted, commit txid recorded, prepare hash dropped), so a crash never leaves
half a commit and prepared data survive until recovery decides. With ``replication``
(``topology.state.redis.min.replicas``) each prepare, commit and rollback is acknowledged only
once enough replicas have it (state/replication.py), else it raises NotReplicated. Keys and
values go through msgpack unless ``key_serializer`` / ``value_serializer`` are given
(state/serializer.py; e.g. ``StringSerializer`` for hashes other tools read with ``HGETALL``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis

from . import fencing
from .fencing import FENCE_CHECK, with_fence
from .keyvalue import KeyValueState, StateError
from .layout import slot_key, state_part
from .replication import NO_WAIT, Replication, atomic
from .serializer import TOMBSTONE, Serializer, dumps, loads, serialize_with

# KEYS: state, prepare, txid, fence. ARGV: txid, tombstone, token. Idempotent: re-running a
# finished commit is a no-op. Both scripts start with the fence check (state/fencing.py).
COMMIT_SCRIPT = FENCE_CHECK + """
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

# KEYS: prepare, txid, fence. ARGV: token. Drops prepared data; the committed txid stays.
ROLLBACK_SCRIPT = FENCE_CHECK + """
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], 'prepare')
return 1
"""


_DELETED = object()


def overlay_pending(view: dict, pending: dict) -> dict:
    """``view`` with the writes not prepared yet applied (deletes as ``_DELETED``)."""
    for k, v in pending.items():
        if v is _DELETED:
            view.pop(k, None)
        else:
            view[k] = v
    return view
_PLAIN = frozenset((str, int, float, bool, bytes, type(None)))  # msgpack-able as they are (ints: range-checked)


class ViewedState:
    """A state read through one dict, its view (committed, prepared and pending entries), loaded
    on first access. Loaded, ``get`` is the view's own ``dict.get``: no Python frame for a
    stateful bolt's read once a tuple. Unloaded, the class's ``get``, which loads first."""

    _view: dict | None

    def _set_view(self, view: dict | None) -> None:
        self._view = view
        if view is None:
            self.__dict__.pop("get", None)
        else:
            self.get = view.get


class RedisKeyValueState(ViewedState, KeyValueState):
    def __init__(self, client: redis.Redis, topology_id: str, component: str, index: int,
                 replication: Replication = NO_WAIT, token: int | None = None,
                 key_serializer: Serializer | None = None, value_serializer: Serializer | None = None,
                 part: str | None = None, txids: dict | None = None) -> None:
        """Task ``index`` (0 .. parallelism-1) of ``component``. ``token``: the run's fencing token (state/fencing.py). The task's slot is claimed for
        it before anything is read, so a stale run's later commits here are refused (Fenced).
        ``key_serializer`` / ``value_serializer``: None is msgpack (with a fast path in ``put``).
        ``part``: another slot than the task's own (a key group's, state/keyed_state.py);
        ``txids``: its txid hash as already read, by a caller that claimed the slot itself."""
        self.redis = client
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        self._custom = key_serializer is not None or value_serializer is not None
        self.replication = replication
        self.token = token
        self.topology_id = topology_id
        self.component, self.index = component, index
        part = part if part is not None else state_part(component, index)
        self.k_state = slot_key(topology_id, part, "state")
        self.k_prepare = slot_key(topology_id, part, "prepare")
        self.k_txid = slot_key(topology_id, part, "txid")
        self._commit = client.register_script(COMMIT_SCRIPT)
        self._rollback = client.register_script(ROLLBACK_SCRIPT)
        self._pending: dict = {}  # key -> value (or _DELETED) written since the last prepare
        self._view: dict | None = None  # key -> value as the bolt sees it (committed + prepared + pending)
        if txids is None:
            fencing.claim(client, self.k_txid, token)
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
            self.loaded(*pipe.execute())
        return self._view  # type: ignore[return-value]

    def loaded(self, committed: dict, prepared: dict) -> None:
        """Build the view from the state and prepare hashes as read (by ``_load``, or by a
        caller that read many slots in one round trip)."""
        if self._view is None:
            lk = loads if self.key_serializer is None else self.key_serializer.deserialize
            lv = loads if self.value_serializer is None else self.value_serializer.deserialize
            view = {lk(k): lv(v) for k, v in committed.items()}
            for k, v in prepared.items():
                if v == TOMBSTONE:
                    view.pop(lk(k), None)
                else:
                    view[lk(k)] = lv(v)
            self._set_view(overlay_pending(view, self._pending))

    def get(self, key: Any, default: Any = None) -> Any:
        view = self._view
        if view is None:
            view = self._load()
        return view.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        if self._custom or type(key) not in _PLAIN or type(value) not in _PLAIN or (
                type(value) is int and not -(2**63) <= value < 2**64):
            self.check_entry(key, value)
        self._pending[key] = value
        view = self._view
        if view is None:
            view = self._load()
        view[key] = value

    def check_entry(self, key: Any, value: Any) -> None:
        """Checked at ``put`` (the error names the key, in the bolt's execute); serialized at
        prepare, once per key per checkpoint however often it was written."""
        if self.key_serializer is not None:
            serialize_with(self.key_serializer, key, "key", key)
        elif type(key) not in _PLAIN:
            dumps(key, "key", key)
        if self.value_serializer is not None:
            serialize_with(self.value_serializer, value, "value", key)
        elif type(value) not in _PLAIN or (type(value) is int and not -(2**63) <= value < 2**64):
            dumps(value, "value", key)

    def delete(self, key: Any) -> None:
        self._pending[key] = _DELETED
        view = self._view
        if view is None:
            view = self._load()
        view.pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._load().items()))

    def _dump_key(self, k: Any) -> bytes:
        return dumps(k, "key", k) if self.key_serializer is None else serialize_with(self.key_serializer, k, "key", k)

    def _dump_value(self, k: Any, v: Any) -> bytes:
        return dumps(v, "value", k) if self.value_serializer is None else serialize_with(self.value_serializer, v, "value", k)

    # --- the protocol ------------------------------------------------------------------------
    # Each step is a command (one script on the task's slot) and what follows once it ran, so a
    # keyed task can send the steps of all its key groups in one pipeline (state/keyed_state.py).
    def prepare_command(self, txid: int) -> tuple:
        if txid <= self.committed_txid:
            raise StateError(f"{self.component}[{self.index}]: prepare_commit({txid}) but txid {self.committed_txid} is committed")
        data = {self._dump_key(k): (TOMBSTONE if v is _DELETED else self._dump_value(k, v))
                for k, v in self._pending.items()}
        commands: list[tuple[Any, ...]] = (
            [("HSET", self.k_prepare, *(x for kv in data.items() for x in kv))] if data else [])
        commands.append(("HSET", self.k_txid, "prepare", txid))
        return fencing.fenced(commands, self.k_txid, self.token)

    def prepared(self, txid: int) -> None:
        self._pending = {}
        self.prepared_txid = txid

    def commit_command(self, txid: int) -> tuple:
        if self.prepared_txid != txid and self.committed_txid != txid:
            raise StateError(f"{self.component}[{self.index}]: commit({txid}) but the prepared txid is {self.prepared_txid}")
        keys, args = with_fence([self.k_state, self.k_prepare, self.k_txid], [txid, TOMBSTONE], self.token)
        return ("EVAL", COMMIT_SCRIPT, len(keys), *keys, *args)

    def committed(self, txid: int) -> None:
        self.committed_txid = txid
        self.prepared_txid = None

    def rollback_command(self) -> tuple:
        keys, args = with_fence([self.k_prepare, self.k_txid], [], self.token)
        return ("EVAL", ROLLBACK_SCRIPT, len(keys), *keys, *args)

    def rolled_back(self) -> None:
        self._pending = {}
        self._set_view(None)  # back to the committed data, reloaded on next access
        self.prepared_txid = None

    def _run(self, command: tuple) -> None:
        if self.replication:
            fencing.guarded(self.k_txid, atomic, self.redis, self.k_txid, [command], self.replication)
        elif command[1] == fencing.FENCED_EXEC:
            fencing.execute(self.redis, self.k_txid, command)
        else:  # one of this state's scripts: EVALSHA, its text sent once
            script = self._commit if command[1] == COMMIT_SCRIPT else self._rollback
            n = command[2]
            fencing.guarded(self.k_txid, script, keys=command[3:3 + n], args=command[3 + n:])

    def prepare_commit(self, txid: int) -> None:
        self._run(self.prepare_command(txid))
        self.prepared(txid)

    def commit(self, txid: int) -> None:
        self._run(self.commit_command(txid))
        self.committed(txid)

    def rollback(self) -> None:
        self._run(self.rollback_command())
        self.rolled_back()

