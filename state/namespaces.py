"""Which tasks own state namespaces: a restart with a different parallelism for a stateful
component would not find its state, so it is refused."""

from __future__ import annotations

import json

import redis

from .keyvalue import StateError
from .layout import ctl_key

_REGISTER = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return ARGV[2] end
return cur
"""


def register_namespaces(client: redis.Redis, topology_id: str, component: str, tasks: list[int]) -> None:
    want = json.dumps(sorted(tasks))
    have = client.eval(_REGISTER, 1, ctl_key(topology_id, "namespaces"), component, want)
    have = have.decode() if isinstance(have, bytes) else have
    if have != want:
        raise StateError(
            f"stateful component {component!r} of topology {topology_id!r} has state for tasks {have} "
            f"(parallelism {len(json.loads(have))}) but this run has tasks {want} (parallelism {len(tasks)}); "
            f"run it with the same parallelism, or delete its state with `topology reset {topology_id}`"
        )
