"""The control plane in Redis: run registry, lease, status/metrics/heartbeats, kill requests.

Key layout (docs/operations.md): every control record of topology ``ID`` shares the Redis
Cluster hash tag ``{ID:ctl}``, so each MULTI and script here stays in one slot; the registry of
run names, ``topology:runs``, is written on its own (docs/redis.md).

    topology:runs                  zset   run id -> last start time
    topology:{ID:ctl}:run          hash   launcher, master, workers, driver host/pid, started, state, log
    topology:{ID:ctl}:lease        string fencing token of the live run (expires unless renewed)
    topology:{ID:ctl}:token        int    last fencing token handed out
    topology:{ID:ctl}:fence        int    the newest token that wrote these records (state/fencing.py)
    topology:{ID:ctl}:epoch        int    worker launches (Spark barrier stages) so far
    topology:{ID:ctl}:kill         string "kill" | "drain": a request to the live run
    topology:{ID:ctl}:paused       string "1" | "0": pause or resume asked of the live run (topology pause/resume)
    topology:{ID:ctl}:rebalance    string JSON {workers, timeout}: a rebalance asked of the live run (taken once)
    topology:{ID:ctl}:rebalance-refused   string why the run's driver refused the last rebalance asked
    topology:{ID:ctl}:savepoint-request   string the name of a savepoint asked of the live run (taken once)
    topology:{ID:ctl}:status       string JSON RunStatus + workers (heartbeats), refreshed every few seconds
    topology:{ID:ctl}:history      list   JSON samples {t, emitted, acked, failed, p50, p99}, one per publish,
                                          trimmed to the last HISTORY_SAMPLES (the UI's throughput chart)
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import redis

from state import fencing, namespaces
from state import settings as state_settings
from state.connection import connect
from state.layout import REGISTRY, InvalidTopologyId, check_topology_id, ctl_key, fence_key, owner_of
from state.namespaces import StateComponents

from ..api.status import FINAL_STATES, RUNNING, ComponentStats, RunStatus

LEASE_TTL_MS = int(os.environ.get("TOPOLOGY_LEASE_TTL_MS", 15000))  # how long a vanished driver blocks its id
RECORD_TTL_SECS = 7 * 24 * 3600  # a finished run's records expire after a week
# ~15 minutes of samples at the reporter's 2 s publish interval: enough for the UI's chart, bounded.
HISTORY_SAMPLES = int(os.environ.get("TOPOLOGY_HISTORY_SAMPLES", 450))
# Set by Airflow in a task's environment (inherited by spark-submit's driver): which DAG run started this run.
_AIRFLOW_CTX = {"dag_id": "AIRFLOW_CTX_DAG_ID", "dag_run_id": "AIRFLOW_CTX_DAG_RUN_ID", "task_id": "AIRFLOW_CTX_TASK_ID"}

# KEYS: lease, token, fence. ARGV: lease ms. 0: another run holds the lease; else this run's
# fencing token: above every token this id had, even after ``topology reset`` deleted the counter
# (Redis' clock in ms), so a paused run from before stays fenced off (state/fencing.py).
_REGISTER = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = math.max(now, tonumber(redis.call('GET', KEYS[2]) or '0') + 1,
                       tonumber(redis.call('GET', KEYS[3]) or '0') + 1)
local s = string.format('%d', token)
redis.call('SET', KEYS[2], s)
redis.call('SET', KEYS[3], s)
redis.call('SET', KEYS[1], s, 'PX', ARGV[1])
return token
"""
# KEYS: lease, fence. ARGV: token, lease ms. 1: renewed; 2: the lease had gone (expired during
# an outage longer than it, or its renewals lost in a failover) and no newer run started: taken
# again; 0: another run holds it, or a newer run started (and maybe ended) since.
_RENEW = """
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if not cur and tonumber(redis.call('GET', KEYS[2]) or '0') <= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class LeaseKeeper:
    """Renews a run's lease from its own thread from the moment it is taken (JVM start-up can
    outlast the lease), and calls ``on_lost`` if another run took it over."""

    def __init__(self, control: ControlPlane, topology_id: str, token: int, on_lost) -> None:
        import threading

        self.control, self.topology_id, self.token, self.on_lost = control, topology_id, token, on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import logging

        log = logging.getLogger("topology.driver")
        while not self._stop.wait(LEASE_TTL_MS / 5000):
            try:
                self.control.renew(self.topology_id, self.token)
            except LeaseLost as e:
                log.error("%s: another run took over this topology id; stopping", e)
                self.on_lost()
                return
            except redis.RedisError as e:  # keep trying: the lease outlives short outages
                log.warning("control plane: could not renew the lease (%s); retrying", e)

    def stop(self) -> None:
        self._stop.set()


class RunAlreadyLive(RuntimeError):
    """A second live run of the same topology id."""


class LeaseLost(RuntimeError):
    """This run's lease expired or was taken over: it must stop writing."""



@dataclass
class RunRecord:
    name: str
    info: dict[str, str]
    status: dict[str, Any] | None
    live: bool

    @property
    def state(self) -> str:
        if self.status and self.status.get("state"):
            return self.status["state"]
        return self.info.get("state", "unknown")

    @property
    def paused(self) -> bool:
        return bool(self.status and self.status.get("paused")) and self.state == RUNNING

    @property
    def display_state(self) -> str:
        """The state for people: ``paused`` for a running run whose spouts are paused."""
        return "paused" if self.paused else self.state


def status_from_dict(d: dict[str, Any]) -> RunStatus:
    return RunStatus(
        name=d.get("name", ""), state=d.get("state", "unknown"), error=d.get("error"),
        components={k: ComponentStats(**v) for k, v in (d.get("components") or {}).items()},
        system_components={k: ComponentStats(**v) for k, v in (d.get("system_components") or {}).items()},
        restarts=int(d.get("restarts", 0)), errors=list(d.get("errors") or []),
        uptime_secs=float(d.get("uptime_secs", 0.0)), paused=bool(d.get("paused", False)),
        workers=_worker_count(d), parallelism=dict(d.get("parallelism") or {}),
    )


def _worker_count(d: dict[str, Any]) -> int:
    w = d.get("workers")
    return w if isinstance(w, int) else int(d.get("worker_count") or len(w or {}))


def history_sample(status: RunStatus, t: float) -> dict[str, Any]:
    """One compact point of the throughput/latency series: the spouts' emitted/acked/failed tuple
    trees and the worst spout's complete latency percentiles (ms; None before any tree completed)."""
    comps = list(status.components.values())
    # Throughput in tuple trees: the spouts' figures (a bolt's acks would count a tree again per bolt).
    spouts = [c for c in comps if c.executed == 0] or comps
    p50 = [c.complete_latency_p50_ms for c in comps if c.complete_latency_p50_ms is not None]
    p99 = [c.complete_latency_p99_ms for c in comps if c.complete_latency_p99_ms is not None]
    return {"t": round(t, 3), "emitted": sum(c.emitted for c in spouts), "acked": sum(c.acked for c in spouts),
            "failed": sum(c.failed for c in spouts), "p50": max(p50) if p50 else None,
            "p99": max(p99) if p99 else None}


class ControlPlane:
    """Client of the control records; used by launchers (writers) and the CLI (readers)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.redis = connect(url, decode_responses=True, socket_timeout=10,
                                          health_check_interval=30)
        self._register = self.redis.register_script(_REGISTER)
        self._renew = self.redis.register_script(_RENEW)
        self._release = self.redis.register_script(_RELEASE)

    # --- writer side (the live run) ---------------------------------------------------------------
    def register(self, topology_id: str, launcher: str, workers: int,
                 state: tuple[dict[str, Any], bool, StateComponents] | None = None, **info: Any) -> int:
        """Take the run's lease (fencing token) or raise RunAlreadyLive naming the live run.

        ``state``: (the run's state settings, whether it writes state, its stateful components);
        StateSettingsChanged (nothing written, the lease given back) if the id's committed state
        was written with other settings, or other components (StateComponentsChanged); else they
        are recorded with the run record when none are yet."""
        check_topology_id(topology_id)
        r = self.redis
        token = int(self._register(keys=[ctl_key(topology_id, "lease"), ctl_key(topology_id, "token"),
                                         fence_key(ctl_key(topology_id, "run"))], args=[LEASE_TTL_MS]))
        if not token:
            live = r.hgetall(ctl_key(topology_id, "run"))
            raise RunAlreadyLive(
                f"topology {topology_id!r} is already live (launcher {live.get('launcher', '?')}, "
                f"driver {live.get('host', '?')} pid {live.get('pid', '?')}, started {live.get('started', '?')}); "
                f"kill it first: topology kill {topology_id}"
            )
        record: list = []
        if state is not None:
            # Checked under the lease: no other run of the id can record or write state meanwhile.
            try:
                if state_settings.check(r, topology_id, state[0]) is None and state[1]:
                    record = state_settings.record_commands(topology_id, state[0])
                components = namespaces.check(r, topology_id, state[2])
                if state[1]:
                    record += components
            except BaseException:
                self.release(topology_id, token)
                raise
        fields = {
            "launcher": launcher, "workers": workers, "host": socket.gethostname(), "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "state": "starting", "token": token,
            **{k: os.environ[v] for k, v in _AIRFLOW_CTX.items() if os.environ.get(v)},
            **{k: v for k, v in info.items() if v is not None},
        }
        run = ctl_key(topology_id, "run")
        self._fenced(run, token, [
            ("DEL", run, ctl_key(topology_id, "kill"), ctl_key(topology_id, "paused"), ctl_key(topology_id, "status"),
             ctl_key(topology_id, "history")),  # a new run's counters start at 0: a fresh chart
            ("HSET", run, *(x for kv in fields.items() for x in (kv[0], str(kv[1])))),
            *record,
        ])
        # The registry is not in the run's hash slot (a MULTI may not span two on a Redis
        # Cluster): added after the records, so a listed name always has them (list() drops
        # names whose records expired).
        r.zadd(REGISTRY, {topology_id: time.time()})
        return token

    def check_state_settings(self, topology_id: str, settings: dict[str, Any],
                             components: StateComponents | None = None) -> None:
        """A launcher's pre-flight, before anything starts: StateSettingsChanged if the id's
        committed state was written with other settings or (StateComponentsChanged) other
        stateful components (``register`` checks again, under the lease)."""
        state_settings.check(self.redis, check_topology_id(topology_id), settings)
        if components is not None:
            namespaces.check(self.redis, topology_id, components)

    def renew(self, topology_id: str, token: int) -> None:
        """Extend the lease; take it again if it is gone and nobody else took it (LeaseLost if
        another run holds it)."""
        done = self._renew(keys=[ctl_key(topology_id, "lease"), fence_key(ctl_key(topology_id, "run"))],
                           args=[token, LEASE_TTL_MS])
        if not done:
            raise LeaseLost(f"topology {topology_id!r}: lease {token} lost")
        if done == 2:
            import logging

            logging.getLogger("topology.driver").warning(
                "topology %r: the lease had expired (a Redis outage longer than it, or its renewals lost in a "
                "failover) and no other run took it: taken again with token %s", topology_id, token)

    def next_epoch(self, topology_id: str) -> int:
        return int(self.redis.incr(ctl_key(topology_id, "epoch"))) - 1

    def publish(self, topology_id: str, token: int, status: RunStatus, workers: dict | None = None,
                **info: Any) -> None:
        """The live run's status, run-record fields and a chart sample, in one fenced script:
        LeaseLost if a newer run of the id started (this one was paused past its lease)."""
        self._fenced(ctl_key(topology_id, "run"), token, self._publish_commands(topology_id, status, workers, info))

    def _publish_commands(self, topology_id: str, status: RunStatus, workers: dict | None, info: dict) -> list:
        d = status.to_dict()
        d["worker_count"] = status.workers  # "workers" holds the heartbeats in the record
        d["workers"] = workers or {}
        d["updated"] = time.time()
        fields = {"state": status.state, **{k: str(v) for k, v in info.items() if v is not None}}
        history = ctl_key(topology_id, "history")
        return [
            ("SET", ctl_key(topology_id, "status"), json.dumps(d)),
            ("HSET", ctl_key(topology_id, "run"), *(x for kv in fields.items() for x in kv)),
            # The chart's time series rides in the same round trip, bounded by LTRIM.
            ("RPUSH", history, json.dumps(history_sample(status, d["updated"]))),
            ("LTRIM", history, -HISTORY_SAMPLES, -1),
        ]

    def _fenced(self, key: str, token: int, commands: list) -> None:
        try:
            fencing.run(self.redis, key, commands, token)
        except fencing.Fenced as e:
            raise LeaseLost(f"topology {owner_of(key)[0]!r}: run with token {token} is fenced off: {e}") from e

    def record_state(self, topology_id: str, token: int, commands: list) -> None:
        """Commands on the id's control records (its stateful components), fenced by ``token``."""
        self._fenced(ctl_key(topology_id, "run"), token, commands)

    def kill_request(self, topology_id: str) -> str | None:
        return self.redis.get(ctl_key(topology_id, "kill"))

    def take_rebalance_request(self, topology_id: str) -> dict | None:
        """The rebalance asked for by ``topology rebalance`` (taken: a request is carried out once)."""
        v = self.redis.getdel(ctl_key(topology_id, "rebalance"))
        return None if v is None else json.loads(v)

    def request_rebalance(self, topology_id: str, workers: int | None, timeout: float | None = None,
                          parallelism: dict[str, int] | None = None) -> bool:
        """Ask the live run to go on with ``workers`` workers (None: as many as now) and, for the
        components in ``parallelism``, that many tasks; False if no run of that id is live."""
        if not self.redis.exists(ctl_key(topology_id, "lease")):
            return False
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(ctl_key(topology_id, "rebalance-refused"))
        pipe.set(ctl_key(topology_id, "rebalance"), json.dumps({"workers": workers, "timeout": timeout,
                                                                    "parallelism": parallelism or {}}), ex=3600)
        pipe.execute()
        return True

    def refuse_rebalance(self, topology_id: str, reason: str) -> None:
        """The driver's answer to a rebalance it will not carry out (nothing changed)."""
        self.redis.set(ctl_key(topology_id, "rebalance-refused"), reason, ex=3600)

    def rebalance_refusal(self, topology_id: str) -> str | None:
        return self.redis.get(ctl_key(topology_id, "rebalance-refused"))

    def request_savepoint(self, topology_id: str, name: str) -> bool:
        """Ask the live run to take savepoint ``name``; False if no run of that id is live."""
        if not self.redis.exists(ctl_key(topology_id, "lease")):
            return False
        self.redis.set(ctl_key(topology_id, "savepoint-request"), name, ex=3600)
        return True

    def take_savepoint_request(self, topology_id: str) -> str | None:
        """The savepoint asked for by ``topology savepoint`` (taken: carried out once)."""
        return self.redis.getdel(ctl_key(topology_id, "savepoint-request"))

    def pause_request(self, topology_id: str) -> bool | None:
        """The paused state asked for by ``topology pause/resume``, None when nothing was asked."""
        v = self.redis.get(ctl_key(topology_id, "paused"))
        return None if v is None else v == "1"

    def finish(self, topology_id: str, token: int, status: RunStatus, workers: dict | None = None) -> None:
        """The final status and the records' expiry, fenced as ``publish``; then the lease goes."""
        commands = self._publish_commands(topology_id, status, workers,
                                          {"ended": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        commands += [("EXPIRE", ctl_key(topology_id, name), RECORD_TTL_SECS)
                     for name in ("run", "status", "token", "epoch", "history")]
        commands.append(("DEL", ctl_key(topology_id, "kill")))
        commands.append(("DEL", ctl_key(topology_id, "paused"), ctl_key(topology_id, "rebalance")))
        self._fenced(ctl_key(topology_id, "run"), token, commands)
        self._release(keys=[ctl_key(topology_id, "lease")], args=[token])

    def release(self, topology_id: str, token: int) -> None:
        """Give the lease back without a final record (the run could not start)."""
        self._release(keys=[ctl_key(topology_id, "lease")], args=[token])

    # --- reader side (CLI, Airflow) -------------------------------------------------------------
    def request_kill(self, topology_id: str, drain: bool = False) -> bool:
        """Ask the live run to stop; False if no run of that id is live."""
        if not self.redis.exists(ctl_key(topology_id, "lease")):
            return False
        self.redis.set(ctl_key(topology_id, "kill"), "drain" if drain else "kill", ex=3600)
        return True

    def request_pause(self, topology_id: str, paused: bool) -> bool:
        """Ask the live run to pause (or resume) its spouts; False if no run of that id is live.
        The request stays until the run ends, so a driver that restarts keeps it."""
        if not self.redis.exists(ctl_key(topology_id, "lease")):
            return False
        self.redis.set(ctl_key(topology_id, "paused"), "1" if paused else "0")
        return True

    def is_live(self, topology_id: str) -> bool:
        return bool(self.redis.exists(ctl_key(topology_id, "lease")))

    def get(self, topology_id: str) -> RunRecord | None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(ctl_key(topology_id, "run"))
        pipe.get(ctl_key(topology_id, "status"))
        pipe.exists(ctl_key(topology_id, "lease"))
        info, status, live = pipe.execute()
        if not info and not status:
            return None
        rec = RunRecord(topology_id, info, json.loads(status) if status else None, bool(live))
        if not rec.live and rec.state not in FINAL_STATES:
            # The driver vanished without a final word (killed -9, machine lost).
            rec.info["state"] = "lost"
            if rec.status:
                rec.status["state"] = "lost"
        return rec

    def list(self) -> list[RunRecord]:
        names = self.redis.zrevrange(REGISTRY, 0, -1)
        out = []
        for name in names:
            try:
                rec = self.get(name)
            except InvalidTopologyId:  # written there by something else: never a key to read
                logging.getLogger(__name__).warning("control plane: skipping %r in the run registry: not a "
                                                    "topology id", name)
                continue
            if rec is None:
                self.redis.zrem(REGISTRY, name)  # its records expired
                continue
            out.append(rec)
        return out
