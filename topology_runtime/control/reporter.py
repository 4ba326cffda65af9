"""What a live run tells the outside world: progress lines, the Redis control plane, kill requests.

Driven from the supervisor loop of any launcher (``tick`` every ~50 ms).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from ..api.status import RunStatus
from ..supervisor.run_supervisor import RunSupervisor
from . import inspection

if TYPE_CHECKING:  # a run without a control plane (LocalCluster's default) never loads redis
    from .control_plane import ControlPlane

log = logging.getLogger("topology.driver")

KILL_POLL_SECS = 0.5
PUBLISH_SECS = 2.0


PROGRESS_WIDTH = 100  # longer: one line per component (log views should not need sideways scrolling)


def compact(x: float) -> str:
    """A count or rate short enough for a log line: 9,876 / 12.3k / 4.57M / 1.2G."""
    if abs(x) < 1e4:
        return f"{x:,.0f}"
    for div, unit in ((1e3, "k"), (1e6, "M"), (1e9, "G")):
        v = x / div
        if abs(v) < 999.5:
            return f"{v:.3g}{unit}"
    return f"{x / 1e9:,.0f}G"


def progress_line(status: RunStatus, prev: dict[str, int], dt: float) -> str:
    """``progress [running 12s] sentences 12.3k emitted 12.3k acked 1.2k/s | split 123k executed
    12.3k/s``; over PROGRESS_WIDTH characters, one such line per component (joined by newlines)."""
    parts = []
    for name, c in status.components.items():
        done = c.emitted if c.executed == 0 else c.executed
        # Never below 0: figures a killed worker had not reported yet are lost with it.
        rate = max(0.0, (done - prev.get(name, 0)) / dt) if dt > 0 else 0.0
        prev[name] = done
        label = (f"{compact(c.emitted)} emitted {compact(c.acked)} acked" if c.executed == 0
                 else f"{compact(c.executed)} executed")
        fail = f" {compact(c.failed)} failed" if c.failed else ""
        parts.append(f"{name} {label}{fail} {compact(rate)}/s")
    restarts = f" restarts={status.restarts}" if status.restarts else ""
    head = f"progress [{status.state} {status.uptime_secs:.0f}s{restarts}]"
    line = f"{head} " + " | ".join(parts)
    if len(line) <= PROGRESS_WIDTH or len(parts) < 2:
        return line
    return "\n".join(f"{head} {p}" for p in parts)


def summary(status: RunStatus) -> str:
    lines = [f"run {status.name!r} {status.state} after {status.uptime_secs:.1f}s"
             + (f" ({status.restarts} worker restart(s))" if status.restarts else "")]
    lines.append(status.table())
    for name, c in status.components.items():
        if c.dropped:
            lines.append(f"warning: {name} dropped {c.dropped} tuple(s) without evaluating them in a window "
                         f"({c.late} late; late tuples reach a bolt only through with_late_tuple_stream; "
                         "a count window's partial tail at end of input is not evaluated)")
    if status.error:
        lines.append(f"error: {status.error}")
    for err in status.errors[-3:]:
        lines.append(f"last error in {err.get('component')} task {err.get('task')}: {err.get('error')}")
        if status.state == "failed" and err.get("traceback"):
            lines.append(err["traceback"].rstrip())
    return "\n".join(lines)


class RunReporter:
    def __init__(self, sup: RunSupervisor, control: ControlPlane | None = None, token: int | None = None,
                 progress_interval: float | None = None, out: TextIO | None = None,
                 info: Callable[[], dict] | None = None,
                 rebalancer: Callable[[int | None, float | None, dict[str, int]], str | None] | None = None) -> None:
        self.sup = sup
        self.control = control
        # What the control plane's calls raise: nothing to catch without one (and no import).
        self._lease_lost: type[Exception] | tuple = ()
        self._redis_error: type[Exception] | tuple = ()
        if control is not None:
            import redis

            from .control_plane import LeaseLost

            self._lease_lost, self._redis_error = LeaseLost, redis.RedisError
        self.token = token
        self.progress_interval = progress_interval
        self.out = out or sys.stdout
        self.info = info
        # The launcher's rebalance: (workers, drain timeout, parallelism) -> None when under way, else why not.
        self.rebalancer = rebalancer
        now = time.monotonic()
        self._next_kill = now
        self._next_publish = now
        self._next_progress = now + (progress_interval or 0)
        self._last_progress = now
        self._prev: dict[str, int] = {}
        self._redis_down_since: float | None = None
        self.fenced = False  # a newer run of the id took over: this run writes no record any more

    def tick(self) -> None:
        now = time.monotonic()
        if self.control is not None and (now >= self._next_kill or now >= self._next_publish):
            try:
                if now >= self._next_kill:
                    self._next_kill = now + KILL_POLL_SECS
                    req = self.control.kill_request(self.sup.name)
                    if req:
                        log.info("run %s: %s requested through the control plane", self.sup.name, req)
                        self.sup.request_kill(drain=(req == "drain"))
                    rebalance = self.control.take_rebalance_request(self.sup.name)
                    if rebalance is not None:
                        self._rebalance(rebalance)
                    savepoint = self.control.take_savepoint_request(self.sup.name)
                    if savepoint is not None:
                        self._savepoint(savepoint)
                    paused = self.control.pause_request(self.sup.name)
                    if paused is not None and paused != self.sup.paused:
                        self.sup.set_paused(paused)
                    self.sup.set_inspection(*inspection.requested(self.control, self.sup.name))
                    inspection.record_samples(self.control, self.sup.name, self.sup.take_samples())
                if now >= self._next_publish and not self.fenced:
                    self._next_publish = now + PUBLISH_SECS
                    self.control.publish(self.sup.name, self.token, self.sup.status(), self.sup.workers_info())
                if self._redis_down_since is not None:
                    log.warning("control plane: Redis reachable again after %.1fs", now - self._redis_down_since)
                    self._redis_down_since = None
            except self._lease_lost as e:
                self._fenced_off(e)
            except self._redis_error as e:
                if self._redis_down_since is None:
                    self._redis_down_since = now
                    log.warning("control plane: Redis unreachable (%s); the run goes on, retrying", e)
                self._next_kill = self._next_publish = now + 2.0
        if self.progress_interval and now >= self._next_progress:
            self._next_progress = now + self.progress_interval
            line = progress_line(self.sup.status(), self._prev, now - self._last_progress)
            self._last_progress = now
            self._print(line)

    def _rebalance(self, req: dict) -> None:
        if self.rebalancer is None:
            refused: str | None = "this launcher cannot rebalance a live run"
        else:
            try:
                refused = self.rebalancer(req.get("workers"), req.get("timeout"), dict(req.get("parallelism") or {}))
            except ValueError as e:
                refused = str(e)
        if refused is not None:
            log.warning("run %s: rebalance to %s worker(s) %s refused: %s; nothing changed", self.sup.name,
                        req.get("workers"), req.get("parallelism") or "", refused)
            assert self.control is not None
            self.control.refuse_rebalance(self.sup.name, refused)

    def _savepoint(self, name: str) -> None:
        refused = self.sup.request_savepoint(name)
        if refused is not None:
            from state.savepoints import record_failure

            log.warning("run %s: savepoint %r refused: %s", self.sup.name, name, refused)
            assert self.control is not None
            record_failure(self.control.redis, self.sup.name, name, refused)

    def _fenced_off(self, e: Exception) -> None:
        """A newer run of this id owns the records: write nothing more, end this run."""
        if not self.fenced:
            self.fenced = True
            log.error("%s; this run stops and leaves the records to the newer run", e)
            self.sup.fail(f"fenced off: a newer run of {self.sup.name!r} started while this one was paused or "
                          "cut off past its lease")

    def final(self) -> RunStatus:
        status = self.sup.status()
        if self.control is not None and self.token is not None and not self.fenced:
            for attempt in range(5):
                try:
                    self.control.finish(self.sup.name, self.token, status, self.sup.workers_info())
                    break
                except self._lease_lost as e:
                    self._fenced_off(e)
                    break
                except self._redis_error as e:
                    log.warning("control plane: could not record the final status (%s); retrying", e)
                    time.sleep(0.5 * (attempt + 1))
        if self.progress_interval is not None:
            self._print(summary(status))
        return status

    def _print(self, line: str) -> None:
        # Under spark-submit this process's stdout is a pipe read by the JVM: once the JVM is
        # gone (a SIGTERM to the task's process group), a write fails and the run must go on.
        try:
            print(line, file=self.out, flush=True)
        except (BrokenPipeError, ValueError, OSError):
            self.progress_interval = 0
