"""What an executor may ask of its worker: the whole surface, in one place.

Executors never touch the ``Worker``; they hold a ``WorkerPort``. Tuples leave through
``deliver``; acker messages are appended to the port's buffers, which the worker drains and
routes at every flush (XOR-combined per root in ``acks``: one message per root per flush).
The buffers are plain attributes, not methods, because executors write them once per tuple.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Deliver = Callable[[int, list, Any, int, "dict | None"], None]


class WorkerPort:
    __slots__ = ("deliver", "enqueue", "record_error", "run_off_loop", "barrier_done", "exactly_once_failure",
                 "preferred_acker_slot", "fail_run", "lineage_failed", "n_ackers", "streams", "exactly_once",
                 "acks", "fails", "resets", "inits")

    def __init__(self, *, deliver: Deliver, enqueue: Callable[[Any, Any], None],
                 record_error: Callable[[str, int, str, str], None],
                 run_off_loop: Callable[[int, Callable[[], Any], Callable[[Any, BaseException | None], None]], None],
                 barrier_done: Callable[[int, int], None], exactly_once_failure: Callable[[str], None],
                 preferred_acker_slot: Callable[[], int], n_ackers: int, streams: list, exactly_once: bool,
                 fail_run: Callable[[str, int, str], None] | None = None,
                 lineage_failed: Callable[[int, int], None] | None = None) -> None:
        self.deliver = deliver  # (task, values, stream info, source task, anchors or None)
        self.enqueue = enqueue  # (executor, tuple): run it on this worker's loop (tick tuples)
        self.record_error = record_error  # (component, task, text, traceback): reported to the supervisor
        self.run_off_loop = run_off_loop  # (task, fn, on_done): fn on the task's thread, on_done on the loop
        self.barrier_done = barrier_done  # (spout task, txid): exactly-once barrier tree completed
        self.exactly_once_failure = exactly_once_failure  # (reason): roll every task back
        self.preferred_acker_slot = preferred_acker_slot  # () -> acker index a spout's roots should map to
        self.fail_run = fail_run  # (component, task, error): end the whole run as failed (no retry can help)
        self.lineage_failed = lineage_failed  # (spout task, root): exactly-once, a bolt failed that root's tuple
        self.n_ackers = n_ackers
        self.streams = streams  # the plan's StreamInfo list, by sid
        self.exactly_once = exactly_once
        self.acks: dict[int, int] = {}  # root -> XOR of acked edges and new edges
        self.fails: list[int] = []  # roots
        self.resets: list[int] = []  # roots whose timeout restarts
        self.inits: list[tuple[int, int, int]] = []  # (root, initial XOR, spout task)
