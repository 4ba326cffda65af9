"""What a worker reports about itself: the probe reply that tells the supervisor whether a
bounded run is done, and the periodic stats snapshot. Read from the executors, once per probe
or stats interval (never per tuple)."""

from __future__ import annotations

import os
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


def stats_snapshot(groups: Iterable[Mapping[int, Any]], bolts: Mapping[int, BoltExecutor], queue: Any,
                   extra: dict[str, Any]) -> dict:
    """Per-task counters (windowed bolts add their late and dropped tuples), the input queue's
    depth per task, and the worker's own figures in ``extra``."""
    tasks: dict[int, dict] = {}
    for group in groups:
        for task, ex in group.items():
            tasks[task] = ex.stats.to_dict()
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
