"""CoordinatedBolt's tracking (Storm's coordination/CoordinatedBolt.java), without I/O.

Per batch/request id: how many tuples this task emitted to each downstream task, how many it
received, and the counts its upstream tasks reported on the direct coordination stream. The
task is finished for an id when every upstream task reported, the received count matches what
they said they sent, and (with an id stream) the id tuple arrived. The executor then calls the
delegate's finish_batch, reports its own counts downstream, and acks the held tuples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..reliability.rotating_map import RotatingMap

REGULAR, COORD, ID = "regular", "coord", "id"


@dataclass
class Tracking:
    report_count: int = 0
    expected: int = 0
    received: int = 0
    failed: bool = False
    received_id: bool = False
    finished: bool = False
    task_emitted: dict[int, int] = field(default_factory=dict)
    held: list = field(default_factory=list)  # coord (or id) tuples acked only when finished


@dataclass
class Finish:
    """What the executor must do now for one id: when ``finished``, call finish_batch (its
    emits still count), then send ``counts`` (read after it), ack ``ack``, and call
    ``tracker.done(id)``."""

    id: Any
    finished: bool = False
    ack: list = field(default_factory=list)
    fail: list = field(default_factory=list)
    tracking: Tracking | None = None
    out_tasks: list[int] = field(default_factory=list)

    @property
    def counts(self) -> dict[int, int]:
        emitted = self.tracking.task_emitted if self.tracking is not None else {}
        return {task: emitted.get(task, 0) for task in self.out_tasks}


NOTHING = Finish(None)  # shared "nothing to do" answer; never mutated by callers


class CoordinatedTracker:
    def __init__(self, num_source_reports: int, out_tasks: list[int], has_id_stream: bool = False,
                 timeout_buckets: int = 3) -> None:
        self.num_source_reports = num_source_reports
        self.out_tasks = list(out_tasks)
        self.has_id_stream = has_id_stream
        self.tracked = RotatingMap(timeout_buckets)
        self._finishing: dict[Any, Tracking] = {}

    def done(self, id_: Any) -> None:
        self._finishing.pop(id_, None)

    def _get(self, id_: Any) -> Tracking:
        t = self._finishing.get(id_)  # finish_batch is running: its emits still count
        if t is not None:
            return t
        t = self.tracked.get(id_)
        if t is None:
            t = Tracking(received_id=not self.has_id_stream)
            self.tracked.put(id_, t)
        return t

    def emitted(self, id_: Any, tasks: list[int]) -> None:
        t = self._get(id_)
        for task in tasks:
            t.task_emitted[task] = t.task_emitted.get(task, 0) + 1

    def emitted_counts(self, id_: Any, counts: dict[int, int]) -> None:
        """``emitted`` for many tuples at once: ``counts`` per target task."""
        if not counts:
            return
        emitted = self._get(id_).task_emitted
        for task, n in counts.items():
            emitted[task] = emitted.get(task, 0) + n

    def regular_acked(self, id_: Any) -> Finish:
        t = self._get(id_)
        t.received += 1
        if self.num_source_reports and t.received != t.expected and not t.failed:
            return NOTHING  # the per-tuple case: unfinished until received reaches expected
        return self._check(id_, t, REGULAR, None)

    def regular_failed(self, id_: Any) -> Finish:
        t = self._get(id_)
        t.failed = True
        return self._check(id_, t, REGULAR, None)

    def coord(self, id_: Any, count: int, tup: Any) -> Finish:
        t = self._get(id_)
        t.report_count += 1
        t.expected += count
        return self._check(id_, t, COORD, tup)

    def id_tuple(self, id_: Any, tup: Any) -> Finish:
        t = self._get(id_)
        t.received_id = True
        return self._check(id_, t, ID, tup)

    def finish_failed(self, id_: Any) -> Finish:
        """finish_batch raised FailedException: fail what was held."""
        t = self.tracked.remove(id_)
        return Finish(id_, fail=list(t.held) if t else [])

    def tick(self) -> list[Finish]:
        """Rotate; ids that timed out unfinished fail their held tuples."""
        out = []
        for id_, t in self.tracked.rotate().items():
            if not t.finished:
                out.append(Finish(id_, fail=list(t.held)))
        return out

    def _check(self, id_: Any, t: Tracking, kind: str, tup: Any) -> Finish:
        delayed = (kind == COORD and not self.has_id_stream) or (kind == ID and self.has_id_stream)
        if tup is not None and delayed:
            t.held.append(tup)
        f = Finish(id_)
        if t.failed:
            f.fail = list(t.held)
            self.tracked.remove(id_)
        elif t.received_id and (self.num_source_reports == 0 or (
                t.report_count == self.num_source_reports and t.expected == t.received)):
            f.finished = True
            f.tracking, f.out_tasks = t, self.out_tasks
            f.ack = list(t.held)
            t.finished = True
            self.tracked.remove(id_)
            self._finishing[id_] = t
        if tup is not None and not delayed:
            (f.fail if t.failed else f.ack).append(tup)
        return f
