"""A keyed task's state in Redis: one state per key group it owns, plus its own.

A task of a keyed component (state/keygroups.py) owns a contiguous range of key groups. Each
group has its own state, prepare and txid keys in the slot ``{ID:COMPONENT#GROUP}``; a key
lives in its group's state when this task owns that group, else in the task's own slot
``{ID:COMPONENT/INDEX}`` (what cannot follow a key: the launchers refuse to change the
parallelism of a component holding any). The checkpoint protocol runs on every part: each
prepare, commit and rollback is one script per slot, all of a task's sent in one pipeline, so a
checkpoint costs one round trip per step however many groups the task owns. Each script is
atomic on its slot and idempotent under the protocol (commit re-runs are no-ops, rollback drops
what is prepared), so a crash between two slots' scripts is settled by recovery as for any
task: every part that prepared txid t commits or rolls back with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import redis

from . import fencing
from .keygroups import key_hash
from .keyvalue import KeyValueState
from .layout import group_part
from .redis_kv import RedisKeyValueState
from .replication import NO_WAIT, Replication

if TYPE_CHECKING:
    from .serializer import Serializer

MEMO_KEYS = 65536  # str key -> part, as fields grouping remembers its str keys


class KeyGroupedState(KeyValueState):
    """The state of task ``index`` of a keyed component: ``own`` plus one state per owned group."""

    def __init__(self, own: RedisKeyValueState, groups: Mapping[int, RedisKeyValueState], n_groups: int,
                 n_fields: int) -> None:
        self.own = own
        self.groups = dict(groups)
        self.n_groups, self.n_fields = n_groups, n_fields
        self.parts: list[RedisKeyValueState] = [own, *self.groups.values()]
        self.redis = own.redis
        self._memo: dict[str, RedisKeyValueState] = {}
        self._loaded = False

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
        h = key_hash(key, self.n_fields)
        st = self.own if h is None else self.groups.get(h % self.n_groups, self.own)
        if type(key) is str:
            if len(self._memo) >= MEMO_KEYS:
                self._memo.clear()
            self._memo[key] = st
        return st

    def _load(self) -> None:
        """Every part's view in one round trip (a part rolled back reloads on its own)."""
        pipe = self.redis.pipeline(transaction=False)
        for st in self.parts:
            pipe.hgetall(st.k_state)
            pipe.hgetall(st.k_prepare)
        replies = pipe.execute()
        for i, st in enumerate(self.parts):
            st.loaded(replies[2 * i], replies[2 * i + 1])
        self._loaded = True

    def get(self, key: Any, default: Any = None) -> Any:
        if not self._loaded:
            self._load()
        return self.part_of(key).get(key, default)

    def put(self, key: Any, value: Any) -> None:
        if not self._loaded:
            self._load()
        self.part_of(key).put(key, value)

    def delete(self, key: Any) -> None:
        if not self._loaded:
            self._load()
        self.part_of(key).delete(key)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        if not self._loaded:
            self._load()
        return iter([kv for st in self.parts for kv in st])

    # --- the protocol, every part in one pipeline ---------------------------------------------
    def _pipelined(self, parts: list[RedisKeyValueState], commands: list[tuple]) -> None:
        if self.own.replication:  # each step waits for its replicas: one part at a time
            for st, cmd in zip(parts, commands):
                st._run(cmd)  # noqa: SLF001 - the same layer's state
            return
        pipe = self.redis.pipeline(transaction=False)
        for cmd in commands:
            pipe.execute_command(*cmd)
        for st, r in zip(parts, pipe.execute(raise_on_error=False)):
            if isinstance(r, redis.ResponseError):
                fencing.raise_if_fenced(r, st.k_txid)
                raise r

    def prepare_commit(self, txid: int) -> None:
        self._pipelined(self.parts, [st.prepare_command(txid) for st in self.parts])
        for st in self.parts:
            st.prepared(txid)

    def commit(self, txid: int) -> None:
        # A part that neither prepared nor committed ``txid`` took no part in it: a task index
        # new since a rescale, committing a checkpoint its groups' earlier owners prepared.
        parts = [st for st in self.parts if txid in (st.prepared_txid, st.committed_txid)]
        self._pipelined(parts, [st.commit_command(txid) for st in parts])
        for st in parts:
            st.committed(txid)

    def rollback(self) -> None:
        self._pipelined(self.parts, [st.rollback_command() for st in self.parts])
        for st in self.parts:
            st.rolled_back()
        self._loaded = False

    @property
    def prepared_txid(self) -> int | None:
        """The txid prepared in any of the task's slots (they prepare together)."""
        return max((st.prepared_txid for st in self.parts if st.prepared_txid is not None), default=None)

    @property
    def committed_txid(self) -> int:
        return self.own.committed_txid




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
