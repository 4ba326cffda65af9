"""The checkpoint record in Redis: load and save a topology's CheckPointState
(state/checkpoint_state.py has the states and transitions)."""

from __future__ import annotations

import redis

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
from .layout import ctl_key


def load_checkpoint(client: redis.Redis, topology_id: str) -> CheckPointState:
    raw = client.hgetall(ctl_key(topology_id, "checkpoint"))
    if not raw:
        return INITIAL
    get = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
           for k, v in raw.items()}
    return CheckPointState(int(get["txid"]), get["state"])


def save_checkpoint(client: redis.Redis, topology_id: str, cp: CheckPointState) -> None:
    client.hset(ctl_key(topology_id, "checkpoint"), mapping={"txid": cp.txid, "state": cp.state})
