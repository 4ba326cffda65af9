"""Which stateful components an id's state belongs to, and with what parallelism.

A task's state is keyed by its component id and its index within the component
(``layout.state_key``), so other components' parallelism never matters. The registry
(``topology:{ID:ctl}:namespaces``: component -> JSON ``{"parallelism": N}``) records each
stateful component's parallelism, so a launcher can refuse, before anything starts:

* a stateful component whose parallelism changed, unless it is keyed (state/keygroups.py:
  its state lives by key group, and no task holds state of its own) or holds no state at all;
  the refusal names the component and one key that cannot follow a key group;
* a keyed component whose key groups changed (``topology.state.key.groups``, or its grouping no
  longer keyed) while it holds state;
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

from .keygroups import KEY_GROUPS_KEY
from .keyvalue import StateError
from .layout import ctl_key, group_part, slot_key, state_key
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
    key_groups: Mapping[str, int] = field(default_factory=dict)  # keyed components -> their number of key groups
    redis_layout: bool = True  # False: a provider keeps the state elsewhere (nothing here can tell what it holds)


class StateComponentsChanged(StateSettingsChanged):
    """The run's stateful components do not match the id's state; nothing was started. The
    message names each component, what its state was written with and what the run has.
    ``differences``: (component, parallelism its state was written with, the run's; None: missing)."""


def registry_key(topology_id: str) -> str:
    return ctl_key(topology_id, "namespaces")


def _entry(parallelism: int, dropped: bool = False, key_groups: int | None = None) -> str:
    e: dict[str, Any] = {"parallelism": parallelism}
    if key_groups is not None:
        e["key_groups"] = key_groups
    if dropped:
        e["dropped"] = True
    return json.dumps(e)


def _decode(raw: Any) -> dict[str, Any]:
    v = json.loads(raw)
    if isinstance(v, list):  # the earlier layout's task ids: only their number is meaningful
        return {"parallelism": len(v)}
    return v if isinstance(v, dict) else {"parallelism": int(v)}


def recorded(client: redis.Redis, topology_id: str) -> dict[str, dict[str, Any]]:
    """component -> {"parallelism": N[, "dropped": true]} as the registry holds it."""
    raw = client.hgetall(registry_key(topology_id))
    return {(k.decode() if isinstance(k, bytes) else k): _decode(v) for k, v in raw.items()}


def register_namespaces(client: redis.Redis, topology_id: str, component: str, parallelism: int,
                        key_groups: int | None = None) -> None:
    """A task's own check when its state is made (the launchers check every component before
    anything starts): StateError if ``component``'s state was written with another parallelism."""
    have = client.eval(_REGISTER, 1, registry_key(topology_id), component, _entry(parallelism, key_groups=key_groups))
    written = _decode(have.decode() if isinstance(have, bytes) else have)["parallelism"]
    if written != parallelism:
        raise StateError(_changed_line(component, written, parallelism) + "; " + _how(topology_id))


def _changed_line(component: str, written: int, given: int) -> str:
    return (f"stateful component {component!r}: its state was written with parallelism {written}, "
            f"this run has parallelism {given}")


def _how(topology_id: str) -> str:
    return (f"run it with the parallelism its state was written with, or delete the id's state and start over "
            f"with `topology reset {topology_id}`")


def _s(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _shown(raw: bytes) -> str:
    """A stored key as a person reads it (msgpack, the default serializer; else its bytes)."""
    from .serializer import loads

    try:
        return repr(loads(raw))
    except Exception:  # noqa: BLE001 - a custom key serializer: show the bytes
        return repr(raw)


def own_key(client: redis.Redis, topology_id: str, component: str, parallelism: int) -> str | None:
    """One key ``component``'s tasks hold in their own slots (committed or prepared), shown as a
    person reads it; None when they hold none (a keyed component's state is all in key groups)."""
    pipe = client.pipeline(transaction=False)
    for i in range(parallelism):
        for name in ("state", "prepare"):
            # raw bytes: a key is msgpack (or the user's serializer), whatever the client decodes
            pipe.execute_command("HRANDFIELD", state_key(topology_id, component, i, name), NEVER_DECODE=True)
    for raw in pipe.execute():
        if raw is not None:
            return _shown(raw)
    return None


def has_group_state(client: redis.Redis, topology_id: str, component: str, key_groups: int) -> bool:
    pipe = client.pipeline(transaction=False)
    for g in range(key_groups):
        for name in ("state", "prepare"):
            pipe.exists(slot_key(topology_id, group_part(component, g), name))
    return any(pipe.execute())


def _rescale_refusal(client: redis.Redis, topology_id: str, component: str, entry: dict[str, Any],
                     given: int, key_groups: int | None) -> str | None:
    """Why ``component`` (registered as ``entry``) cannot run with ``given`` tasks and
    ``key_groups`` (None: not keyed); None when it can."""
    written, groups = int(entry["parallelism"]), entry.get("key_groups")
    if groups != key_groups:
        if not (own_key(client, topology_id, component, written) is not None
                or (groups is not None and has_group_state(client, topology_id, component, groups))):
            return None  # no state yet: it starts with the new layout
        if key_groups is None:
            return (f"stateful component {component!r}: its state is split into {groups} key groups (its input "
                    f"fields-grouped), and in this run its input is not fields-grouped on one set of fields: keep "
                    f"the fields grouping")
        if groups is None:
            return (f"stateful component {component!r}: its state was written by task, before it was keyed by "
                    f"its fields grouping; this run would look for it by key group")
        return (f"stateful component {component!r}: its state is split into {groups} key groups, this run has "
                f"{KEY_GROUPS_KEY}={key_groups}: set it back to {groups}")
    if written == given:
        return None
    key = own_key(client, topology_id, component, written)
    if key is None and (key_groups is not None or not has_group_state(client, topology_id, component, 0)):
        return None  # keyed, every entry in a key group (or no state at all): the groups change hands
    why = ("its state is not keyed by its grouping values" if key_groups is None else
           "a task holds state under a key outside its key groups")
    return (f"stateful component {component!r}: its state was written with parallelism {written}, this run has "
            f"parallelism {given}, and {why} (key {key}), so it cannot follow a key to its new task")


def check(client: redis.Redis, topology_id: str, components: StateComponents) -> list[tuple]:
    """StateComponentsChanged if a stateful component cannot run with its new parallelism or key
    groups (``_rescale_refusal``), or one with state is missing from ``components`` (unless it
    allows that); else the commands that record the run's components (for a fenced script in
    the control slot; empty when nothing changes)."""
    have = recorded(client, topology_id)
    now = components.parallelism
    changed = []
    for c, e in have.items():
        if c not in now:
            continue
        if not components.redis_layout and int(e["parallelism"]) != now[c]:
            why: str | None = (_changed_line(c, e["parallelism"], now[c]) + ", and its state provider keeps it outside "
                               "the Redis layout: only the Redis provider's keyed state can change its parallelism")
        else:
            why = _rescale_refusal(client, topology_id, c, e, now[c], components.key_groups.get(c))
        if why is not None:
            changed.append((c, e["parallelism"], now[c], why))
    # A component a run already went on without (with the key set) is not asked about again.
    missing = [(c, e["parallelism"], None) for c, e in have.items() if c not in now and not e.get("dropped")]
    refused = [x[:3] for x in changed] + ([] if components.allow_dropped else missing)
    if refused:
        lines = [x[3] for x in changed] + [
            f"stateful component {c!r} has state (parallelism {old}) but is not in this topology "
            f"(removed or renamed: a renamed component starts empty, it never takes another's state)"
            for c, old, _ in ([] if components.allow_dropped else missing)]
        how = []
        if changed:
            how.append("run the components named as their state was written (docs/state.md, \"Key groups\", says "
                       "which state can change its parallelism)")
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
        entry = _entry(p, key_groups=components.key_groups.get(c))
        if c not in have or _entry(have[c]["parallelism"], key_groups=have[c].get("key_groups")) != entry \
                or have[c].get("dropped"):
            pairs += [c, entry]
    for c, old, _ in missing:  # allowed: kept and marked, so recovery leaves their txids alone
        pairs += [c, _entry(old, dropped=True, key_groups=have[c].get("key_groups"))]
    return [("HSET", key, *pairs)] if pairs else []


def check_and_record(client: redis.Redis, topology_id: str, components: StateComponents, write: bool) -> None:
    """``check``, then record if ``write`` (the run writes state); for a run without the
    control plane (no lease, so no fencing either)."""
    commands = check(client, topology_id, components)
    if write:
        for command in commands:
            client.execute_command(*command)


__all__ = ["ALLOW_DROPPED_KEY", "has_group_state", "own_key", "StateComponents", "StateComponentsChanged", "check", "check_and_record",
           "recorded", "register_namespaces"]
