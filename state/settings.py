"""The state settings an id's committed state was written with, and the check of a new run's.

A run that writes state durably (a stateful topology on a provider other than ``memory``, or
the exactly-once mode) records in its id's control slot which provider, mode, Redis and
serializers it wrote with. A later run of the id that would read or write its state elsewhere
or otherwise (the provider left at ``memory`` while Redis holds the committed state; the mode
off, so spouts start over) is refused before it starts, naming each setting, the value the state
was written with and the value given. ``topology reset ID`` deletes the record with the state.

The record (``layout.settings_key``) is a hash: setting -> JSON value. This module never imports
the runtime: it reads the keys of a resolved config.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .layout import settings_key
from .providers import CONFIG_KEY, MEMORY, PROVIDER_KEY, SERIALIZER_KEYS, STORM_NAMES, is_redis_based, redis_url_of
from .refusal import StateSettingsChanged

if TYPE_CHECKING:
    import redis

EXACTLY_ONCE_KEY = "topology.state.exactly.once"
REDIS_SETTING = f"{CONFIG_KEY} (its Redis)"
THE_RUNS_REDIS = "the run's Redis (redis.url)"
# Settings in the order a refusal names them: the provider first (the common mistake).
ORDER = (PROVIDER_KEY, EXACTLY_ONCE_KEY, REDIS_SETTING,
         *(f"{CONFIG_KEY}.{k}" for k in SERIALIZER_KEYS))


def state_settings(conf: Mapping[str, Any]) -> dict[str, Any]:
    """What decides where and how state is written, from a resolved config: the provider, the
    exactly-once mode and, for a Redis-based provider, its Redis (None: the run's own, the
    ``redis.url`` key) and its key and value serializers (None: msgpack)."""
    name = conf.get(PROVIDER_KEY) or MEMORY
    name = STORM_NAMES.get(name, name)
    out: dict[str, Any] = {PROVIDER_KEY: name, EXACTLY_ONCE_KEY: bool(conf.get(EXACTLY_ONCE_KEY))}
    if name == MEMORY or is_redis_based(name):
        from .connection import redacted

        url = redis_url_of(conf)
        run_url = conf.get("redis.url")
        # The password is no part of where state lives (and never goes into a record).
        same = url is None or (run_url is not None and redacted(str(url)) == redacted(str(run_url)))
        out[REDIS_SETTING] = None if same else redacted(str(url))
        config = conf.get(CONFIG_KEY) or {}
        for key, storm_key in SERIALIZER_KEYS.items():
            out[f"{CONFIG_KEY}.{key}"] = config.get(key, config.get(storm_key))
    return out


def writes_state(conf: Mapping[str, Any], stateful: bool) -> bool:
    """Whether a run with ``conf`` leaves state that outlives it: its stateful components on a
    provider other than ``memory``, or exactly-once (spout positions and the checkpoint)."""
    return bool(conf.get(EXACTLY_ONCE_KEY)) or (stateful and (conf.get(PROVIDER_KEY) or MEMORY) != MEMORY)


def recorded(client: redis.Redis, topology_id: str) -> dict[str, Any] | None:
    """The settings the id's state was written with, None if no run wrote state for it."""
    raw = client.hgetall(settings_key(topology_id))
    if not raw:
        return None
    return {(k.decode() if isinstance(k, bytes) else k): json.loads(v) for k, v in raw.items()}


def record_commands(topology_id: str, settings: Mapping[str, Any]) -> list[tuple]:
    """The commands recording ``settings`` (for a fenced script in the control slot)."""
    key = settings_key(topology_id)
    return [("DEL", key), ("HSET", key, *(x for k, v in settings.items() for x in (k, json.dumps(v))))]


_MISSING = object()  # a setting one side does not have (a custom provider has no Redis of ours)


def _shown(setting: str, value: Any) -> str:
    if setting == REDIS_SETTING and value is None:
        return THE_RUNS_REDIS
    if value is None and setting in ORDER[3:]:
        return "msgpack (the default)"
    return "(not used)" if value is _MISSING else json.dumps(value)


def _flag(setting: str, value: Any) -> str | None:
    """The ``--conf`` that gives ``value`` back, where one does."""
    if setting in (PROVIDER_KEY, EXACTLY_ONCE_KEY):
        return f"--conf {setting}={json.dumps(value) if isinstance(value, bool) else value}"
    if setting == REDIS_SETTING and value is not None:
        return "--conf " + shlex.quote(f"{CONFIG_KEY}=" + json.dumps({"url": value}))
    return None


def check(client: redis.Redis, topology_id: str, settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """Raise StateSettingsChanged if the id's state was written with other settings than
    ``settings``; returns the record (None: no run wrote state for the id yet)."""
    have = recorded(client, topology_id)
    if have is None:
        return None
    keys = [k for k in ORDER if k in have or k in settings] + sorted(set(have) | set(settings) - set(ORDER))
    diffs = [(k, have.get(k, _MISSING), settings.get(k, _MISSING)) for k in keys
             if have.get(k, _MISSING) != settings.get(k, _MISSING)]
    if not diffs:
        return have
    lines = [f"{k}: the state was written with {_shown(k, old)}, this run gives {_shown(k, new)}"
             for k, old, new in diffs]
    flags = [f for k, old, _ in diffs if (f := _flag(k, old))]
    same = (" (" + " ".join(flags) + ", or the same keys in the topology's create_topology(conf=...))") if flags else ""
    message = (f"topology {topology_id!r} has committed state written with other state settings than this run's; "
               f"nothing was started:\n  " + "\n  ".join(lines) +
               f"\nresubmit with the settings the state was written with{same}, or delete its state and start "
               f"over with `topology reset {topology_id}`")
    raise StateSettingsChanged(topology_id, [(k, None if o is _MISSING else o, None if n is _MISSING else n)
                                             for k, o, n in diffs], message)


def check_and_record(client: redis.Redis, topology_id: str, settings: Mapping[str, Any], write: bool) -> None:
    """``check``, then record ``settings`` if none are and ``write`` (the run writes state);
    for a run without the control plane (no lease, so no fencing either)."""
    if check(client, topology_id, settings) is None and write:
        pipe = client.pipeline(transaction=True)
        for command in record_commands(topology_id, settings):
            pipe.execute_command(*command)
        pipe.execute()


__all__ = ["StateSettingsChanged", "check", "check_and_record", "record_commands", "recorded", "state_settings",
           "writes_state"]
