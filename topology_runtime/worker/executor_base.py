"""What every executor has: its task's counters, its routes, the emit checks and error reporting.

An executor runs one task's component instance on the worker's loop; it reaches the rest of
the process only through its ``WorkerPort``."""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any

from ..api.status import LatencyHistogram
from .port import WorkerPort
from .routing import Route

REPEAT_LOG_SECS = 10.0


class TaskStats:
    __slots__ = ("emitted", "acked", "failed", "replayed", "executed", "timed_out", "execute", "complete")

    def __init__(self) -> None:
        self.emitted = self.acked = self.failed = self.replayed = self.executed = self.timed_out = 0
        self.execute = LatencyHistogram()
        self.complete = LatencyHistogram()

    def to_dict(self) -> dict:
        return {
            "emitted": self.emitted, "acked": self.acked, "failed": self.failed, "replayed": self.replayed,
            "executed": self.executed, "timed_out": self.timed_out,
            "execute": self.execute.to_dict(), "complete": self.complete.to_dict(),
        }


class EmitError(ValueError):
    """A bad emit (unknown stream, wrong target); names the component, stream and task."""


class BaseExecutor:
    """One task's instance, routes and counters; the emit checks every collector shares."""

    def __init__(self, port: WorkerPort, task: int, component: str, instance: Any, routes: dict[str, Route]) -> None:
        self.port = port
        self.task = task
        self.component = component
        self.instance = instance
        self.routes = routes
        self.stats = TaskStats()
        self._errors_seen: dict[tuple, list] = {}  # error kind -> [repeats not logged, last logged]
        self.log = logging.LoggerAdapter(
            logging.getLogger("topology.task"), {"component": component, "task": task}
        )

    def _route(self, stream: str, direct: bool) -> Route:
        route = self.routes.get(stream)
        if route is None:
            raise EmitError(
                f"component {self.component!r} (task {self.task}): emit on undeclared stream {stream!r} "
                f"(declared: {sorted(self.routes) or 'none'})"
            )
        if route.direct and not direct:
            raise EmitError(
                f"component {self.component!r} stream {stream!r}: the stream is declared direct; use emit_direct"
            )
        if direct and not route.direct:
            raise EmitError(
                f"component {self.component!r} stream {stream!r}: emit_direct on a stream not declared direct "
                f"(declare it with Stream(fields, direct=True))"
            )
        return route

    def _direct_target(self, route: Route, task: int, stream: str) -> list[int]:
        if task not in route.direct_targets:
            raise EmitError(
                f"component {self.component!r} stream {stream!r}: emit_direct to task {task!r}, which does not "
                f"subscribe to this stream with a direct grouping (subscribers: {sorted(route.direct_targets)})"
            )
        return [task]

    def report_error(self, what: str, exc: BaseException) -> None:
        """To the run's status (capped per stats interval by the worker) and to the log: an error
        first seen here is logged with its traceback; the same error again (same type, raised at
        the same line) at most once per REPEAT_LOG_SECS, as one line with how often it repeated."""
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.port.record_error(self.component, self.task, f"{what}: {type(exc).__name__}: {exc}", tb)
        frames = traceback.extract_tb(exc.__traceback__)
        key = (type(exc).__name__, frames[-1].filename, frames[-1].lineno) if frames else (type(exc).__name__,)
        now = time.monotonic()
        seen = self._errors_seen.get(key)
        if seen is None:
            if len(self._errors_seen) < 256:
                self._errors_seen[key] = [0, now]
            self.log.error("%s raised %s: %s\n%s", what, type(exc).__name__, exc, tb.rstrip())
            return
        seen[0] += 1
        if now - seen[1] >= REPEAT_LOG_SECS:
            self.log.error("%s raised %s: %s (the same error %d time(s) in %.0f s; traceback logged the first time)",
                           what, type(exc).__name__, exc, seen[0], now - seen[1])
            seen[0], seen[1] = 0, now


