"""The checkpoint record in Redis: load and save a topology's CheckPointState
(state/checkpoint_state.py has the states and transitions)."""

from __future__ import annotations

import redis

from . import fencing
from .checkpoint_state import (  # noqa: F401 - re-exported: the record's names
    COMMIT,
    COMMITTED,
    COMMITTING,
    INITIAL,
    INITSTATE,
    PREPARE,
    PREPARING,
    ROLLBACK,
    CheckPointState,
)
from .layout import commit_entry, ctl_key
from .replication import NO_WAIT, Replication, atomic


def load_checkpoint(client: redis.Redis, topology_id: str) -> CheckPointState:
    raw = client.hgetall(ctl_key(topology_id, "checkpoint"))
    if not raw:
        return INITIAL
    get = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
           for k, v in raw.items()}
    return CheckPointState(int(get["txid"]), get["state"])


def save_checkpoint(client: redis.Redis, topology_id: str, cp: CheckPointState,
                    replication: Replication = NO_WAIT, token: int | None = None,
                    announce: str | None = None) -> None:
    """Record ``cp``, fenced by the run's ``token`` (a newer run's record is never overwritten:
    Fenced); with ``replication``, only once enough replicas have it (WAIT), else
    NotReplicated (a redis.RedisError) is raised. ``announce`` (an asset name; the caller passes
    it for a commit, not a rollback) adds an entry to the commits stream in the same script."""
    key = ctl_key(topology_id, "checkpoint")
    commands = [("HSET", key, "txid", cp.txid, "state", cp.state)]
    if announce:
        commands.append(commit_entry(topology_id, "checkpoint", cp.txid, announce))
    if replication:
        fencing.guarded(key, atomic, client, key, [fencing.fenced(commands, key, token)], replication)
    else:
        fencing.run(client, key, commands, token)
