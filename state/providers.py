"""Pluggable state providers, as Storm's ``StateProvider``.

``topology.state.provider`` is ``"memory"``, ``"redis"`` (Storm's class names
``org.apache.storm.state.InMemoryKeyValueStateProvider`` and
``org.apache.storm.redis.state.RedisKeyValueStateProvider`` are accepted for them) or
``"package.module:Class"``: a class with ``new_state(namespace, conf, context) -> KeyValueState``,
made with no arguments once per worker. ``topology.state.provider.config`` is the provider's:
for ``memory`` and ``redis`` the Redis keys below (``url`` or Storm's ``host``/``port``/
``database``/``password``/``timeout``, also under ``jedisPoolConfig``; ``keySerializer`` and
``valueSerializer`` class paths); an unknown key is an error naming it. A custom class may check
its own config with a ``check_config(config)`` classmethod (called at submit).

A namespace is ``"TOPOLOGY_ID:COMPONENT/INDEX"`` (``namespace``; INDEX the task's index within
its component, COMPONENT encoded as in keys by ``layout.encode_component``): unique per task
across topologies, unmoved by other components' parallelism, and for Redis the hash tag of the
task's keys (``topology:{ID:COMPONENT/INDEX}:...``).

Everything here loads redis-py only when a Redis state is made, so the submit-time check stays
light. This module never imports the runtime (``context`` is the runtime's TopologyContext,
duck-typed: ``task_id``, ``component_id``, ``component_tasks(component)``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .layout import parse_part, state_part

if TYPE_CHECKING:
    import redis

    from .checkpoint_state import CheckPointState
    from .keyvalue import KeyValueState
    from .replication import Replication
    from .serializer import Serializer

log = logging.getLogger(__name__)

PROVIDER_KEY = "topology.state.provider"
CONFIG_KEY = "topology.state.provider.config"
MEMORY, REDIS = "memory", "redis"
STORM_NAMES = {"org.apache.storm.state.InMemoryKeyValueStateProvider": MEMORY,
               "org.apache.storm.redis.state.RedisKeyValueStateProvider": REDIS}

# Storm's JedisPoolConfig keys (top level or under jedisPoolConfig), then the rest of ours.
CONNECTION_KEYS = ("host", "port", "database", "password", "timeout")
SERIALIZER_KEYS = {"keySerializer": "keySerializerClass", "valueSerializer": "valueSerializerClass"}
REDIS_CONFIG_KEYS = ("url", *CONNECTION_KEYS, "jedisPoolConfig", *SERIALIZER_KEYS, *SERIALIZER_KEYS.values())
IGNORED_STORM_KEYS = ("keyClass", "valueClass")  # Java types for Kryo: accepted, warned about

_CLASS_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class StateProviderError(ValueError):
    """A state provider or its config is wrong; the message names the key (and class path)."""


def namespace(topology_id: str, component: str, index: int) -> str:
    """The state namespace of task ``index`` (0 .. parallelism-1) of ``component``."""
    return f"{topology_id}:{state_part(component, index)}"


def split_namespace(ns: str) -> tuple[str, str, int]:
    """(topology id, component, index) of a namespace (a topology id has no ':')."""
    topology_id, sep, part = ns.partition(":")
    parsed = parse_part(part) if sep and topology_id else None
    if parsed is None:
        raise StateProviderError(f"state namespace {ns!r}: expected 'TOPOLOGY_ID:COMPONENT/INDEX'")
    return topology_id, *parsed


def load_class(spec: Any, key: str) -> type:
    """The class ``"package.module:Class"`` names; StateProviderError naming ``key`` and
    ``spec`` when it is malformed, cannot be imported, is missing or is not a class."""
    if not isinstance(spec, str) or not _CLASS_PATH.fullmatch(spec):
        raise StateProviderError(f"config key {key!r}: expected a class path 'package.module:Class', got {spec!r}")
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = import_module(module_name)
    except ImportError as e:
        raise StateProviderError(f"config key {key!r}: cannot import module {module_name!r} of {spec!r} "
                                 f"({type(e).__name__}: {e}); it must be importable by every worker "
                                 "(PYTHONPATH)") from None
    except Exception as e:  # the user's module raised while importing
        raise StateProviderError(f"config key {key!r}: importing module {module_name!r} of {spec!r} raised "
                                 f"{type(e).__name__}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise StateProviderError(f"config key {key!r}: module {module_name!r} has no {attr!r} (from {spec!r})")
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise StateProviderError(f"config key {key!r}: {spec!r} is a {type(obj).__name__}, not a class")
    return obj


# --- providers ------------------------------------------------------------------------------------


class StateProvider:
    """Storm's StateProvider. Subclassing is optional: any class with ``new_state`` will do."""

    def new_state(self, namespace: str, conf: Mapping[str, Any], context: Any) -> KeyValueState:
        """The state of the task ``namespace`` names (``"TOPOLOGY_ID:COMPONENT/INDEX"``), as last committed
        (with whatever is prepared, until the checkpoint protocol commits or rolls it back)."""
        raise NotImplementedError

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        """Raise ValueError naming the key at fault in ``topology.state.provider.config``."""


class MemoryStateProvider(StateProvider):
    """``memory``: InMemoryKeyValueState, lost with the worker. Its config is the Redis one:
    ``url`` there is also the run's fallback Redis (docs/configuration.md)."""

    def new_state(self, namespace: str, conf: Mapping[str, Any], context: Any) -> KeyValueState:
        from .keyvalue import InMemoryKeyValueState

        return InMemoryKeyValueState()

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        check_redis_config(config)


class RedisStateProvider(StateProvider):
    """``redis``: RedisKeyValueState in the Redis of ``url`` / Storm's keys, else ``redis.url``.
    A stateful component's parallelism is registered on first use (a restart with another
    would not find its state: refused; the launchers check it before anything starts). Subclass it to stay Redis-based (the
    exactly-once mode needs that) while changing what ``new_state`` builds."""

    def __init__(self) -> None:
        self._client: redis.Redis | None = None
        self._replication: Replication | None = None
        self._token: int | None = None
        self._bound = False

    def bind(self, client: redis.Redis, replication: Replication, token: int | None) -> None:
        """Use the worker's connection, replication rule and fencing token (one connection per
        worker); unbound, they come from ``conf`` at the first ``new_state``."""
        self._client, self._replication, self._token, self._bound = client, replication, token, True

    def client(self, conf: Mapping[str, Any]) -> redis.Redis:
        if self._client is None:
            from .connection import connect

            url = redis_url_of(conf) or conf.get("redis.url")
            if not url:
                raise StateProviderError(f"{PROVIDER_KEY} 'redis' needs Redis and no URL is set: set {CONFIG_KEY} "
                                         "{'url': ...} or {'host': ..., 'port': ...}, or the redis.url key")
            self._client = connect(str(url))
        return self._client

    def new_state(self, namespace: str, conf: Mapping[str, Any], context: Any) -> KeyValueState:
        from .redis_kv import RedisKeyValueState

        topology_id, component, index, client, keys, values = self._open(namespace, conf, context)
        assert self._replication is not None  # set by bind() or _open
        return RedisKeyValueState(client, topology_id, component, index, self._replication, self._token, keys, values)

    def new_keyed_state(self, namespace: str, conf: Mapping[str, Any], context: Any, n_fields: int,
                        n_groups: int) -> KeyValueState:
        """The state of a keyed component's task (state/keygroups.py): a state per key group of
        the task's range, plus the task's own for keys outside it."""
        from .keyed_state import KeyGroupedState
        from .keygroups import group_range

        topology_id, component, index, client, keys, values = self._open(namespace, conf, context, n_groups)
        assert self._replication is not None
        groups = group_range(index, len(context.component_tasks(component)), n_groups)
        return KeyGroupedState.open(client, topology_id, component, index, groups, n_groups, n_fields,
                                    self._replication, self._token, keys, values)

    def _open(self, namespace: str, conf: Mapping[str, Any], context: Any, key_groups: int | None = None) -> tuple:
        from .namespaces import register_namespaces
        from .replication import Replication

        topology_id, component, index = split_namespace(namespace)
        client = self.client(conf)
        if not self._bound:
            self._replication = Replication(int(conf.get("topology.state.redis.min.replicas") or 0),
                                            int(conf.get("topology.state.redis.wait.timeout.ms") or 2000))
            token = conf.get("topology.fencing.token")
            self._token = None if token is None else int(token)
        if context is not None:
            register_namespaces(client, topology_id, component, len(context.component_tasks(component)), key_groups)
        keys, values = serializers(conf.get(CONFIG_KEY) or {})
        return topology_id, component, index, client, keys, values

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        check_redis_config(config)


BUILTIN: dict[str, type] = {MEMORY: MemoryStateProvider, REDIS: RedisStateProvider}


def provider_class(name: Any) -> type:
    """The provider class ``topology.state.provider`` names (StateProviderError naming the key)."""
    if isinstance(name, str) and name in BUILTIN:
        return BUILTIN[name]
    if isinstance(name, str) and name in STORM_NAMES:
        return BUILTIN[STORM_NAMES[name]]
    if not isinstance(name, str) or ":" not in name:
        raise StateProviderError(f"config key {PROVIDER_KEY!r}: expected 'memory' or 'redis' (or a class path "
                                 f"'package.module:Class' of a StateProvider), got {name!r}")
    cls = load_class(name, PROVIDER_KEY)
    if not callable(getattr(cls, "new_state", None)):
        raise StateProviderError(f"config key {PROVIDER_KEY!r}: class {name!r} has no new_state(namespace, conf, "
                                 "context) method: not a StateProvider")
    return cls


def is_redis_based(name: Any) -> bool:
    """True for ``redis`` and any provider class derived from RedisStateProvider."""
    try:
        return issubclass(provider_class(name), RedisStateProvider)
    except StateProviderError:
        return False


def check_provider(conf: Mapping[str, Any]) -> str:
    """Check ``topology.state.provider`` and its config at submit; returns the provider's
    name with Storm's class names mapped to ``memory`` / ``redis``."""
    name = conf.get(PROVIDER_KEY, MEMORY)
    cls = provider_class(name)
    config = conf.get(CONFIG_KEY)
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise StateProviderError(f"config key {CONFIG_KEY!r}: expected a dict, got {config!r}")
    check = getattr(cls, "check_config", None)
    if callable(check):
        try:
            check(config)
        except StateProviderError:
            raise
        except (ValueError, TypeError, KeyError) as e:
            raise StateProviderError(f"config key {CONFIG_KEY!r} of provider {name!r}: {e}") from None
    return STORM_NAMES.get(name, name)


def load_provider(conf: Mapping[str, Any]) -> Any:
    """A new instance of the configured provider."""
    return provider_class(conf.get(PROVIDER_KEY, MEMORY))()


# --- the Redis provider's config -------------------------------------------------------------------


def _where(key: str) -> str:
    return f"{CONFIG_KEY}.{key}"


def _connection_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """Storm's connection keys, top level and under ``jedisPoolConfig`` merged."""
    pool = config.get("jedisPoolConfig") or {}
    out = {k: pool[k] for k in CONNECTION_KEYS if k in pool}
    out.update({k: config[k] for k in CONNECTION_KEYS if k in config})
    return out


def check_redis_config(config: Mapping[str, Any]) -> None:
    """The ``memory``/``redis`` provider config: every key known, types right, serializer
    classes importable; StateProviderError naming the key otherwise."""
    if not isinstance(config, Mapping):
        raise StateProviderError(f"config key {CONFIG_KEY!r}: expected a dict, got {config!r}")
    pool = config.get("jedisPoolConfig")
    if pool is not None and not isinstance(pool, Mapping):
        raise StateProviderError(f"config key {_where('jedisPoolConfig')!r}: expected a dict, got {pool!r}")
    pool = pool or {}
    unknown = [k for k in config if k not in REDIS_CONFIG_KEYS and k not in IGNORED_STORM_KEYS]
    unknown += [f"jedisPoolConfig.{k}" for k in pool if k not in CONNECTION_KEYS]
    if unknown:
        raise StateProviderError(
            f"config key {CONFIG_KEY!r}: unknown key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(str(k)) for k in unknown)}; known: {', '.join(REDIS_CONFIG_KEYS)} "
            f"(jedisPoolConfig: {', '.join(CONNECTION_KEYS)})")
    for k in IGNORED_STORM_KEYS:
        if k in config:
            log.warning("config key %r is Storm's (a Java type for Kryo); ignored", _where(k))
    both = [k for k in CONNECTION_KEYS if k in config and k in pool]
    if both:
        raise StateProviderError(f"config key {CONFIG_KEY!r}: {both[0]!r} is given both at the top level and "
                                 "under jedisPoolConfig; give it once")
    conn = _connection_keys(config)
    if "url" in config:
        if conn:
            raise StateProviderError(f"config key {CONFIG_KEY!r}: give either 'url' or Storm's connection keys "
                                     f"({', '.join(CONNECTION_KEYS)}), not both (got 'url' and {sorted(conn)})")
        _check_url(config["url"])
    for k, v in conn.items():
        _check_connection_value(k, v)
    serializers(config)


def _check_url(url: Any) -> None:
    if not isinstance(url, str) or not url:
        raise StateProviderError(f"config key {_where('url')!r}: expected a Redis URL string, got {type(url).__name__}")
    from .connection import RedisURLError, parse  # the message never carries the password

    try:
        parse(url)
    except RedisURLError as e:
        raise StateProviderError(f"config key {_where('url')!r}: {e}") from None


def _check_connection_value(k: str, v: Any) -> None:
    where = _where(k)
    if k == "host":
        if not isinstance(v, str) or not v.strip():
            raise StateProviderError(f"config key {where!r}: expected a host name, got {v!r}")
    elif k == "password":  # never echoed
        if not isinstance(v, str):
            raise StateProviderError(f"config key {where!r}: expected a string, got a {type(v).__name__}")
    else:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (k == "timeout" or int(v) == v)
        lo, hi = {"port": (1, 65535), "database": (0, 1 << 31), "timeout": (1, 1 << 31)}[k]
        if not ok or not lo <= v <= hi:
            what = "milliseconds > 0" if k == "timeout" else f"an integer from {lo}" + (f" to {hi}" if k == "port" else "")
            raise StateProviderError(f"config key {where!r}: expected {what}, got {v!r}")


def redis_url_from_config(config: Mapping[str, Any]) -> str | None:
    """The Redis URL of a ``memory``/``redis`` provider config: its ``url``, else one built from
    Storm's keys (defaults localhost, 6379, database 0; ``timeout`` ms becomes redis-py's
    socket and connect timeouts), else None. The password is in the URL: print it only through
    ``state.connection.redacted``."""
    if config.get("url"):
        return str(config["url"])
    conn = _connection_keys(config)
    if not conn:
        return None
    host = str(conn.get("host", "localhost"))
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    auth = f":{quote(conn['password'], safe='')}@" if conn.get("password") else ""
    url = f"redis://{auth}{host}:{int(conn.get('port', 6379))}/{int(conn.get('database', 0))}"
    if "timeout" in conn:
        secs = conn["timeout"] / 1000
        url += f"?socket_timeout={secs}&socket_connect_timeout={secs}"
    return url


def redis_url_of(conf: Mapping[str, Any]) -> str | None:
    """The Redis URL ``topology.state.provider.config`` gives, for ``memory``/``redis`` and
    Redis-based providers; None for another custom provider (its config is its own)."""
    config = conf.get(CONFIG_KEY) or {}
    name = conf.get(PROVIDER_KEY, MEMORY)
    if not isinstance(config, Mapping) or (name not in BUILTIN and name not in STORM_NAMES and not is_redis_based(name)):
        return None
    return redis_url_from_config(config)


def serializers(config: Mapping[str, Any]) -> tuple[Serializer | None, Serializer | None]:
    """(key serializer, value serializer) instances of ``keySerializer`` / ``valueSerializer``
    (or Storm's ``...Class`` names); None for the default (msgpack)."""
    out: list[Any] = []
    for key, storm_key in SERIALIZER_KEYS.items():
        if key in config and storm_key in config:
            raise StateProviderError(f"config key {CONFIG_KEY!r}: {key!r} and {storm_key!r} are the same setting; "
                                     "give one")
        name = key if key in config else storm_key
        spec = config.get(name)
        if spec is None:
            out.append(None)
            continue
        cls = load_class(spec, _where(name))
        if not (callable(getattr(cls, "serialize", None)) and callable(getattr(cls, "deserialize", None))):
            raise StateProviderError(f"config key {_where(name)!r}: class {spec!r} needs serialize(obj) -> bytes "
                                     "and deserialize(bytes) -> obj")
        try:
            out.append(cls())
        except Exception as e:
            raise StateProviderError(f"config key {_where(name)!r}: {spec!r}() raised {type(e).__name__}: {e}") from None
    return out[0], out[1]


# --- the checkpoint spout's record in a provider's state -------------------------------------------


class CheckpointRecord:
    """The checkpoint spout's CheckPointState kept in a provider's KeyValueState under
    ``__state``, as Storm's CheckpointSpout does; each save is its own prepare and commit
    (numbered by a counter kept with the record, so txids only grow)."""

    KEY = "__state"

    def __init__(self, state: KeyValueState) -> None:
        self.state = state
        self.seq = 0

    def load(self) -> CheckPointState:
        from .checkpoint_state import INITIAL, CheckPointState

        raw = self.state.get(self.KEY)
        if raw is None:
            return INITIAL
        self.seq, txid, st = raw
        return CheckPointState(int(txid), str(st))

    def save(self, cp: CheckPointState) -> None:
        self.seq += 1
        self.state.put(self.KEY, [self.seq, cp.txid, cp.state])
        self.state.prepare_commit(self.seq)
        self.state.commit(self.seq)
