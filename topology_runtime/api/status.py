"""Run status as users see it: RunStatus, ComponentStats, and mergeable latency histograms."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .exit_codes import ExitCode

STARTING, RUNNING, COMPLETED, KILLED, FAILED = "starting", "running", "completed", "killed", "failed"
FINAL_STATES = (COMPLETED, KILLED, FAILED)
EXIT_CODES = {COMPLETED: ExitCode.COMPLETED, FAILED: ExitCode.FAILED, KILLED: ExitCode.KILLED}

_GROWTH = math.log(1.05)  # 5% wide buckets


class LatencyHistogram:
    """Log-bucketed latency histogram (ms): O(1) record, mergeable across tasks and workers."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0

    def record(self, ms: float) -> None:
        b = int(math.log(ms + 0.001) / _GROWTH) if ms > 0 else -200
        self.buckets[b] = self.buckets.get(b, 0) + 1
        self.count += 1
        self.total += ms

    def merge(self, other: LatencyHistogram | dict) -> None:
        if isinstance(other, dict):
            other = LatencyHistogram.from_dict(other)
        for b, n in other.buckets.items():
            self.buckets[b] = self.buckets.get(b, 0) + n
        self.count += other.count
        self.total += other.total

    def percentile(self, p: float) -> float | None:
        if not self.count:
            return None
        rank = p / 100.0 * self.count
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= rank:
                return round(max(0.0, math.exp((b + 0.5) * _GROWTH) - 0.001), 3)
        return None

    @property
    def mean(self) -> float | None:
        return round(self.total / self.count, 3) if self.count else None

    def to_dict(self) -> dict:
        return {"b": [[k, v] for k, v in self.buckets.items()], "n": self.count, "t": self.total}

    @classmethod
    def from_dict(cls, d: dict) -> LatencyHistogram:
        h = cls()
        h.buckets = {int(k): int(v) for k, v in d.get("b", [])}
        h.count = int(d.get("n", 0))
        h.total = float(d.get("t", 0.0))
        return h


# late: a windowed bolt's tuples that arrived at or behind its watermark (to its late tuple
# stream, or dropped); dropped: acked without being evaluated in any window.
COUNTERS = ("emitted", "acked", "failed", "replayed", "executed", "timed_out", "late", "dropped")


@dataclass
class ComponentStats:
    """Per-component figures; latencies in ms (mean; percentiles alongside)."""

    emitted: int = 0
    acked: int = 0
    failed: int = 0
    replayed: int = 0
    executed: int = 0
    timed_out: int = 0
    late: int = 0
    dropped: int = 0
    execute_latency_ms: float | None = None
    complete_latency_ms: float | None = None
    complete_latency_p50_ms: float | None = None
    complete_latency_p99_ms: float | None = None
    tasks: int = 0
    queue_depth: int = 0
    capacity: float | None = None  # Storm's capacity over the last stats interval, max over the tasks (bolts)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RunStatus:
    name: str
    state: str
    error: str | None = None
    components: dict[str, ComponentStats] = field(default_factory=dict)
    system_components: dict[str, ComponentStats] = field(default_factory=dict)
    restarts: int = 0
    errors: list[dict] = field(default_factory=list)  # last errors: component, task, traceback
    uptime_secs: float = 0.0
    paused: bool = False  # the spouts are deactivated (topology pause); the run is still running
    workers: int = 0
    parallelism: dict[str, int] = field(default_factory=dict)  # user component -> tasks

    @property
    def done(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_CODES.get(self.state, ExitCode.UNFINISHED)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "state": self.state, "error": self.error, "restarts": self.restarts,
            "uptime_secs": self.uptime_secs, "paused": self.paused, "workers": self.workers,
            "parallelism": dict(self.parallelism),
            "components": {k: v.to_dict() for k, v in self.components.items()},
            "system_components": {k: v.to_dict() for k, v in self.system_components.items()},
            "errors": self.errors,
        }

    def table(self) -> str:
        rows: list[tuple[str, ...]] = [
            ("component", "tasks", "emitted", "acked", "failed", "replayed", "executed", "capacity",
             "complete p50/p99 ms")]
        for name, c in list(self.components.items()) + list(self.system_components.items()):
            lat = "-" if c.complete_latency_p50_ms is None else f"{c.complete_latency_p50_ms}/{c.complete_latency_p99_ms}"
            rows.append((name, str(c.tasks), str(c.emitted), str(c.acked), str(c.failed), str(c.replayed),
                         str(c.executed), "-" if c.capacity is None else f"{c.capacity:.3f}", lat))
        windowed = [(name, c) for name, c in self.components.items() if c.late or c.dropped]
        if windowed:  # windowed bolts' late and dropped tuples: only when there are any
            rows = [(*r, "late", "dropped") if i == 0 else (*r, "", "") for i, r in enumerate(rows)]
            index = {name: i + 1 for i, name in enumerate(list(self.components) + list(self.system_components))}
            for name, c in windowed:
                i = index[name]
                rows[i] = (*rows[i][:-2], str(c.late), str(c.dropped))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows)
