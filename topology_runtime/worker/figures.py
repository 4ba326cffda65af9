"""What a worker reports about itself: the probe reply that tells the supervisor whether a
bounded run is done, and the periodic stats snapshot. Read from the executors, once per probe
or stats interval (never per tuple)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..transport.messages import ProbeReply
from .bolt_executor import BoltExecutor
from .spout_executor import SpoutExecutor


def probe_reply(index: int, incarnation: int, seq: int, *, idle: bool, spouts: Iterable[SpoutExecutor],
                bolts: Iterable[BoltExecutor], counters: list[int], cp_final_done: bool | None) -> ProbeReply:
    spouts = list(spouts)
    user = [s for s in spouts if not s.system]
    return ProbeReply(
        index, incarnation, seq,
        idle=idle,
        finished=all(s.finished or s.deactivated for s in user),
        input_done=all(s.finished or s.deactivated or s.input_finished for s in user),
        # The user spouts' trees: a checkpoint in flight (the checkpoint spout's) does not keep a
        # bounded run from ending or a rebalance from draining; their own rules cover it.
        pending=sum(len(s.pending) for s in user),
        counters=counters,
        held=windows_held(bolts),
        at_cap={s.component: s.max_pending for s in user
                if s.max_pending is not None and len(s.pending) >= s.max_pending},
        cp_final_done=cp_final_done,
    )


def windows_held(bolts: Iterable[BoltExecutor]) -> dict[str, int]:
    """Tuples held by windowed bolts, per component (only those holding any)."""
    held: dict[str, int] = {}
    for ex in bolts:
        n = getattr(ex.instance, "window_held", 0)
        if n:
            held[ex.component] = held.get(ex.component, 0) + n
    return held


class CapacityMeter:
    """Storm's capacity per bolt task: the share of the last interval it spent executing
    (tuples executed in it x their mean execute latency / the interval's length). Near 1: the
    task is the bottleneck. From the cumulative counters at each stats snapshot, never per tuple."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, int, int, float]] = {}  # task -> (time, executed, samples, sampled ms)

    def interval(self, task: int, stats: Any, now: float) -> dict[str, Any]:
        """The task's figures over the interval since the last call: ``capacity`` and
        ``execute_interval`` ([timed executes, their total ms], which the supervisor sums over a
        component's tasks into its mean execute latency); {} on the first call."""
        h = stats.execute
        last = self._last.get(task)
        self._last[task] = (now, stats.executed, h.count, h.total)
        if last is None or now <= last[0]:
            return {}
        samples, sampled = h.count - last[2], h.total - last[3]
        # One execute in 32 is timed: an interval with none timed takes the run's mean so far.
        mean = sampled / samples if samples else (h.total / h.count if h.count else 0.0)
        return {"capacity": round(min(1.0, (stats.executed - last[1]) * mean / ((now - last[0]) * 1000.0)), 3),
                "execute_interval": [samples, round(sampled, 6)]}


class Backpressure:
    """How long this worker's spouts were held back because its outbound batches waited (over
    the peers' high-water mark or credit window): cumulative seconds, and whether they are now."""

    __slots__ = ("secs", "on", "_since")

    def __init__(self) -> None:
        self.secs, self.on, self._since = 0.0, False, 0.0

    def held(self, on: bool, now: float) -> None:
        if on and not self.on:
            self._since = now
        elif self.on and not on:
            self.secs += now - self._since
        self.on = on

    def figures(self, now: float) -> dict[str, Any]:
        return {"backpressure": self.on,
                "backpressure_secs": round(self.secs + (now - self._since if self.on else 0.0), 3)}


def stats_snapshot(groups: Iterable[Mapping[int, Any]], bolts: Mapping[int, BoltExecutor], queue: Any,
                   extra: dict[str, Any], meter: CapacityMeter | None = None) -> dict:
    """Per-task counters (windowed bolts add their late and dropped tuples; bolts their
    capacity), the input queue's depth per task, and the worker's own figures in ``extra``."""
    tasks: dict[int, dict] = {}
    for group in groups:
        for task, ex in group.items():
            tasks[task] = ex.stats.to_dict()
    if meter is not None:
        now = time.monotonic()
        for task, ex in bolts.items():
            tasks[task].update(meter.interval(task, ex.stats, now))
    for task, ex in bolts.items():
        window = getattr(ex.instance, "window_stats", None)
        if window:
            tasks[task].update(window)
    if queue:
        depth: dict[int, int] = {}
        for ex, _ in queue:
            depth[ex.task] = depth.get(ex.task, 0) + 1
        for task, n in depth.items():
            tasks[task]["queue"] = n
    return {"tasks": tasks, "queue": len(queue), "pid": os.getpid(), **extra}
