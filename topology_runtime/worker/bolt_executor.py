"""The bolt executor: the collector a bolt calls (emit, ack, fail, emitters for bulk emits, work
off the loop) and the execution of its input tuples, with BasicBolt's automatic acking.
Checkpoint tuples go to ``checkpoint_handler`` (checkpoints.py), which may wrap ``process``.

In exactly-once mode the ackers track barriers only: a data tuple carries its spout root
unchanged (reliability/lineage.py), an ack only counts, and a fail goes straight to the spout
task that emitted the root, which names the entry and asks for the rollback."""

from __future__ import annotations

import time
from collections.abc import Callable
from random import getrandbits
from typing import Any

from ..api.components import DEFAULT_STREAM, TICK_INFO, FailedException, Tuple
from ..reliability.lineage import spout_task_of
from ..transport.wire import INT_MAX, INT_MIN, check_values
from .executor_base import BaseExecutor, EmitError
from .port import WorkerPort
from .routing import Route, row_picker

_SAMPLE_MASK = 31  # time one execute in 32 (Storm samples too)


def _ignore_ack(tup: Tuple) -> None:
    pass


def _merged_roots(anchors: Any) -> dict | None:
    """Exactly-once: the spout roots of several input tuples, as one output's lineage."""
    out: dict = {}
    for a in anchors:
        if a.anchors:
            out.update(a.anchors)
    return out or None


class BoltExecutor(BaseExecutor):
    """Runs one bolt task: binds the collector on the instance and executes its input tuples."""

    def __init__(self, port: WorkerPort, task: int, component: str, instance: Any, routes: dict[str, Route], basic: bool) -> None:
        super().__init__(port, task, component, instance, routes)
        self.basic = basic
        self.current: Tuple | None = None
        # What runs this task's checkpoint tuples (the worker queues them to it): its
        # checkpointing or barrier alignment, else the task itself.
        self.checkpoint_handler: Any = self
        self.tracking = port.n_ackers > 0
        self._execute = instance.execute
        # What an input's ack and fail do: acker trees, or (exactly-once) lineage only.
        self._ack_in, self._fail_in, reset = self.ack, self.fail, self.reset_timeout
        self.ack_counts_only = port.exactly_once
        # The send an emit ends in, kept on the instance (tuple sampling swaps it and back, and
        # says so in ``send_wrapped``: a plain attribute, cheaper a tuple than comparing sends).
        self._send = self._send_lineage if port.exactly_once else self._send  # type: ignore[method-assign]
        self.send_wrapped = False
        self.emit = self._one_frame_emit()  # type: ignore[method-assign]
        if port.exactly_once:
            self._ack_in, self._fail_in, reset = self._count_ack, self._fail_lineage, _ignore_ack
        # Bind the collector methods on the instance: user calls skip a frame.
        instance.emit = self.emit
        instance.emit_direct = self.emit_direct
        instance.emitter = self.emitter
        instance.router = self.router
        instance.row_router = self.row_router
        instance.chunk_emitter = self.chunk_emitter
        # A BasicBolt's input is acked by the runtime after execute; an explicit ack on top would
        # XOR the same edge twice and the tree would never complete, so it is a no-op there.
        instance.ack = _ignore_ack if basic else self._ack_in
        instance.fail = self._fail_in
        instance.reset_timeout = reset
        instance.run_off_loop = self.run_off_loop
        instance.report_error = self.report_error  # for errors caught by the bolt itself (window evaluations)

    # --- collector -------------------------------------------------------------------------
    def emit(self, values, anchors=None, stream: str = DEFAULT_STREAM) -> list[int]:
        """What ``_one_frame_emit`` does, in steps (the instance's ``emit`` is that closure)."""
        route = self.routes.get(stream)
        if route is None or route.direct:
            route = self._route(stream, False)
        values = check_values(values, route.fields, self.component, stream)
        targets = route.targets(values)
        self._send(route, values, targets, anchors)
        return targets

    def _one_frame_emit(self) -> Callable[..., list[int]]:
        """``emit``, its common cases in one frame: the scalar check and the send (lineage, or one
        anchor in one tree) inline, two calls fewer a tuple. Anything else takes the full check
        or ``_send``, and so does every emit while tuple sampling wraps ``_send``."""
        me, stats, deliver, route_of, merge = self.task, self.stats, self.port.deliver, self._route, _merged_roots
        lineage, tracking = self.port.exactly_once, self.tracking

        def emit(values, anchors=None, stream: str = DEFAULT_STREAM) -> list[int]:
            route = self.routes.get(stream)
            if route is None or route.direct:
                route = route_of(stream, False)  # raises, naming the fault
            fields = route.fields
            if type(values) is list and len(values) == len(fields):
                for v in values:
                    t = type(v)
                    if t is str or t is float or t is bool or v is None or t is bytes or (
                            t is int and INT_MIN <= v <= INT_MAX):
                        continue
                    values = check_values(values, fields, self.component, stream)
                    break
            else:
                values = check_values(values, fields, self.component, stream)
            targets = route.targets(values)
            if self.send_wrapped:  # sampled: through the wrapper, which then sends as ours
                self._send(route, values, targets, anchors)
                return targets
            if anchors is None:
                anchors = self.current  # BasicBolt: auto-anchor to the input
            info = route.info
            if lineage:
                if anchors is None:
                    out = None
                elif type(anchors) is Tuple:
                    out = anchors.anchors or None
                else:
                    out = merge(anchors)
                for t in targets:
                    deliver(t, values, info, me, out)
            elif anchors is None or not tracking:
                for t in targets:
                    deliver(t, values, info, me, None)
            elif type(anchors) is Tuple and anchors.anchors and len(anchors.anchors) == 1:
                (root,) = anchors.anchors  # the common case: one anchor in one tree
                for t in targets:
                    edge = getrandbits(64)
                    anchors.out_ack_val ^= edge
                    deliver(t, values, info, me, {root: edge})
            else:
                self._send(route, values, targets, anchors)
                return targets
            stats.emitted += 1
            return targets
        return emit

    def emitter(self, stream: str = DEFAULT_STREAM) -> Callable[[list], list[int]]:
        """``emit(values)`` for unanchored tuples on one stream, its route resolved once: for
        a bolt emitting thousands of tuples in one execute (a transactional emitter's batch).
        Same checks and routing as ``emit``, two calls fewer per tuple."""
        route = self._route(stream, False)
        fields, info, pick, task, component = route.fields, route.info, route.targets, self.task, self.component
        deliver, stats = self.port.deliver, self.stats

        def emit(values) -> list[int]:
            values = check_values(values, fields, component, stream)
            targets = pick(values)
            for t in targets:
                deliver(t, values, info, task, None)
            stats.emitted += 1
            return targets
        return emit

    def router(self, stream: str = DEFAULT_STREAM) -> Callable[[list], list[int]]:
        """``targets(values)``: the tasks an emit of ``values`` on ``stream`` would go to, with the
        same checks as ``emit``, sending nothing. For a bolt that groups many tuples per target and
        sends each group as one tuple (a transactional batch's rows: see ``chunk_emitter``)."""
        route = self._route(stream, False)
        fields, pick, component = route.fields, route.targets, self.component

        def targets(values) -> list[int]:
            return pick(check_values(values, fields, component, stream))
        return targets

    def row_router(self, stream: str, head: list) -> Callable[[Any], list[int]]:
        """``targets(row)``: ``router(stream)`` for the values ``[head, *row]``, ``head`` checked
        once here instead of once per row."""
        route = self._route(stream, False)
        fields, pick, component = route.fields, route.targets, self.component
        check_values([head, *([None] * (len(fields) - 1))], fields, component, stream)
        n = len(fields) - 1
        by_row = row_picker(pick, 1)  # a fields grouping on a key in the row: no [head, *row]

        def targets(row) -> list[int]:
            if len(row) == n:  # scalars pass here; anything else gets check_values' full check and message
                for v in row:
                    t = type(v)
                    if t is str or t is float or t is bool or v is None or t is bytes:
                        continue
                    if t is int and INT_MIN <= v <= INT_MAX:
                        continue
                    break
                else:
                    return by_row(row) if by_row is not None else pick([head, *row])
            return pick(check_values([head, *row], fields, component, stream))
        return targets

    def chunk_emitter(self, stream: str) -> Callable[[int, list, list], None]:
        """``emit(task, head, rows)`` on a direct ``stream`` of fields ``[head, rows]``, unanchored:
        many tuples as one. Each row was checked by ``router`` and ``head`` must be a short flat
        list (a transactional attempt), so the chunk is not walked again here."""
        route = self._route(stream, True)
        info, subscribers, deliver, stats, me = route.info, route.direct_targets, self.port.deliver, self.stats, self.task
        if not info.chunk:
            raise EmitError(f"component {self.component!r} stream {stream!r}: not a chunk stream (declare it "
                            f"with Stream([head, rows], direct=True, chunk=True); it declares {route.fields})")

        def emit(task: int, head: list, rows: list) -> None:
            if task not in subscribers:
                self._direct_target(route, task, stream)  # raises, naming the subscribers
            stats.emitted += len(rows)  # the user's tuples, as if emitted one by one
            deliver(task, [head, rows], info, me, None)
        return emit

    def emit_direct(self, task: int, values, anchors=None, stream: str = DEFAULT_STREAM) -> list[int]:
        route = self._route(stream, True)
        targets = self._direct_target(route, task, stream)
        values = check_values(values, route.fields, self.component, stream)
        self._send(route, values, targets, anchors)
        return targets

    def _send_lineage(self, route: Route, values: list, targets: list[int], anchors) -> None:
        """Exactly-once data: the output carries its inputs' spout roots as they are (one shared
        dict for a single anchor), no edges, nothing for an acker."""
        self.stats.emitted += 1
        deliver = self.port.deliver
        info = route.info
        if anchors is None:
            anchors = self.current
        if anchors is None:
            out = None
        elif type(anchors) is Tuple:
            out = anchors.anchors or None
        else:
            out = _merged_roots(anchors)
        for t in targets:
            deliver(t, values, info, self.task, out)

    def _count_ack(self, tup: Tuple) -> None:
        self.stats.acked += 1

    def _fail_lineage(self, tup: Tuple) -> None:
        """Exactly-once: the spout task of each root is told (it names the entry, counts a poison
        record's failure, and asks for the rollback); a tuple with no root rolls back at once."""
        self.stats.failed += 1
        am = tup.anchors
        if am:
            lineage_failed = self.port.lineage_failed
            for r in am:
                lineage_failed(spout_task_of(r), r)
        else:
            self.port.exactly_once_failure(f"{self.component}[{self.task}]: tuple {tup!r:.100} failed")

    def _send(self, route: Route, values: list, targets: list[int], anchors) -> None:
        self.stats.emitted += 1
        deliver = self.port.deliver
        info = route.info
        if anchors is None:
            anchors = self.current  # BasicBolt: auto-anchor to the input
        if anchors is None or not self.tracking:
            for t in targets:
                deliver(t, values, info, self.task, None)
            return
        if type(anchors) is Tuple:
            am = anchors.anchors
            if not am:
                for t in targets:
                    deliver(t, values, info, self.task, None)
                return
            if len(am) == 1:  # the common case: one anchor in one tree
                (root,) = am
                for t in targets:
                    edge = getrandbits(64)
                    anchors.out_ack_val ^= edge
                    deliver(t, values, info, self.task, {root: edge})
                return
            anchors = (anchors,)
        elif type(anchors) is not list and type(anchors) is not tuple:
            anchors = list(anchors)  # an iterator would be used up by the first target
        for t in targets:
            out: dict | None = None
            for a in anchors:
                am = a.anchors
                if am:
                    edge = getrandbits(64)
                    a.out_ack_val ^= edge
                    if out is None:
                        out = {}
                    for r in am:
                        out[r] = out.get(r, 0) ^ edge
            deliver(t, values, info, self.task, out)

    _send_tracked = _send  # barriers in exactly-once mode: acker trees even where data has none

    def ack(self, tup: Tuple) -> None:
        am = tup.anchors
        if am:
            buf = self.port.acks
            oav = tup.out_ack_val
            for r, i in am.items():
                buf[r] = buf.get(r, 0) ^ i ^ oav
        self.stats.acked += 1

    def fail(self, tup: Tuple) -> None:
        am = tup.anchors
        if am:
            self.port.fails.extend(am)
        self.stats.failed += 1

    def reset_timeout(self, tup: Tuple) -> None:
        am = tup.anchors
        if am:
            self.port.resets.extend(am)

    def run_off_loop(self, fn: Callable[[], Any], on_done: Callable[[Any, BaseException | None], None]) -> None:
        """Run the blocking ``fn()`` on this task's own thread, one call at a time in submission
        order; ``on_done(result, error)`` runs afterwards on the loop thread, where emit, ack and
        fail may be called. What ``on_done`` raises is reported like an error in execute."""
        def done(result: Any, error: BaseException | None) -> None:
            try:
                on_done(result, error)
            except Exception as e:  # noqa: BLE001 - a user bug fails what on_done failed, the worker goes on
                self.report_error(f"{getattr(fn, '__qualname__', 'call')}() off the loop", e)

        self.port.run_off_loop(self.task, fn, done)

    # --- execution ---------------------------------------------------------------------------
    def process(self, tup: Tuple) -> None:
        stats = self.stats
        stats.executed += 1
        sample = not (stats.executed & _SAMPLE_MASK)
        if sample:
            t0 = time.perf_counter()
        if self.basic:
            self.current = tup
            try:
                self._execute(tup)
            except FailedException:
                self._fail_in(tup)
            except Exception as e:  # noqa: BLE001 - a user bug fails the tuple, the worker goes on
                self.report_error(f"execute({tup!r:.200})", e)
                self._fail_in(tup)
            else:
                # ``_count_ack`` (exactly-once) or ``ack``, inline: one call fewer a tuple
                if not self.ack_counts_only and (am := tup.anchors):
                    buf = self.port.acks
                    oav = tup.out_ack_val
                    for r, i in am.items():
                        buf[r] = buf.get(r, 0) ^ i ^ oav
                stats.acked += 1
            finally:
                self.current = None
        else:
            try:
                self._execute(tup)
            except Exception as e:  # noqa: BLE001
                self.report_error(f"execute({tup!r:.200})", e)
                self._fail_in(tup)
        if sample:
            stats.execute.record((time.perf_counter() - t0) * 1000.0)

    def tick(self, freq: float) -> None:
        self.port.enqueue(_TickCall(self), Tuple([freq], TICK_INFO, -1, None))


class _TickCall:
    """A queued tick tuple's executor: a tick is not topology work, so it is kept out of
    ``executed``, which the supervisor compares between probes to see a run settle (ticks never
    would). Taken out in the same call that counts it in, and only if it was counted: a probe
    never sees a tick in the count, nor a count below what was executed."""

    __slots__ = ("ex", "task")

    def __init__(self, ex: BoltExecutor) -> None:
        self.ex = ex
        self.task = ex.task

    def process(self, tup: Tuple) -> None:
        stats = self.ex.stats
        before = stats.executed
        try:
            self.ex.process(tup)
        finally:
            if stats.executed > before:  # a tick held (a stateful bolt before its state) counted nothing
                stats.executed -= 1


