"""What every executor has: its task's counters, its routes, the emit checks and error reporting.

An executor runs one task's component instance on the worker's loop; it reaches the rest of
the process only through its ``WorkerPort``."""

from __future__ import annotations

import logging
import traceback
from typing import Any

from ..api.status import LatencyHistogram
from .port import WorkerPort
from .routing import Route


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
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.log.error("%s raised %s: %s\n%s", what, type(exc).__name__, exc, tb.rstrip())
        self.port.record_error(self.component, self.task, f"{what}: {type(exc).__name__}: {exc}", tb)


