"""A keyed task's state in Redis: one state per key group it owns, plus its own.

A task of a keyed component (state/keygroups.py) owns a contiguous range of key groups. Each
group has its own state, prepare and txid keys in the slot ``{ID:COMPONENT#GROUP}``; a key
lives in its group's state when this task owns that group, else in the task's own slot
``{ID:COMPONENT/INDEX}`` (what cannot follow a key: the launchers refuse to change the
parallelism of a component holding any). The checkpoint protocol runs on the task's own slot
and on every group written to since the last checkpoint: each prepare, commit and rollback is
one script per slot (EVALSHA), all of a task's sent in one pipeline, so a checkpoint costs one
round trip per step however many groups the task owns. Reads and writes go to one dict, as a
single state's do; a key's slot is worked out at prepare, once per key written. Each script is
atomic on its slot and idempotent under the protocol (commit re-runs are no-ops, rollback drops
what is prepared), so a crash between two slots' scripts is settled by recovery as for any
task: every part that prepared txid t commits or rolls back with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import redis

from . import fencing
from .keygroups import key_hash
from .keyvalue import KeyValueState
from .layout import group_part
from .redis_kv import _DELETED, _PLAIN, RedisKeyValueState, ViewedState, overlay_pending
from .replication import NO_WAIT, Replication

if TYPE_CHECKING:
    from .serializer import Serializer

MEMO_KEYS = 65536  # str key -> part, as fields grouping remembers its str keys
# Keys the runtime itself writes into a task's state (``__window``, ``__snapshot``): never a
# grouping value, always the task's own, so a rescale refuses what they hold.
RESERVED_PREFIX = "__"


class KeyGroupedState(ViewedState, KeyValueState):
    """The state of task ``index`` of a keyed component: ``own`` plus one state per owned group."""

    def __init__(self, own: RedisKeyValueState, groups: Mapping[int, RedisKeyValueState], n_groups: int,
                 n_fields: int) -> None:
        self.own = own
        self.groups = dict(groups)
        self.n_groups, self.n_fields = n_groups, n_fields
        self.parts: list[RedisKeyValueState] = [own, *self.groups.values()]
        self.redis = own.redis
        self._memo: dict[str, RedisKeyValueState] = {}
        self._view: dict | None = None  # key -> value as the bolt sees it (every slot's, and what is pending)
        self._pending: dict = {}  # key -> value (or _DELETED) written since the last prepare
        self._custom = own.key_serializer is not None or own.value_serializer is not None

    @classmethod
    def open(cls, client: redis.Redis, topology_id: str, component: str, index: int, groups: range, n_groups: int,
             n_fields: int, replication: Replication = NO_WAIT, token: int | None = None,
             key_serializer: Serializer | None = None,
             value_serializer: Serializer | None = None) -> KeyGroupedState:
        """Claim every slot of the task (its own and its groups') for ``token`` and read their
        txids: one pipeline, then the parts are made without further I/O."""
        own_part = None
        parts = [own_part, *(group_part(component, g) for g in groups)]

        def make(part: str | None, txids: dict | None) -> RedisKeyValueState:
            return RedisKeyValueState(client, topology_id, component, index, replication, token, key_serializer,
                                      value_serializer, part=part, txids=txids)

        probes = [make(p, {}) for p in parts]  # key names only: nothing read yet
        pipe = client.pipeline(transaction=False)
        for st in probes:
            if token is not None:
                pipe.execute_command(*fencing.fenced([], st.k_txid, token))
            pipe.hgetall(st.k_txid)
        replies = pipe.execute(raise_on_error=False)
        step = 2 if token is not None else 1
        made = []
        for i, (p, st) in enumerate(zip(parts, probes)):
            for r in replies[i * step:(i + 1) * step]:
                if isinstance(r, redis.ResponseError):
                    fencing.raise_if_fenced(r, st.k_txid)
                    raise r
            made.append(make(p, replies[i * step + step - 1]))
        return cls(made[0], dict(zip(groups, made[1:])), n_groups, n_fields)

    # --- where a key lives --------------------------------------------------------------------
    def part_of(self, key: Any) -> RedisKeyValueState:
        if type(key) is str:
            st = self._memo.get(key)
            if st is not None:
                return st
            if key.startswith(RESERVED_PREFIX):  # the runtime's own entries (a window's buffer)
                return self.own
        h = key_hash(key, self.n_fields)
        st = self.own if h is None else self.groups.get(h % self.n_groups, self.own)
        if type(key) is str:
            if len(self._memo) >= MEMO_KEYS:
                self._memo.clear()
            self._memo[key] = st
        return st

    # --- the view: one dict for the task, as a single state has ----------------------------------
    # Reads and writes touch only ``_view`` and ``_pending``; which slot a key belongs to is worked
    # out at prepare, once per key written since the last one (the per-tuple path stays a dict).
    def _load(self) -> dict:
        """Every slot's committed data overlaid with what it prepared, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for st in self.parts:
            pipe.hgetall(st.k_state)
            pipe.hgetall(st.k_prepare)
        replies = pipe.execute()
        view: dict = {}
        for i, st in enumerate(self.parts):
            st.loaded(replies[2 * i], replies[2 * i + 1])
            view.update(st._view or {})  # noqa: SLF001 - the same layer's state
            st._set_view(None)  # noqa: SLF001 - the task's view is the one kept
        self._set_view(overlay_pending(view, self._pending))
        return view

    def get(self, key: Any, default: Any = None) -> Any:
        view = self._view
        if view is None:
            view = self._load()
        return view.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        if self._custom or type(key) not in _PLAIN or type(value) not in _PLAIN or (
                type(value) is int and not -(2**63) <= value < 2**64):
            self.own.check_entry(key, value)
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
        view = self._view if self._view is not None else self._load()
        return iter(list(view.items()))

    # --- the protocol, in one pipeline ---------------------------------------------------------
    def _pipelined(self, parts: list[RedisKeyValueState], commands: list[tuple]) -> None:
        if self.own.replication:  # each step waits for its replicas: one slot at a time
            for st, cmd in zip(parts, commands):
                st._run(cmd)  # noqa: SLF001 - the same layer's state
            return
        run_scripts(self.redis, [st.k_txid for st in parts], commands)

    def prepare_commit(self, txid: int) -> None:
        """Prepare the task's own slot (it always takes part, as a task does) and each group
        written to since the last prepare. A group without writes has nothing to commit: it
        keeps its txids, and recovery asks nothing of it (state/recovery.py)."""
        for k, v in self._pending.items():
            st = self.part_of(k)
            st._pending[k] = v  # noqa: SLF001 - handed to its slot, serialized by its prepare
        self._pending = {}
        parts = [self.own, *(st for st in self.groups.values() if st._pending)]  # noqa: SLF001
        self._pipelined(parts, [st.prepare_command(txid) for st in parts])
        for st in parts:
            st.prepared(txid)

    def commit(self, txid: int) -> None:
        # A slot that neither prepared nor committed ``txid`` took no part in it (a group left
        # unwritten; a task index new since a rescale): nothing to do there.
        parts = [st for st in self.parts if txid in (st.prepared_txid, st.committed_txid)]
        self._pipelined(parts, [st.commit_command(txid) for st in parts])
        for st in parts:
            st.committed(txid)

    def rollback(self) -> None:
        parts = [self.own, *(st for st in self.groups.values() if st.prepared_txid is not None)]
        self._pipelined(parts, [st.rollback_command() for st in parts])
        for st in self.parts:
            st.rolled_back()
        self._pending = {}
        self._set_view(None)

    @property
    def prepared_txid(self) -> int | None:
        """The txid prepared in any of the task's slots (they prepare together)."""
        return max((st.prepared_txid for st in self.parts if st.prepared_txid is not None), default=None)

    @property
    def committed_txid(self) -> int:
        return self.own.committed_txid


def run_scripts(client: redis.Redis, slots: list[str], commands: list[tuple]) -> None:
    """``commands`` (``("EVAL", script, numkeys, ...)``, one per slot) in one pipeline, each as
    EVALSHA (the script's text sent once per connection's server, on NOSCRIPT); Fenced naming the
    slot a newer run owns."""
    if not commands:
        return
    shas = [_sha1(cmd[1]) for cmd in commands]
    pipe = client.pipeline(transaction=False)
    for sha, cmd in zip(shas, commands):
        pipe.execute_command("EVALSHA", sha, *cmd[2:])
    replies = pipe.execute(raise_on_error=False)
    again = [i for i, r in enumerate(replies) if isinstance(r, redis.exceptions.NoScriptError)]
    if again:  # a server that has not seen a script yet (or flushed them): its text, once
        pipe = client.pipeline(transaction=False)
        for i in again:
            pipe.execute_command(*commands[i])
        for i, r in zip(again, pipe.execute(raise_on_error=False)):
            replies[i] = r
    for key, r in zip(slots, replies):
        if isinstance(r, redis.ResponseError):
            fencing.raise_if_fenced(r, key)
            raise r


def _sha1(text: str) -> str:
    sha = _SHAS.get(text)
    if sha is None:
        sha = _SHAS[text] = hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1
    return sha


_SHAS: dict[str, str] = {}


def component_state(client: redis.Redis, topology_id: str, component: str) -> Iterator[tuple[Any, Any]]:
    """Every committed entry of ``component`` (its tasks' own slots and its key groups, as the
    id's registry records them): for tools and tests that read a component's state whole."""
    from .namespaces import recorded

    entry = recorded(client, topology_id).get(component)
    if entry is None:
        return
    parts = [None] * int(entry["parallelism"]) + [group_part(component, g) for g in range(int(entry.get("key_groups") or 0))]
    for i, part in enumerate(parts):
        yield from RedisKeyValueState(client, topology_id, component, i if part is None else 0, part=part, txids={})


__all__ = ["KeyGroupedState", "component_state"]
