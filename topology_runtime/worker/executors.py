"""Executors: one per task. They implement the collectors users call (emit, ack, fail...)
and drive the reliability state machines; the Worker owns I/O and the loop."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from random import getrandbits
from typing import TYPE_CHECKING, Any

from ..api.components import DEFAULT_STREAM, TICK_INFO, FailedException, Tuple
from ..api.status import LatencyHistogram
from ..reliability import ACK, FAIL, Acker, AckOutcome, SpoutPending
from ..reliability.checkpointing import CHECKPOINT_STREAM, CheckpointBarrier, StatefulBoltMachine
from ..testing.faults import maybe_crash
from ..transport.wire import check_values
from .routing import Route

if TYPE_CHECKING:
    from .worker import Worker

_TWO64 = 2**64
_SAMPLE_MASK = 31  # time one execute in 32 (Storm samples too)


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
    def __init__(self, worker: Worker, task: int, component: str, instance: Any, routes: dict[str, Route]) -> None:
        self.worker = worker
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
        self.worker.record_error(self.component, self.task, f"{what}: {type(exc).__name__}: {exc}", tb)


def _ignore_ack(tup: Tuple) -> None:
    pass


class Barrier:
    """The msg id of an exactly-once barrier tuple."""

    __slots__ = ("txid",)

    def __init__(self, txid: int) -> None:
        self.txid = txid

    def __repr__(self) -> str:
        return f"Barrier({self.txid})"


class _AckBatch:
    __slots__ = ("xor", "count", "sealed")

    def __init__(self) -> None:
        self.xor: dict[int, int] = {}
        self.count = 0
        self.sealed = False


class BoltExecutor(BaseExecutor):
    def __init__(self, worker, task, component, instance, routes, basic: bool) -> None:
        super().__init__(worker, task, component, instance, routes)
        self.basic = basic
        self.current: Tuple | None = None
        self.tracking = worker.n_ackers > 0
        self._execute = instance.execute
        # Bind the collector methods on the instance: user calls skip a frame.
        instance.emit = self.emit
        instance.emit_direct = self.emit_direct
        instance.emitter = self.emitter
        instance.router = self.router
        instance.chunk_emitter = self.chunk_emitter
        # A BasicBolt's input is acked by the runtime after execute; an explicit ack on top would
        # XOR the same edge twice and the tree would never complete, so it is a no-op there.
        instance.ack = _ignore_ack if basic else self.ack
        instance.fail = self.fail
        instance.reset_timeout = self.reset_timeout
        instance.run_off_loop = self.run_off_loop
        self.machine: StatefulBoltMachine | None = None
        self._ack_batch: _AckBatch | None = None

    def enable_checkpointing(self, n_inputs: int, state: Any = None) -> None:
        """Checkpoint tuples are forwarded (every bolt) and drive the state (stateful bolts)."""
        self.barrier = CheckpointBarrier(n_inputs)
        self.cp_route = self.routes[CHECKPOINT_STREAM]
        self.cp_sids = {info.sid for info in self.worker.streams if info.stream == CHECKPOINT_STREAM}
        if state is not None:
            self.machine = StatefulBoltMachine(self.instance, state)
            self.instance.ack = self._held_ack  # acked for real only when the checkpoint commits
        self._plain_process = self.process
        self.process = self._process_with_checkpoints

    def enable_exactly_once(self, n_inputs: int, state: Any = None) -> None:
        """In-band barriers: hold each input channel from which barrier t arrived until it arrived
        on all, then prepare the state, forward the barrier (anchored to every copy) and go on."""
        self.cp_route = self.routes[CHECKPOINT_STREAM]
        self.cp_sids = {info.sid for info in self.worker.streams if info.stream == CHECKPOINT_STREAM}
        self.n_inputs = n_inputs
        self.blocked: set[int] = set()
        self.barrier_tups: list[Tuple] = []
        self.held_inputs: list[Tuple] = []
        self.eo_state = state
        if state is not None:
            self.instance.init_state(state)  # state restored by recovery before the workers started
        self._plain_process = self.process
        self.process = self._process_aligned

    def _process_aligned(self, tup: Tuple) -> None:
        if tup.info.sid in self.cp_sids:
            self.blocked.add(tup.source_task)
            self.barrier_tups.append(tup)
            if len(self.barrier_tups) == self.n_inputs:
                self._aligned(tup.values[0])
        elif tup.source_task in self.blocked:
            self.held_inputs.append(tup)
        else:
            self._plain_process(tup)

    def _aligned(self, txid: int) -> None:
        barriers, self.barrier_tups = self.barrier_tups, []
        try:
            if self.eo_state is not None:
                maybe_crash("prepare", txid)
                self.instance.pre_prepare(txid)
                self.eo_state.prepare_commit(txid)
        except Exception as e:  # noqa: BLE001 - failing the barrier rolls every task back
            self.report_error(f"prepare({txid})", e)
            for b in barriers:
                self.fail(b)
        else:
            values = [txid, "PREPARE"]
            self._send(self.cp_route, values, self.cp_route.targets(values), barriers)
            for b in barriers:
                BoltExecutor.ack(self, b)
        self.blocked.clear()
        held, self.held_inputs = self.held_inputs, []
        for t in held:
            self._process_aligned(t)

    def _held_ack(self, tup: Tuple) -> None:
        # Held until the commit that covers it, as one XOR per tree root rather than the tuple:
        # memory grows with the trees in flight, not with every tuple since the last commit.
        batch = self._ack_batch
        if batch is None or batch.sealed:
            batch = self._ack_batch = _AckBatch()
            self.machine.acked.append(batch)
        am = tup.anchors
        if am:
            xor = batch.xor
            oav = tup.out_ack_val
            for r, i in am.items():
                xor[r] = xor.get(r, 0) ^ i ^ oav
        batch.count += 1

    def _release(self, item, ok: bool) -> None:
        """Really ack (or fail) what a stateful bolt acked: a held batch, or a single tuple."""
        if isinstance(item, _AckBatch):
            if ok:
                buf = self.worker.ack_buf
                for r, v in item.xor.items():
                    buf[r] = buf.get(r, 0) ^ v
                self.stats.acked += item.count
            else:
                self.worker.fail_buf.extend(item.xor)
                self.stats.failed += item.count
        elif ok:
            BoltExecutor.ack(self, item)
        else:
            self.fail(item)

    def _process_with_checkpoints(self, tup: Tuple) -> None:
        if tup.info.sid in self.cp_sids:
            self._on_checkpoint(tup)
        elif self.machine is not None and not self.machine.initialized and not tup.is_tick():
            self.machine.pending_tuples.append(tup)  # before INITSTATE: held, not executed
        else:
            self._plain_process(tup)

    def _on_checkpoint(self, tup: Tuple) -> None:
        txid, action = tup.values
        verdict = self.barrier.arrive(txid, action)
        if verdict != "handle":
            BoltExecutor.ack(self, tup)
            return
        try:
            if self.machine is not None:
                if action == "PREPARE":
                    maybe_crash("prepare", txid)
                elif action == "COMMIT":
                    maybe_crash("between", txid)
                ok, to_ack, to_fail, replay = self.machine.handle(txid, action)
                if action == "COMMIT":
                    maybe_crash("commit", txid)
            else:
                ok, to_ack, to_fail, replay = True, [], [], []
        except Exception as e:  # noqa: BLE001 - the checkpoint fails; recovery follows
            self.report_error(f"checkpoint {action}({txid})", e)
            self.fail(tup)
            return
        if not ok:
            self.fail(tup)
            return
        for t in to_ack:
            self._release(t, True)
        for t in to_fail:
            self._release(t, False)
        if action == "PREPARE" and self._ack_batch is not None:
            self._ack_batch.sealed = True  # later acks belong to the next checkpoint
        self.barrier.handled(txid, action)
        values = [txid, action]
        self._send(self.cp_route, values, self.cp_route.targets(values), tup)
        BoltExecutor.ack(self, tup)
        for t in replay:
            self._plain_process(t)

    # --- collector -------------------------------------------------------------------------
    def emit(self, values, anchors=None, stream: str = DEFAULT_STREAM) -> list[int]:
        route = self._route(stream, False)
        values = check_values(values, route.fields, self.component, stream)
        targets = route.targets(values)
        self._send(route, values, targets, anchors)
        return targets

    def emitter(self, stream: str = DEFAULT_STREAM) -> Callable[[list], list[int]]:
        """``emit(values)`` for unanchored tuples on one stream, its route resolved once: for
        a bolt emitting thousands of tuples in one execute (a transactional emitter's batch).
        Same checks and routing as ``emit``, two calls fewer per tuple."""
        route = self._route(stream, False)
        fields, info, pick, task, component = route.fields, route.info, route.targets, self.task, self.component
        deliver, stats = self.worker.deliver, self.stats

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

    def chunk_emitter(self, stream: str) -> Callable[[int, list, list], None]:
        """``emit(task, head, rows)`` on a direct ``stream`` of fields ``[head, rows]``, unanchored:
        many tuples as one. Each row was checked by ``router`` and ``head`` must be a short flat
        list (a transactional attempt), so the chunk is not walked again here."""
        route = self._route(stream, True)
        info, subscribers, deliver, stats, me = route.info, route.direct_targets, self.worker.deliver, self.stats, self.task
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

    def _send(self, route: Route, values: list, targets: list[int], anchors) -> None:
        self.stats.emitted += 1
        deliver = self.worker.deliver
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

    def ack(self, tup: Tuple) -> None:
        am = tup.anchors
        if am:
            buf = self.worker.ack_buf
            oav = tup.out_ack_val
            for r, i in am.items():
                buf[r] = buf.get(r, 0) ^ i ^ oav
        self.stats.acked += 1

    def fail(self, tup: Tuple) -> None:
        am = tup.anchors
        if am:
            self.worker.fail_buf.extend(am)
        self.stats.failed += 1

    def reset_timeout(self, tup: Tuple) -> None:
        am = tup.anchors
        if am:
            self.worker.reset_buf.extend(am)

    def run_off_loop(self, fn: Callable[[], Any], on_done: Callable[[Any, BaseException | None], None]) -> None:
        """Run the blocking ``fn()`` on this task's own thread, one call at a time in submission
        order; ``on_done(result, error)`` runs afterwards on the loop thread, where emit, ack and
        fail may be called. What ``on_done`` raises is reported like an error in execute."""
        def done(result: Any, error: BaseException | None) -> None:
            try:
                on_done(result, error)
            except Exception as e:  # noqa: BLE001 - a user bug fails what on_done failed, the worker goes on
                self.report_error(f"{getattr(fn, '__qualname__', 'call')}() off the loop", e)

        self.worker.run_off_loop(self.task, fn, done)

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
                self.fail(tup)
            except Exception as e:  # noqa: BLE001 - a user bug fails the tuple, the worker goes on
                self.report_error(f"execute({tup!r:.200})", e)
                self.fail(tup)
            else:
                self.ack(tup)
            finally:
                self.current = None
        else:
            try:
                self._execute(tup)
            except Exception as e:  # noqa: BLE001
                self.report_error(f"execute({tup!r:.200})", e)
                self.fail(tup)
        if sample:
            stats.execute.record((time.perf_counter() - t0) * 1000.0)

    def tick(self, freq: float) -> None:
        self.worker.queue.append((self, Tuple([freq], TICK_INFO, -1, None)))


class SpoutExecutor(BaseExecutor):
    def __init__(self, worker, task, component, instance, routes, max_pending: int | None) -> None:
        super().__init__(worker, task, component, instance, routes)
        self.pending = SpoutPending()
        self.max_pending = max_pending if worker.n_ackers > 0 else None
        self.n_ackers = worker.n_ackers
        self.acker_slot = worker.preferred_acker_slot()
        self.finished = False
        self.deactivated = False
        self.system = component.startswith("$")  # $checkpointspout: does not count for completion
        self.failed_ids: set = set()
        self.next_tuple_errors = 0
        instance.emit = self.emit
        instance.emit_direct = self.emit_direct
        instance.finish = self.finish

    def emit(self, values, msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        route = self._route(stream, False)
        values = check_values(values, route.fields, self.component, stream)
        targets = route.targets(values)
        self._send(route, values, targets, msg_id)
        return targets

    def emit_direct(self, task: int, values, msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        route = self._route(stream, True)
        targets = self._direct_target(route, task, stream)
        values = check_values(values, route.fields, self.component, stream)
        self._send(route, values, targets, msg_id)
        return targets

    def finish(self) -> None:
        self.finished = True

    def emit_barrier(self, txid: int) -> None:
        """Exactly-once: the position is snapshotted (by the worker) and the barrier follows this
        task's data on every downstream channel; its tree completes once all bolts prepared."""
        route = self.routes[CHECKPOINT_STREAM]
        values = [txid, "PREPARE"]
        self._send(route, values, route.targets(values), Barrier(txid))
        self.stats.emitted -= 1  # system tuple: not part of the user's figures

    def _new_root(self) -> int:
        # Root ids are random 64-bit numbers; we pick the residue mod n_ackers so the tree's
        # acker lives in this worker when there is one (the init never crosses a process).
        n = self.n_ackers
        root = getrandbits(64)
        root += self.acker_slot - root % n
        if root >= _TWO64:
            root -= n
        return root

    def _send(self, route: Route, values: list, targets: list[int], msg_id: Any) -> None:
        stats = self.stats
        stats.emitted += 1
        w = self.worker
        deliver = w.deliver
        info = route.info
        if msg_id is None:
            for t in targets:
                deliver(t, values, info, self.task, None)
            return
        if self.failed_ids:
            try:
                if msg_id in self.failed_ids:
                    self.failed_ids.discard(msg_id)
                    stats.replayed += 1
            except TypeError:
                pass
        if self.n_ackers == 0:  # Storm: no ackers -> the spout's ack is called at emit
            for t in targets:
                deliver(t, values, info, self.task, None)
            stats.acked += 1
            self._callback(self.instance.ack, msg_id)
            return
        root = self._new_root()
        init_val = 0
        for t in targets:
            edge = getrandbits(64)
            init_val ^= edge
            deliver(t, values, info, self.task, {root: edge})
        self.pending.add(root, msg_id, time.perf_counter())
        w.init_buf.append((root, init_val, self.task))

    def _callback(self, fn, msg_id) -> None:
        try:
            fn(msg_id)
        except Exception as e:  # noqa: BLE001
            self.report_error(f"{fn.__name__}({msg_id!r:.100})", e)

    def can_emit(self) -> bool:
        if self.finished or self.deactivated:
            return False
        mp = self.max_pending
        return mp is None or len(self.pending) < mp

    def run_next_tuple(self, max_calls: int) -> int:
        """Call next_tuple up to max_calls times while it keeps emitting; return emits."""
        stats = self.stats
        start = stats.emitted
        nt = self.instance.next_tuple
        mp = self.max_pending
        pending = self.pending
        for _ in range(max_calls):
            before = stats.emitted
            try:
                nt()
            except Exception as e:  # noqa: BLE001
                self.next_tuple_errors += 1
                self.report_error("next_tuple()", e)
                break
            if stats.emitted == before or self.finished or (mp is not None and len(pending) >= mp):
                break
        return stats.emitted - start

    def on_outcome(self, kind: int, root: int) -> None:
        if kind == ACK:
            e = self.pending.complete(root)
            if e is None:
                return  # already timed out: ignored, as in Storm
            msg_id, t0 = e
            if type(msg_id) is Barrier:
                self.worker.barrier_done(self.task, msg_id.txid)
                return
            self.stats.acked += 1
            self.stats.complete.record((time.perf_counter() - t0) * 1000.0)
            self._callback(self.instance.ack, msg_id)
        elif kind == FAIL:
            e = self.pending.complete(root)
            if e is None:
                return
            self._failed(e[0])
        else:
            self.pending.reset(root)

    def _failed(self, msg_id) -> None:
        if self.worker.exactly_once:
            # No per-tuple replay: any failure rolls every task back to the last checkpoint.
            self.worker.exactly_once_failure(f"{self.component}[{self.task}]: tuple {msg_id!r:.60} failed or timed out")
            if type(msg_id) is Barrier:
                return
        self.stats.failed += 1
        try:
            self.failed_ids.add(msg_id)
        except TypeError:
            pass
        self._callback(self.instance.fail, msg_id)

    def timeout_tick(self) -> None:
        for msg_id, _t0 in self.pending.tick():
            self.stats.timed_out += 1
            self._failed(msg_id)


class AckerExecutor:
    """Hosts one Acker state machine; outcomes go to the owning spout task."""

    component = "__acker"

    def __init__(self, task: int) -> None:
        self.task = task
        self.acker = Acker()
        self.stats = TaskStats()

    def apply_init(self, root: int, val: int, spout_task: int) -> AckOutcome | None:
        self.stats.executed += 1
        return self.acker.init(root, val, spout_task)

    def apply_ack(self, root: int, val: int) -> AckOutcome | None:
        self.stats.executed += 1
        return self.acker.ack(root, val)

    def apply_fail(self, root: int) -> AckOutcome | None:
        self.stats.executed += 1
        return self.acker.fail(root)

    def apply_reset(self, root: int) -> AckOutcome | None:
        self.stats.executed += 1
        return self.acker.reset_timeout(root)

    def count(self, outcome: AckOutcome | None) -> None:
        if outcome is not None:
            if outcome.kind == ACK:
                self.stats.acked += 1
            elif outcome.kind == FAIL:
                self.stats.failed += 1
