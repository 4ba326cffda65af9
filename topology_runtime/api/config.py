"""Topology configuration: Storm's key names, our defaults, and the check of unknown keys."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

# Keys this project implements, with their defaults. Deliberate deviation from Storm:
# message timeouts are on in every launcher, LocalCluster included.
DEFAULTS: dict[str, Any] = {
    "topology.workers": 1,
    "topology.acker.executors": None,  # None -> one per worker
    "topology.message.timeout.secs": 30,
    # Not set: DEFAULT_MAX_SPOUT_PENDING trees per spout task (a transactional topology: 1 batch).
    "topology.max.spout.pending": None,
    # This project's: about this many bytes of tuple values pending per spout task (None: no byte
    # bound), so large tuples cannot fill a worker's memory (spout_pending.PendingBudget).
    "topology.max.spout.pending.bytes": 64 << 20,
    "topology.enable.message.timeouts": True,
    "topology.tick.tuple.freq.secs": None,
    "topology.state.checkpoint.interval.ms": 1000,
    "topology.state.provider": "memory",
    "topology.state.provider.config": {},
    "topology.debug": False,
    "topology.name": None,
    "topology.transactional.id": None,
    # Transfer: tuples per cross-worker batch, and the outbound backlog (in batches per peer)
    # above which a worker stops calling next_tuple.
    "topology.transfer.batch.size": 1000,
    "topology.transfer.buffer.size": 64,
    "topology.executor.receive.buffer.size": 1024,
    # The largest message between workers. A batch over it is sent in halves until each part
    # fits, so it only bounds a single tuple (one over it is refused, times out and replays). As
    # large as the credit window: what one peer makes a worker hold stays within the window.
    "topology.transfer.max.message.bytes": 64 << 20,
    # Credit window: bytes of batches a worker may have sent to one peer that the peer has not
    # worked through yet; what a peer can make a worker buffer for it, the receiver holding each
    # sender to max(window, max message) (0: no window).
    "topology.transfer.peer.window.bytes": 64 << 20,
    # CurveZMQ encryption and authentication of every worker and control socket (keys derived
    # from the run's secret); false: plaintext with a keyed MAC per message. docs/security.md.
    "topology.transport.encryption": True,
    # Storm 2's: the longest a spout's tuples wait in the worker before they go out. A worker
    # stops calling next_tuple and flushes once this much time went by in one round of calls, so
    # a spout that waits inside next_tuple (a paced source) is not held back for 64 calls.
    "topology.batch.flush.interval.millis": 1,
    "topology.sleep.spout.wait.strategy.time.ms": 1,
    "topology.max.error.report.per.interval": 5,
    # This project's own keys.
    "topology.max.restarts": 10,
    # What a Spark driver does on SIGTERM (Airflow's mark-failed/clear): "kill" the topology, or
    # "drain" it (spouts stop, pending trees finish); either way the final state is recorded.
    "topology.sigterm.action": "kill",
    # An Airflow asset name: each committed checkpoint and transactional commit adds an entry to
    # topology:{ID:ctl}:commits, which topology_airflow.topology_asset's watcher turns into asset
    # events (DAGs scheduled on committed data). None: no announcements.
    "topology.airflow.asset": None,
    # Spark: the delay before a failed barrier stage is launched again grows from initial to max
    # (times multiplier per consecutive failure); a stage that ran healthy for reset.secs starts
    # the count (topology.max.restarts consecutive failures) and the delay over.
    "topology.restart.backoff.initial.secs": 1.0,
    "topology.restart.backoff.max.secs": 30.0,
    "topology.restart.backoff.multiplier": 2.0,
    "topology.restart.backoff.reset.secs": 60.0,
    "topology.state.exactly.once": False,
    # A run may go on without stateful components the id's state has (removed or renamed in new
    # code): their state is kept, untouched; false: such a run is refused before it starts.
    "topology.state.allow.dropped": False,
    # A keyed stateful component's number of key groups (state/keygroups.py): the most tasks it
    # can have; fixed for the id's life once its state is written. Fields grouping routes by it.
    "topology.state.key.groups": 128,
    # A state commit in Redis (checkpoint record, task state, transactional txid and batch
    # metadata) counts only once this many replicas acknowledged it (WAIT, at most
    # wait.timeout.ms); None or 0: no wait. docs/redis.md.
    "topology.state.redis.min.replicas": None,
    "topology.state.redis.wait.timeout.ms": 2000,
    "topology.stats.interval.secs": 1.0,
    "topology.transactional.progress.secs": 10.0,  # the coordinator's progress line; None: off
    # A batch (txid) whose attempts failed this many times ends the run failed; None or 0: never.
    "topology.transactional.max.attempts": 10,
}

# Storm's documented topology.* keys that we accept but do not implement (warned about).
STORM_KEYS_NOT_IMPLEMENTED = frozenset(
    """
    topology.tasks topology.eventlogger.executors topology.max.task.parallelism
    topology.spout.wait.strategy topology.bolt.wait.strategy topology.backpressure.enable
    topology.backpressure.check.millis topology.backpressure.wait.strategy
    topology.executor.send.buffer.size topology.producer.batch.size
    topology.fall.back.on.java.serialization topology.kryo.register topology.kryo.decorators
    topology.kryo.factory topology.skip.missing.kryo.registrations topology.tuple.serializer
    topology.stats.sample.rate topology.builtin.metrics.bucket.size.secs topology.metrics.consumer.register
    topology.worker.childopts topology.worker.gc.childopts topology.worker.logwriter.childopts
    topology.worker.max.heap.size.mb topology.environment topology.priority
    topology.component.resources.onheap.memory.mb topology.component.resources.offheap.memory.mb
    topology.component.cpu.pcore.percent topology.submitter.principal topology.submitter.user
    topology.auto-credentials topology.scheduler.strategy topology.ras.acker.executors.per.worker
    topology.acker.cpu.pcore.percent topology.acker.resources.onheap.memory.mb
    topology.multilang.serializer topology.shellbolt.max.pending topology.error.throttle.interval.secs
    topology.bolts.outgoing.overflow.buffer.enable topology.trident.batch.emit.interval.millis
    topology.trident.windowing.inmemory.cache.limit topology.isolate.machines topology.classpath
    topology.classpath.beginning topology.disable.loadaware.messaging topology.localityaware.higher.bound
    topology.localityaware.lower.bound topology.testing.always.try.serialize topology.users
    topology.groups topology.enable.v2.metrics.tick topology.v2.metrics.tick.interval.seconds
    topology.spout.recvq.skips topology.worker.shared.thread.pool.size topology.worker.receiver.thread.count
    topology.bolts.late.tuple.stream topology.bolts.window.length.count topology.bolts.window.length.duration.ms
    topology.bolts.sliding.interval.count topology.bolts.sliding.interval.duration.ms
    topology.bolts.tuple.timestamp.field.name topology.bolts.tuple.timestamp.max.lag.ms
    topology.bolts.message.id.field.name topology.state.checkpoint.interval
    topology.ras.constraints topology.spread.components topology.ras.one.executor.per.worker
    topology.ras.one.component.per.worker topology.version topology.blobstore.map
    topology.single.thread.executor topology.shellbolt.max.pending topology.subprocess.timeout.secs
    topology.worker.timeout.secs topology.min.replication.count topology.max.replication.wait.time.sec
    topology.transfer.buffer.size.ms topology.executor.overflow.limit topology.sleep.spout.wait.strategy.time.ms
    topology.spout.executor.receive.queue.size topology.localityaware.enabled
    """.split()
) - frozenset(DEFAULTS)


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message names the key."""


class Config(dict):
    """A dict keyed by Storm's configuration names (``topology.workers`` ...)."""

    TOPOLOGY_WORKERS = "topology.workers"
    TOPOLOGY_ACKER_EXECUTORS = "topology.acker.executors"
    TOPOLOGY_MESSAGE_TIMEOUT_SECS = "topology.message.timeout.secs"
    TOPOLOGY_MAX_SPOUT_PENDING = "topology.max.spout.pending"
    TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS = "topology.enable.message.timeouts"
    TOPOLOGY_TICK_TUPLE_FREQ_SECS = "topology.tick.tuple.freq.secs"
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL = "topology.state.checkpoint.interval.ms"
    TOPOLOGY_STATE_PROVIDER = "topology.state.provider"
    TOPOLOGY_STATE_PROVIDER_CONFIG = "topology.state.provider.config"
    TOPOLOGY_DEBUG = "topology.debug"

    def set_num_workers(self, n: int) -> None:
        self["topology.workers"] = n

    def set_num_ackers(self, n: int) -> None:
        self["topology.acker.executors"] = n

    def set_message_timeout_secs(self, secs: float) -> None:
        self["topology.message.timeout.secs"] = secs

    def set_max_spout_pending(self, n: int) -> None:
        self["topology.max.spout.pending"] = n

    def set_debug(self, on: bool) -> None:
        self["topology.debug"] = on


def _positive_number(key: str, v: Any, allow_none: bool = False, integer: bool = False,
                     zero: bool = False) -> int | float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"config key {key!r}: expected a number, got {v!r}")
    if not math.isfinite(v):
        raise ConfigError(f"config key {key!r}: expected a finite number, got {v!r}")
    if integer and int(v) != v:
        raise ConfigError(f"config key {key!r}: expected an integer, got {v!r}")
    if v < 0 or (v == 0 and not zero):
        raise ConfigError(f"config key {key!r}: must be {'>= 0' if zero else '> 0'}, got {v!r}")
    return int(v) if integer else v


def _bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0", "yes", "no"):
        return v.lower() in ("true", "1", "yes")
    raise ConfigError(f"config key {key!r}: expected true/false, got {v!r}")


def coerce_cli_value(text: str) -> Any:
    """``--conf k=v`` values: JSON when it parses (numbers, booleans, objects), else the string."""
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def layered(topology_conf: Mapping[str, Any] | None, conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """The conf a run resolves: the topology's own (``create_topology(conf=...)``) under the one
    it is given (``run``/``submit``'s ``conf``, the operator's, ``--conf`` on top of those)."""
    return {**copy.deepcopy(dict(topology_conf or {})), **(conf or {})}


def check_topology_conf(conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """A topology's own config, checked key by key as any conf (ConfigError naming the key);
    the rules between keys wait for the run's, which may complete it (the provider an
    exactly-once topology needs). Returns a copy of it as given (no defaults)."""
    if conf is None:
        return {}
    if not isinstance(conf, Mapping):
        raise ConfigError(f"create_topology(conf=...): expected a dict of config keys, got {type(conf).__name__}")
    resolve_config(conf, between_keys=False)
    return copy.deepcopy(dict(conf))


def resolve_config(conf: Mapping[str, Any] | None, workers: int | None = None,
                   between_keys: bool = True) -> dict[str, Any]:
    """Check every ``topology.*`` key and return the effective config (defaults filled in).

    Unknown ``topology.*`` keys are an error naming the key; Storm keys we do not implement are
    accepted with a warning; other keys belong to the user and pass through unchanged.
    ``between_keys=False`` skips the checks that need another key's final value.
    """
    out: dict[str, Any] = copy.deepcopy(DEFAULTS)  # no run may share (and mutate) a default
    for key, value in (conf or {}).items():
        if not isinstance(key, str):
            raise ConfigError(f"config keys must be strings, got {key!r}")
        if key.startswith("topology."):
            if key in STORM_KEYS_NOT_IMPLEMENTED:
                log.warning("config key %r is a Storm key this runtime does not implement; ignored", key)
            elif key not in DEFAULTS:
                raise ConfigError(
                    f"unknown config key {key!r}: not a Storm topology key nor one this project "
                    f"documents (see docs/configuration.md)"
                )
        out[key] = value
    if workers is not None:
        out["topology.workers"] = workers
    k = "topology.workers"
    out[k] = _positive_number(k, out[k], integer=True)
    k = "topology.acker.executors"
    out[k] = _positive_number(k, out[k], allow_none=True, integer=True, zero=True)
    k = "topology.message.timeout.secs"
    out[k] = _positive_number(k, out[k])
    k = "topology.batch.flush.interval.millis"
    out[k] = _positive_number(k, out[k])
    k = "topology.max.spout.pending"
    out[k] = _positive_number(k, out[k], allow_none=True, integer=True)
    k = "topology.max.spout.pending.bytes"
    out[k] = _positive_number(k, out[k], allow_none=True, integer=True)
    k = "topology.state.redis.min.replicas"
    out[k] = _positive_number(k, out[k], allow_none=True, integer=True, zero=True)
    k = "topology.state.redis.wait.timeout.ms"
    out[k] = _positive_number(k, out[k], integer=True)
    k = "topology.transactional.max.attempts"
    out[k] = _positive_number(k, out[k], allow_none=True, integer=True, zero=True) or None
    k = "topology.state.key.groups"
    out[k] = _positive_number(k, out[k], integer=True)
    for k in ("topology.enable.message.timeouts", "topology.debug", "topology.state.exactly.once",
              "topology.state.allow.dropped", "topology.transport.encryption"):
        out[k] = _bool(k, out[k])
    for k in ("topology.tick.tuple.freq.secs", "topology.transactional.progress.secs"):
        out[k] = _positive_number(k, out[k], allow_none=True)
    k = "topology.stats.interval.secs"  # also how often workers look for a vanished supervisor
    out[k] = _positive_number(k, out[k])
    if out[k] > 60:
        raise ConfigError(f"config key {k!r}: at most 60 (seconds), got {out[k]!r}")
    k = "topology.sleep.spout.wait.strategy.time.ms"
    out[k] = _positive_number(k, out[k], zero=True)
    k = "topology.max.error.report.per.interval"
    out[k] = _positive_number(k, out[k], integer=True, zero=True)
    for k in ("topology.restart.backoff.initial.secs", "topology.restart.backoff.max.secs",
              "topology.restart.backoff.reset.secs"):
        out[k] = _positive_number(k, out[k], zero=True)
    k = "topology.restart.backoff.multiplier"
    out[k] = _positive_number(k, out[k])
    if out[k] < 1:
        raise ConfigError(f"config key {k!r}: expected a number >= 1, got {out[k]!r}")
    for k in ("topology.transfer.batch.size", "topology.transfer.buffer.size",
              "topology.executor.receive.buffer.size", "topology.max.restarts",
              "topology.transfer.max.message.bytes", "topology.transfer.peer.window.bytes"):
        out[k] = _positive_number(k, out[k], integer=True,
                                  zero=k in ("topology.max.restarts", "topology.transfer.peer.window.bytes"))
    out["topology.state.provider"] = _state_provider(out, between_keys)
    k = "topology.state.checkpoint.interval.ms"
    out[k] = _positive_number(k, out[k])
    k = "topology.airflow.asset"
    if out[k] is not None and (not isinstance(out[k], str) or not out[k].strip()):
        raise ConfigError(f"config key {k!r}: expected an asset name (a non-empty string) or None, got {out[k]!r}")
    k = "topology.sigterm.action"
    if out[k] not in ("kill", "drain"):
        raise ConfigError(f"config key {k!r}: expected 'kill' or 'drain', got {out[k]!r}")
    return out


def _state_provider(conf: dict[str, Any], between_keys: bool = True) -> str:
    """``topology.state.provider`` and its config, checked at submit by state/providers.py
    (memory, redis or "package.module:Class"; unknown config keys named). Exactly-once keeps
    spout positions and the fenced checkpoint record in Redis, so it needs a Redis-based one."""
    from state.providers import StateProviderError, check_provider, is_redis_based

    try:
        name = check_provider(conf)
    except StateProviderError as e:
        raise ConfigError(str(e)) from None
    if between_keys and conf["topology.state.exactly.once"] and not is_redis_based(name):
        raise ConfigError(f"config key 'topology.state.exactly.once' needs a Redis-based topology.state.provider "
                          f"('redis' or a subclass of state.providers:RedisStateProvider), got {name!r}: spout "
                          "positions and the fenced checkpoint record live in Redis (docs/state.md)")
    return name


def redis_url(conf: Mapping[str, Any], explicit: str | None = None, *, needed_for: str) -> str:
    """The Redis a component or the runtime uses, one rule everywhere: a URL given explicitly
    (a spout's ``url=``, the state provider's), else the ``redis.url`` key (every launcher and
    command sets it to the Redis of the run), else ``topology.state.provider.config``'s ``url``.
    ``needed_for`` says who asks, for the error when there is none."""
    url = explicit or conf.get("redis.url") or _provider_url(conf)
    if not url:
        raise ConfigError(f"{needed_for} needs Redis and no URL is set: pass url=..., set the config key "
                          f"redis.url or topology.state.provider.config {{'url': 'redis://...'}}")
    return str(url)


def state_replication(conf: Mapping[str, Any]) -> tuple[int, int]:
    """``(replicas, timeout_ms)``: how many replicas must acknowledge a state commit (0: none)
    and how long its WAIT may block (``topology.state.redis.min.replicas`` and
    ``topology.state.redis.wait.timeout.ms``); for ``state.replication.Replication``."""
    timeout = conf.get("topology.state.redis.wait.timeout.ms") or DEFAULTS["topology.state.redis.wait.timeout.ms"]
    return int(conf.get("topology.state.redis.min.replicas") or 0), int(timeout)


# Trees a spout task may have pending when topology.max.spout.pending is not set: bounded by
# default (memory), high enough not to limit throughput (bench/README.md, "Default pending").
DEFAULT_MAX_SPOUT_PENDING = 1000


def spout_pending_limits(conf: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """``(trees, bytes)`` a spout task may have pending under ``conf`` (its component's). In
    exactly-once mode pending means emitted and not yet committed, a checkpoint interval's
    worth: the default tree count would cap a spout at that many tuples per interval, so only
    a count the user set applies there, beside the byte bound."""
    n = conf.get("topology.max.spout.pending")
    b = conf.get("topology.max.spout.pending.bytes", DEFAULTS["topology.max.spout.pending.bytes"])
    if n is None and not conf.get("topology.state.exactly.once"):
        n = DEFAULT_MAX_SPOUT_PENDING
    return (None if n is None else int(n)), (None if b is None else int(b))


# Set by the worker, never by a user (an unknown key there): the run's fencing token, which every
# state write carries (state/fencing.py).
FENCING_TOKEN = "topology.fencing.token"


def fencing_token(conf: Mapping[str, Any]) -> int | None:
    """The run's fencing token in a worker's conf (None outside a registered run)."""
    token = conf.get(FENCING_TOKEN)
    return None if token is None else int(token)


def state_redis_url(conf: Mapping[str, Any], needed_for: str = "topology.state.provider 'redis'") -> str:
    """Where state lives (checkpointed bolt state, exactly-once snapshots, transactional
    records): the state provider's ``url`` first, then as ``redis_url``."""
    return redis_url(conf, _provider_url(conf), needed_for=needed_for)


def _provider_url(conf: Mapping[str, Any]) -> str | None:
    """The Redis of ``topology.state.provider.config`` (``url`` or Storm's host/port/... keys);
    None for a custom provider that is not Redis-based (its config is its own)."""
    from state.providers import redis_url_of

    return redis_url_of(conf)
