"""TopologyTrigger: follows a detached topology run in the triggerer, without a worker slot.

It polls the run registry in Redis with ``redis.asyncio`` (``state.connection.connect_async``:
every URL form, Sentinel and Cluster included; never blocking the triggerer's event
loop on the network) until the run this submission started reaches a final state, and fires
one event with that state. While it waits it copies the driver's progress lines into the task
log when the driver log file is on this machine. Lives in the plugins package: the triggerer
must import it, and triggers may not live in the dags folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from airflow.triggers.base import BaseTrigger, TriggerEvent

from state.connection import connect_async
from state.layout import ctl_key
from topology_runtime.api.status import FINAL_STATES

# Consecutive polls that find the local driver process gone while the run record is not final
# before the run is declared lost (the final status may still be landing).
_GONE_POLLS = 3
# on_kill: how long the run may take to record its end before its local driver gets SIGTERM
# (Airflow bounds on_kill by [triggerer] on_kill_timeout, 30 s by default).
_KILL_WAIT_SECS = 20.0


def _pid_alive(pid: int) -> bool:
    """A process that exited but was not reaped yet (a zombie) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True  # no /proc (macOS): trust kill(0)


class TopologyTrigger(BaseTrigger):
    """Fires ``{"name", "state", "error", "log_file"}`` once the run started with driver log
    ``log_file`` ends (``completed``, ``killed``, ``failed``, or ``lost`` when the driver vanished),
    or ``state="not-started"`` when no such run registered within ``start_timeout`` seconds or
    the local driver process exited before registering (a rejected topology, an id already live).
    """

    def __init__(self, name: str, redis_url: str, log_file: str, pid: int | None = None, host: str | None = None,
                 deploy_mode: str = "client", poll_interval: float = 2.0, start_timeout: float = 600.0,
                 submitted: float | None = None, on_kill_action: str = "kill") -> None:
        super().__init__()
        self.name = name
        self.redis_url = redis_url
        self.log_file = log_file
        self.pid = pid
        self.host = host
        self.deploy_mode = deploy_mode
        self.poll_interval = poll_interval
        self.start_timeout = start_timeout
        self.submitted = submitted if submitted is not None else time.time()
        self.on_kill_action = on_kill_action

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("topology_airflow.triggers.TopologyTrigger", {
            "name": self.name, "redis_url": self.redis_url, "log_file": self.log_file, "pid": self.pid,
            "host": self.host, "deploy_mode": self.deploy_mode, "poll_interval": self.poll_interval,
            "start_timeout": self.start_timeout, "submitted": self.submitted, "on_kill_action": self.on_kill_action,
        })

    def _local_driver(self) -> bool:
        # Only a client-mode driver started on this very machine can be checked by pid.
        return bool(self.pid) and self.deploy_mode == "client" and self.host == socket.gethostname()

    def _event(self, state: str, error: str | None) -> TriggerEvent:
        return TriggerEvent({"name": self.name, "state": state, "error": error, "log_file": self.log_file})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        client = connect_async(self.redis_url, decode_responses=True, socket_timeout=10)
        offset = 0
        last_state: str | None = None
        gone = 0
        try:
            while True:
                try:
                    pipe = client.pipeline(transaction=False)
                    pipe.hgetall(ctl_key(self.name, "run"))
                    pipe.get(ctl_key(self.name, "status"))
                    pipe.exists(ctl_key(self.name, "lease"))
                    info, raw_status, live = await pipe.execute()
                except aioredis.RedisError as e:  # an outage is not the run's end: keep polling
                    self.log.warning("topology %r: Redis unreachable (%s); retrying", self.name, e)
                    await asyncio.sleep(self.poll_interval)
                    continue
                offset = await asyncio.to_thread(self._forward_progress, offset)
                driver_gone = self._local_driver() and not _pid_alive(int(self.pid or 0))
                if info.get("log") != self.log_file:  # the record is an earlier run's (or none yet)
                    waited = time.time() - self.submitted
                    if driver_gone:
                        yield self._event("not-started", f"the driver (pid {self.pid}) exited before registering "
                                                         f"run {self.name!r}: see {self.log_file}")
                        return
                    if waited > self.start_timeout:
                        yield self._event("not-started", f"run {self.name!r} did not register within "
                                                         f"{self.start_timeout:.0f}s: see {self.log_file}")
                        return
                else:
                    status = json.loads(raw_status) if raw_status else {}
                    state = status.get("state") or info.get("state", "unknown")
                    if state != last_state:
                        self.log.info("topology %r is %s", self.name, state)
                        last_state = state
                    if state in FINAL_STATES:
                        await asyncio.to_thread(self._forward_progress, offset)
                        yield self._event(state, status.get("error"))
                        return
                    gone = gone + 1 if (not live or driver_gone) else 0
                    if gone >= _GONE_POLLS:  # no final word: killed -9, machine lost
                        yield self._event("lost", f"the driver of {self.name!r} vanished without a final status")
                        return
                await asyncio.sleep(self.poll_interval)
        finally:
            await client.aclose()

    async def on_kill(self) -> None:
        """The deferred task was marked failed or cleared: stop this submission's run (kill, or
        drain when ``on_kill_action`` says so) through Redis and wait for its final state; a local
        driver that has not ended by then gets SIGTERM (it kills the topology and records it)."""
        client = connect_async(self.redis_url, decode_responses=True, socket_timeout=10)
        try:
            info = await client.hgetall(ctl_key(self.name, "run"))
            if info.get("log") != self.log_file:
                return  # not this submission's run (it never registered, or a later one did)
            if await client.exists(ctl_key(self.name, "lease")):
                await client.set(ctl_key(self.name, "kill"), "drain" if self.on_kill_action == "drain" else "kill",
                                 ex=3600)
                self.log.info("topology %r: %s requested (the task was killed)", self.name, self.on_kill_action)
            deadline = time.monotonic() + _KILL_WAIT_SECS
            while time.monotonic() < deadline and await client.exists(ctl_key(self.name, "lease")):
                await asyncio.sleep(0.5)
        finally:
            await client.aclose()
        pid = int(self.pid or 0)
        if self._local_driver() and _pid_alive(pid):
            try:
                os.killpg(pid, signal.SIGTERM)  # its own session (start_detached)
            except OSError:
                pass

    def _forward_progress(self, offset: int) -> int:
        """Log the driver's new progress lines (the log file is only readable on its machine)."""
        try:
            with open(self.log_file, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except OSError:
            return offset
        end = chunk.rfind(b"\n") + 1  # whole lines only
        for line in chunk[:end].decode(errors="replace").splitlines():
            if line.startswith("progress ["):
                self.log.info("%s", line)
        return offset + end
