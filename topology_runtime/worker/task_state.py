"""Where a worker's tasks get their state: a stateful bolt's ``KeyValueState`` from the
configured provider (``topology.state.provider``: memory, redis or "package.module:Class", see
state/providers.py), an exactly-once spout's committed position, and the checkpoint spout's
record. Each is keyed by the task's component id and its index within the component (built
once per task), so other components' parallelism never moves it."""

from __future__ import annotations

from typing import Any

from ..api.components import TopologyContext
from ..api.config import fencing_token, state_redis_url, state_replication
from ..reliability.checkpointing import CHECKPOINT_SPOUT
from .checkpoint_spout import CheckpointSpout


class TaskStateProvider:
    def __init__(self, conf: dict[str, Any], topology_id: str, component_tasks: dict[str, list[int]],
                 keyed: dict[str, int] | None = None, key_groups: int = 128) -> None:
        """``keyed``: keyed stateful components -> their grouping's number of fields, whose state a
        Redis-based provider splits by key group (``key_groups`` of them, state/keygroups.py)."""
        self.conf = conf
        self.keyed = keyed or {}
        self.key_groups = key_groups
        self.topology_id = topology_id
        self.component_tasks = component_tasks
        self._redis = None
        self._replication = None
        self._provider = None
        self.token = fencing_token(conf)

    def replication(self):
        """How many replicas a state commit waits for (topology.state.redis.min.replicas)."""
        if self._replication is None:
            from state.replication import Replication

            self._replication = Replication(*state_replication(self.conf))
        return self._replication

    def redis(self):
        if self._redis is None:
            from state.connection import connect

            self._redis = connect(state_redis_url(self.conf))
        return self._redis

    def provider(self):
        """The configured StateProvider, one per worker; a Redis-based one shares the worker's
        connection, replication rule and fencing token."""
        if self._provider is None:
            from state.providers import RedisStateProvider, load_provider

            provider = load_provider(self.conf)
            if isinstance(provider, RedisStateProvider):
                provider.bind(self.redis(), self.replication(), self.token)
            self._provider = provider
        return self._provider

    def _index(self, component: str, task: int) -> int:
        return sorted(self.component_tasks[component]).index(task)

    def _context(self, component: str, task: int) -> TopologyContext:
        return TopologyContext(task, component, self._index(component, task), self.component_tasks, self.topology_id)

    def bolt_state(self, component: str, task: int):
        """A stateful bolt task's state, from the provider, in the namespace of its component
        and index (the Redis provider registers the component's parallelism: a restart with
        another would not find its state)."""
        from state.providers import namespace

        ns = namespace(self.topology_id, component, self._index(component, task))
        provider = self.provider()
        new_keyed = getattr(provider, "new_keyed_state", None)
        if component in self.keyed and new_keyed is not None:
            return new_keyed(ns, self.conf, self._context(component, task), self.keyed[component], self.key_groups)
        return provider.new_state(ns, self.conf, self._context(component, task))

    def spout_position(self, component: str, task: int):
        """Exactly-once: where a spout task's committed snapshot lives, and the snapshot (or None)."""
        from state import RedisKeyValueState

        st = RedisKeyValueState(self.redis(), self.topology_id, component, self._index(component, task),
                                self.replication(), self.token)
        return st, st.get("__snapshot")

    def checkpoint_spout(self) -> CheckpointSpout:
        import redis

        from state.checkpoint import COMMITTED, COMMITTING, INITIAL, load_checkpoint, save_checkpoint
        from state.layout import savepoint_hold_key
        from state.providers import CheckpointRecord, MemoryStateProvider, RedisStateProvider, namespace

        interval = float(self.conf["topology.state.checkpoint.interval.ms"])
        provider = self.provider()
        if isinstance(provider, RedisStateProvider):
            client = self.redis()
            tid, rep, token = self.topology_id, self.replication(), self.token
            asset = self.conf.get("topology.airflow.asset")
            last = [INITIAL]

            def load():
                last[0] = load_checkpoint(client, tid)
                return last[0]

            def save(cp):
                # COMMITTING(t) -> COMMITTED(t) is a commit; PREPARING(t) -> COMMITTED(t-1) a rollback.
                commit = cp.state == COMMITTED and last[0].state == COMMITTING and last[0].txid == cp.txid
                save_checkpoint(client, tid, cp, rep, token, asset if commit else None)
                last[0] = cp

            def held() -> bool:
                try:
                    return bool(client.exists(savepoint_hold_key(tid)))
                except redis.RedisError:
                    return False  # the checkpoint's own save reports Redis being down
            return CheckpointSpout(load, save, interval, held)
        if isinstance(provider, MemoryStateProvider):
            box = [INITIAL]
            return CheckpointSpout(lambda: box[0], lambda cp: box.__setitem__(0, cp), interval)
        # A custom provider keeps the record in a state of its own, as Storm's CheckpointSpout.
        task = self.component_tasks[CHECKPOINT_SPOUT][0]
        record = CheckpointRecord(provider.new_state(namespace(self.topology_id, CHECKPOINT_SPOUT, 0), self.conf,
                                                     self._context(CHECKPOINT_SPOUT, task)))
        return CheckpointSpout(record.load, record.save, interval)
