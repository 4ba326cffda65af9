"""The spout executor: the collector a spout calls (emit with a message id, finish), calling
``next_tuple`` within ``max.spout.pending``, and the spout's side of acking: pending roots,
outcomes from the ackers, timeouts, replay bookkeeping. In exactly-once mode a data tuple is
not tracked by the ackers: its spout's lineage (reliability/lineage.py) records it until the
checkpoint after it commits."""

from __future__ import annotations

import time
from random import getrandbits
from typing import Any

from state.checkpoint_state import PREPARE

from ..api.components import DEFAULT_STREAM, Spout
from ..reliability import ACK, FAIL, SpoutPending
from ..reliability.checkpointing import CHECKPOINT_STREAM
from ..reliability.lineage import SpoutLineage
from ..reliability.spout_pending import PendingBudget
from ..transport.wire import check_values
from .executor_base import BaseExecutor
from .port import WorkerPort
from .routing import Route

_TWO64 = 2**64
_default_ack = Spout.ack


class Barrier:
    """The msg id of an exactly-once barrier tuple."""

    __slots__ = ("txid",)

    def __init__(self, txid: int) -> None:
        self.txid = txid

    def __repr__(self) -> str:
        return f"Barrier({self.txid})"


class SpoutExecutor(BaseExecutor):
    """Runs one spout task: binds the collector on the instance, tracks what it emitted with a
    message id until the ackers decide, and calls back ``ack``/``fail``."""

    def __init__(self, port: WorkerPort, task: int, component: str, instance: Any, routes: dict[str, Route],
                 max_pending: int | None, max_pending_bytes: int | None = None) -> None:
        super().__init__(port, task, component, instance, routes)
        self.pending = SpoutPending()
        self.n_ackers = port.n_ackers
        self.acker_slot = port.preferred_acker_slot()
        self.finished = False
        self.input_finished = False  # nothing new to emit; pending trees may still replay
        self.deactivated = False  # drained: no more next_tuple for this run
        self.paused = False  # paused by the operator: no next_tuple until resumed
        self.system = component.startswith("$")  # $checkpointspout: does not count for completion
        # Exactly-once: data tuples are proven complete by the barrier after them, not by acker
        # trees; what is emitted and not yet committed is this task's pending (the bounds apply
        # to it, and it is what a rollback replays).
        self.lineage = SpoutLineage(task) if port.exactly_once and not self.system else None
        self.outstanding: SpoutPending | SpoutLineage = self.lineage if self.lineage is not None else self.pending
        # No ackers: nothing is pending (acked at emit), so neither bound applies.
        self.budget = PendingBudget(max_pending, max_pending_bytes) \
            if port.n_ackers > 0 or self.lineage is not None else None
        self.failed_ids: set = set()
        self.next_tuple_errors = 0
        instance.emit = self.emit
        instance.emit_direct = self.emit_direct
        instance.finish = self.finish
        instance.finish_input = self.finish_input
        instance.fail_run = self.fail_run

    def emit(self, values, msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        route = self.routes.get(stream)
        if route is None or route.direct:  # the per-tuple path skips a call; _route raises, naming the fault
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

    def finish_input(self) -> None:
        """No new tuples from this task (replays of failed ones may follow): a bounded run's
        windows get end of input once every spout task has said so or finished."""
        self.input_finished = True

    def fail_run(self, error: str) -> None:
        """End the whole run as failed with ``error`` (for a system spout that knows no retry can
        help, e.g. a transactional coordinator past its attempts); this task emits no more."""
        self.deactivated = True
        if self.port.fail_run is not None:
            self.port.fail_run(self.component, self.task, error)

    def emit_barrier(self, txid: int) -> None:
        """Exactly-once: the position is snapshotted (by the worker) and the barrier follows this
        task's data on every downstream channel; its tree completes once all bolts prepared."""
        if self.lineage is not None:
            self.lineage.barrier(txid)
        route = self.routes[CHECKPOINT_STREAM]
        values = [txid, PREPARE]
        self._send(route, values, route.targets(values), Barrier(txid))
        self.stats.emitted -= 1  # system tuple: not part of the user's figures

    def committed(self, txid: int) -> None:
        """Exactly-once: checkpoint ``txid`` committed, so every tuple emitted before its barrier
        is processed for good: the spout's ``ack`` for each (skipped when it keeps the default)."""
        done = self.lineage.committed(txid) if self.lineage is not None else []
        if not done:
            return
        self.stats.acked += len(done)
        if type(self.instance).ack is not _default_ack:
            for msg_id in done:
                self._callback(self.instance.ack, msg_id)

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
        deliver = self.port.deliver
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
        lineage = self.lineage
        if lineage is not None and type(msg_id) is not Barrier:  # exactly-once data: no acker, no edges
            anchors = {lineage.add(msg_id): 0}
            for t in targets:
                deliver(t, values, info, self.task, anchors)
        elif self.n_ackers == 0:  # Storm: no ackers -> the spout's ack is called at emit
            for t in targets:
                deliver(t, values, info, self.task, None)
            stats.acked += 1
            self._callback(self.instance.ack, msg_id)
            return
        else:
            root = self._new_root()
            init_val = 0
            for t in targets:
                edge = getrandbits(64)
                init_val ^= edge
                deliver(t, values, info, self.task, {root: edge})
            self.pending.add(root, msg_id, time.perf_counter())
            self.port.inits.append((root, init_val, self.task))
        budget = self.budget  # both pendings: the tracked trees, or the uncommitted emits
        if budget is not None:
            budget.countdown -= 1
            if budget.countdown <= 0:
                budget.observe(values)

    def _callback(self, fn, msg_id) -> None:
        try:
            fn(msg_id)
        except Exception as e:  # noqa: BLE001
            self.report_error(f"{fn.__name__}({msg_id!r:.100})", e)

    def set_paused(self, paused: bool) -> None:
        """Storm's deactivate/activate: the spout's callback is told, next_tuple stops or starts
        again; acks, fails and timeouts of what it has pending go on either way."""
        if paused == self.paused:
            return
        self.paused = paused
        self.call_activation(not paused)

    def call_activation(self, active: bool) -> None:
        fn = self.instance.activate if active else self.instance.deactivate
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the user's callback: reported, the spout goes on
            self.report_error(f"{'activate' if active else 'deactivate'}()", e)

    def can_emit(self) -> bool:
        if self.finished or self.deactivated or self.paused:
            return False
        mp = self.max_pending
        return mp is None or len(self.outstanding) < mp

    @property
    def max_pending(self) -> int | None:
        """Trees this task may have pending now (count and byte bounds), None: unbounded."""
        return self.budget.cap if self.budget is not None else None

    def run_next_tuple(self, max_calls: int, max_secs: float = 0.001) -> int:
        """Call next_tuple up to max_calls times while it keeps emitting, for at most about
        ``max_secs`` (then the worker flushes what it emitted); return emits."""
        stats = self.stats
        start = stats.emitted
        nt = self.instance.next_tuple
        budget = self.budget
        pending = self.outstanding
        clock = time.perf_counter  # vDSO clock read, no system call
        deadline = clock() + max_secs
        for _ in range(max_calls):
            before = stats.emitted
            try:
                nt()
            except Exception as e:  # noqa: BLE001
                self.next_tuple_errors += 1
                self.report_error("next_tuple()", e)
                break
            if stats.emitted == before or self.finished or (
                    budget is not None and budget.cap is not None and len(pending) >= budget.cap) \
                    or clock() >= deadline:
                break
        return stats.emitted - start

    def on_outcome(self, kind: int, root: int) -> None:
        if kind == ACK:
            e = self.pending.complete(root)
            if e is None:
                return  # already timed out: ignored, as in Storm
            msg_id, t0 = e
            if type(msg_id) is Barrier:
                self.port.barrier_done(self.task, msg_id.txid)
                return
            self.stats.acked += 1
            self.stats.complete.record((time.perf_counter() - t0) * 1000.0)
            self._callback(self.instance.ack, msg_id)
        elif kind == FAIL:
            e = self.pending.complete(root)
            if e is not None:
                self._failed(e[0])
            elif self.lineage is not None:  # a bolt failed a data tuple of this task's
                msg_id = self.lineage.msg_id(root)
                if SpoutLineage.known(msg_id):
                    self._failed(msg_id)
                else:  # committed already, or an earlier incarnation's: roll back all the same
                    self.port.exactly_once_failure(f"{self.component}[{self.task}]: a tuple failed")
        else:
            self.pending.reset(root)

    def _failed(self, msg_id) -> None:
        barrier = type(msg_id) is Barrier
        if not barrier:
            self.stats.failed += 1
            try:
                self.failed_ids.add(msg_id)
            except TypeError:
                pass
            # Before the rollback is asked for: the spout may record the failure (a poison
            # entry's count) where the rollback cannot undo it.
            self._callback(self.instance.fail, msg_id)
        if self.port.exactly_once:
            # No per-tuple replay: any failure rolls every task back to the last checkpoint.
            self.port.exactly_once_failure(f"{self.component}[{self.task}]: tuple {msg_id!r:.60} failed or timed out")

    def timeout_tick(self) -> None:
        for msg_id, _t0 in self.pending.tick():
            self.stats.timed_out += 1
            self._failed(msg_id)


