"""Which stateful components an id's state belongs to, and with what parallelism.

A task's state is keyed by its component id and its index within the component
(``layout.state_key``), so other components' parallelism never matters. The registry
(``topology:{ID:ctl}:namespaces``: component -> JSON ``{"parallelism": N}``) records each
stateful component's parallelism, so a launcher can refuse, before anything starts:

* a stateful component whose parallelism changed (its keys would not be where its tasks look:
  key-group redistribution does not exist yet);
* a stateful component that has state but is missing from the new code (renamed, removed),
  unless ``topology.state.allow.dropped``: then the run goes on, the component is marked
  ``"dropped": true`` (later runs are not asked again) and its keys stay untouched (the same
  id with the same parallelism later finds them again; ``topology reset`` removes them).

A new stateful component (a renamed one included) starts empty. The refusal is a
``StateSettingsChanged`` so every launcher reports it as the settings check does (exit 8).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .keyvalue import StateError
from .layout import ctl_key
from .refusal import StateSettingsChanged

if TYPE_CHECKING:
    import redis

ALLOW_DROPPED_KEY = "topology.state.allow.dropped"

# Set the component's entry if it has none; return what it holds. One round trip per task.
_REGISTER = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return ARGV[2] end
return cur
"""


@dataclass(frozen=True)
class StateComponents:
    """A run's stateful components (component id -> parallelism) and whether it may go on
    without components the id's state has (``topology.state.allow.dropped``)."""

    parallelism: Mapping[str, int] = field(default_factory=dict)
    allow_dropped: bool = False


class StateComponentsChanged(StateSettingsChanged):
    """The run's stateful components do not match the id's state; nothing was started. The
    message names each component, what its state was written with and what the run has.
    ``differences``: (component, parallelism its state was written with, the run's; None: missing)."""


def registry_key(topology_id: str) -> str:
    return ctl_key(topology_id, "namespaces")


def _entry(parallelism: int, dropped: bool = False) -> str:
    return json.dumps({"parallelism": parallelism, "dropped": True} if dropped else {"parallelism": parallelism})


def _decode(raw: Any) -> dict[str, Any]:
    v = json.loads(raw)
    if isinstance(v, list):  # the earlier layout's task ids: only their number is meaningful
        return {"parallelism": len(v)}
    return v if isinstance(v, dict) else {"parallelism": int(v)}


def recorded(client: redis.Redis, topology_id: str) -> dict[str, dict[str, Any]]:
    """component -> {"parallelism": N[, "dropped": true]} as the registry holds it."""
    raw = client.hgetall(registry_key(topology_id))
    return {(k.decode() if isinstance(k, bytes) else k): _decode(v) for k, v in raw.items()}


def register_namespaces(client: redis.Redis, topology_id: str, component: str, parallelism: int) -> None:
    """A task's own check when its state is made (the launchers check every component before
    anything starts): StateError if ``component``'s state was written with another parallelism."""
    have = client.eval(_REGISTER, 1, registry_key(topology_id), component, _entry(parallelism))
    written = _decode(have.decode() if isinstance(have, bytes) else have)["parallelism"]
    if written != parallelism:
        raise StateError(_changed_line(component, written, parallelism) + "; " + _how(topology_id))


def _changed_line(component: str, written: int, given: int) -> str:
    return (f"stateful component {component!r}: its state was written with parallelism {written}, "
            f"this run has parallelism {given}")


def _how(topology_id: str) -> str:
    return (f"run it with the parallelism its state was written with, or delete the id's state and start over "
            f"with `topology reset {topology_id}`")


def check(client: redis.Redis, topology_id: str, components: StateComponents) -> list[tuple]:
    """StateComponentsChanged if a stateful component's parallelism changed, or one with state
    is missing from ``components`` (unless it allows that); else the commands that record the
    run's components (for a fenced script in the control slot; empty when nothing changes)."""
    have = recorded(client, topology_id)
    now = components.parallelism
    changed = [(c, e["parallelism"], now[c]) for c, e in have.items() if c in now and e["parallelism"] != now[c]]
    # A component a run already went on without (with the key set) is not asked about again.
    missing = [(c, e["parallelism"], None) for c, e in have.items() if c not in now and not e.get("dropped")]
    refused = changed + ([] if components.allow_dropped else missing)
    if refused:
        lines = [_changed_line(c, old, new) if new is not None else
                 f"stateful component {c!r} has state (parallelism {old}) but is not in this topology "
                 f"(removed or renamed: a renamed component starts empty, it never takes another's state)"
                 for c, old, new in refused]
        how = []
        if changed:
            how.append("run the components named with the parallelism their state was written with "
                       "(changing a stateful component's parallelism is not supported yet)")
        if missing and not components.allow_dropped:
            how.append(f"to go on without the missing components, keeping their state in Redis, set "
                       f"--conf {ALLOW_DROPPED_KEY}=true")
        how.append(f"or delete the id's state and start over with `topology reset {topology_id}`")
        message = (f"topology {topology_id!r}: this run's stateful components do not match its state; nothing was "
                   f"started:\n  " + "\n  ".join(lines) + "\n" + "; ".join(how))
        raise StateComponentsChanged(topology_id, refused, message)
    key = registry_key(topology_id)
    pairs: list[Any] = []
    for c, p in now.items():
        if have.get(c) != {"parallelism": p}:
            pairs += [c, _entry(p)]
    for c, old, _ in missing:  # allowed: kept and marked, so recovery leaves their txids alone
        pairs += [c, _entry(old, dropped=True)]
    return [("HSET", key, *pairs)] if pairs else []


def check_and_record(client: redis.Redis, topology_id: str, components: StateComponents, write: bool) -> None:
    """``check``, then record if ``write`` (the run writes state); for a run without the
    control plane (no lease, so no fencing either)."""
    commands = check(client, topology_id, components)
    if write:
        for command in commands:
            client.execute_command(*command)


__all__ = ["ALLOW_DROPPED_KEY", "StateComponents", "StateComponentsChanged", "check", "check_and_record",
           "recorded", "register_namespaces"]
