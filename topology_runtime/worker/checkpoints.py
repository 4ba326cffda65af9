"""Checkpoints and barriers on the worker's side: the one home of both modes.

Storm's mode (``StormCheckpointing``): ``$checkpoint`` tuples from ``$checkpointspout`` reach
every bolt beside its data; a bolt acts once the checkpoint came from all its input tasks
(``CheckpointBarrier``), a stateful bolt's state follows ``StatefulBoltMachine`` and its input
is acked for real only at the COMMIT that covers it.

Exactly-once mode (``BarrierAlignment`` per bolt, ``ExactlyOnceWorker`` per worker): the
supervisor asks spouts to snapshot and emit barrier t after their data; a bolt holds back
each input channel whose barrier arrived until it arrived on all, prepares its state and
forwards the barrier; the supervisor then has every worker commit t.

Both wrap the executor's ``process``; the executors themselves know nothing of checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from state.checkpoint_state import COMMIT, PREPARE

from ..api.components import Tuple
from ..reliability.checkpointing import CHECKPOINT_STREAM, CheckpointBarrier, StatefulBoltMachine
from ..testing.faults import maybe_crash
from .bolt_executor import BoltExecutor
from .spout_executor import SpoutExecutor


def _checkpoint_sids(ex: BoltExecutor) -> set[int]:
    return {info.sid for info in ex.port.streams if info.stream == CHECKPOINT_STREAM}


def _system(ex: BoltExecutor, action: Any, tup: Tuple) -> None:
    """Ack or fail a checkpoint tuple without counting it among the component's own figures."""
    stats = ex.stats
    acked, failed = stats.acked, stats.failed
    action(tup)
    stats.acked, stats.failed = acked, failed


class _AckBatch:
    __slots__ = ("xor", "count", "sealed")

    def __init__(self) -> None:
        self.xor: dict[int, int] = {}
        self.count = 0
        self.sealed = False


class StormCheckpointing:
    """Storm's checkpoint handling for one bolt: checkpoint tuples are forwarded (every bolt)
    and drive the state (stateful bolts)."""

    def __init__(self, ex: BoltExecutor, n_inputs: int, state: Any = None) -> None:
        self.ex = ex
        self.task = ex.task  # a queue entry's task (the queue depth per task)
        self.barrier = CheckpointBarrier(n_inputs)
        self.cp_route = ex.routes[CHECKPOINT_STREAM]
        self.cp_sids = _checkpoint_sids(ex)
        self.machine: StatefulBoltMachine | None = None
        self._ack_batch: _AckBatch | None = None
        if state is not None:
            self.machine = StatefulBoltMachine(ex.instance, state)
            ex.instance.ack = self._held_ack  # acked for real only when the checkpoint commits
        self._plain_process = ex.process
        ex.process = self.process
        ex.checkpoint_handler = self

    def process(self, tup: Tuple) -> None:
        if tup.info.sid in self.cp_sids:
            self._on_checkpoint(tup)
        elif self.machine is not None and not self.machine.initialized and not tup.is_tick():
            self.machine.pending_tuples.append(tup)  # before INITSTATE: held, not executed
        else:
            self._plain_process(tup)

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

    def _release(self, item: Any, ok: bool) -> None:
        """Really ack (or fail) what a stateful bolt acked: a held batch, or a single tuple."""
        ex = self.ex
        if isinstance(item, _AckBatch):
            if ok:
                buf = ex.port.acks
                for r, v in item.xor.items():
                    buf[r] = buf.get(r, 0) ^ v
                ex.stats.acked += item.count
            else:
                ex.port.fails.extend(item.xor)
                ex.stats.failed += item.count
        elif ok:
            ex.ack(item)
        else:
            ex.fail(item)

    def _on_checkpoint(self, tup: Tuple) -> None:
        ex = self.ex
        txid, action = tup.values
        verdict = self.barrier.arrive(txid, action)
        if verdict != "handle":
            _system(ex, ex.ack, tup)
            return
        try:
            if self.machine is not None:
                if action == PREPARE:
                    maybe_crash("prepare", txid)
                elif action == COMMIT:
                    maybe_crash("between", txid)
                ok, to_ack, to_fail, replay = self.machine.handle(txid, action)
                if action == COMMIT:
                    maybe_crash("commit", txid)
            else:
                ok, to_ack, to_fail, replay = True, [], [], []
        except Exception as e:  # noqa: BLE001 - the checkpoint fails; recovery follows
            ex.report_error(f"checkpoint {action}({txid})", e)
            _system(ex, ex.fail, tup)
            return
        if not ok:
            _system(ex, ex.fail, tup)
            return
        for t in to_ack:
            self._release(t, True)
        for t in to_fail:
            self._release(t, False)
        if action == PREPARE and self._ack_batch is not None:
            self._ack_batch.sealed = True  # later acks belong to the next checkpoint
        self.barrier.handled(txid, action)
        values = [txid, action]
        ex._send(self.cp_route, values, self.cp_route.targets(values), tup)
        ex.stats.emitted -= 1  # a system tuple: not part of the component's own figures
        _system(ex, ex.ack, tup)
        for t in replay:
            self._plain_process(t)


class BarrierAlignment:
    """Exactly-once, one bolt: hold each input channel from which barrier t arrived until it
    arrived on all, then prepare the state, forward the barrier (anchored to every copy) and go
    on with what was held."""

    def __init__(self, ex: BoltExecutor, n_inputs: int, state: Any = None) -> None:
        self.ex = ex
        self.task = ex.task  # a queue entry's task (the queue depth per task)
        self.cp_route = ex.routes[CHECKPOINT_STREAM]
        self.cp_sids = _checkpoint_sids(ex)
        self.n_inputs = n_inputs
        self.blocked: set[int] = set()
        self.barrier_tups: list[Tuple] = []
        self.held_inputs: list[Tuple] = []
        self.state = state
        if state is not None:
            ex.instance.init_state(state)  # state restored by recovery before the workers started
        # The worker queues the barriers to this object; data tuples pass through ``process``
        # only while a channel is blocked (the per-tuple path stays the executor's own).
        self._plain_process = ex.process
        ex.checkpoint_handler = self

    def process(self, tup: Tuple) -> None:
        if tup.info.sid in self.cp_sids:
            if not self.blocked:
                self.ex.process = self.process  # type: ignore[method-assign]
            self.blocked.add(tup.source_task)
            self.barrier_tups.append(tup)
            if len(self.barrier_tups) == self.n_inputs:
                self._aligned(tup.values[0])
        elif tup.source_task in self.blocked:
            self.held_inputs.append(tup)
        else:
            self._plain_process(tup)

    def _aligned(self, txid: int) -> None:
        ex = self.ex
        barriers, self.barrier_tups = self.barrier_tups, []
        try:
            if self.state is not None:
                maybe_crash("prepare", txid)
                ex.instance.pre_prepare(txid)
                self.state.prepare_commit(txid)
        except Exception as e:  # noqa: BLE001 - failing the barrier rolls every task back
            ex.report_error(f"prepare({txid})", e)
            for b in barriers:
                _system(ex, ex.fail, b)
        else:
            values = [txid, PREPARE]
            ex._send_tracked(self.cp_route, values, self.cp_route.targets(values), barriers)
            ex.stats.emitted -= 1  # a system tuple: not part of the component's own figures
            for b in barriers:
                _system(ex, ex.ack, b)
        self.blocked.clear()
        ex.process = self._plain_process  # type: ignore[method-assign]
        held, self.held_inputs = self.held_inputs, []
        for t in held:
            self.process(t)  # a barrier among them blocks its channel again

    def commit(self, txid: int) -> None:
        st = self.state
        if st is not None and st.prepared_txid == txid:
            self.ex.instance.pre_commit(txid)
            st.commit(txid)


class ExactlyOnceWorker:
    """Exactly-once, one worker: barrier t snapshots every local spout's position into its
    state and emits the barrier after its data; commit t commits what the spouts and the bolts
    prepared for t. ``drain`` runs the worker's queue (the barrier tuples the spouts emitted)."""

    def __init__(self, drain: Callable[[], None]) -> None:
        self.drain = drain
        self.spouts: dict[int, tuple[SpoutExecutor, Any]] = {}  # task -> (executor, position state)
        self.bolts: list[BarrierAlignment] = []

    def add_spout(self, ex: SpoutExecutor, position_state: Any) -> None:
        self.spouts[ex.task] = (ex, position_state)

    def add_bolt(self, alignment: BarrierAlignment) -> None:
        self.bolts.append(alignment)

    def barrier(self, txid: int) -> None:
        for ex, st in self.spouts.values():
            st.put("__snapshot", ex.instance.snapshot())
            st.prepare_commit(txid)
            ex.emit_barrier(txid)
        self.drain()

    def commit(self, txid: int) -> None:
        maybe_crash("between", txid)
        for ex, st in self.spouts.values():
            if st.prepared_txid == txid:
                st.commit(txid)
            ex.committed(txid)  # every tuple before barrier txid is processed for good
        for b in self.bolts:
            b.commit(txid)
        maybe_crash("commit", txid)
