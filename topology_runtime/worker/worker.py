"""The worker: one OS process, one event loop, all of its tasks' executors.

Per iteration: read inbound batches and control messages, run local tuples, let spouts emit
(unless the outbound backlog is over its high-water mark: back-pressure never blocks the loop),
flush XOR-combined acks and one batch per peer, fire timers. Tuples inside the process move
by reference; across processes they go as one msgpack batch per peer per iteration.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import zmq

from ..api.components import Tuple
from ..api.config import FENCING_TOKEN
from ..plan.planner import Plan
from ..reliability.checkpointing import CHECKPOINT_STREAM
from ..transport.messages import ProbeReply
from ..transport.sockets import ControlClient, DataTransport, pack, transport_encryption, unpack
from .acker_executor import AckerExecutor
from .acker_routing import AckerRouting
from .batches import DATA, INIT, TUPLES, halves
from .bolt_executor import BoltExecutor
from .checkpoints import ExactlyOnceWorker
from .control_channel import WorkerControl
from .delivery import make_deliver
from .figures import Backpressure, CapacityMeter, probe_reply, stats_snapshot
from .offloop import Completions, OnDone, SerialRunner
from .port import WorkerPort
from .spout_executor import SpoutExecutor
from .startup import start_tasks, tick_schedule
from .task_state import TaskStateProvider

log = logging.getLogger("topology.worker")

SPOUT_CALLS_PER_ITERATION = 64
QUEUE_BUDGET = 20000
RESPONSIVE_EVERY = 256  # tuples between mid-drain looks outside the queue
FLUSH_EVERY = 1024  # tuples between mid-drain flushes of this worker's own acks and batches
SUPERVISOR_SILENCE_SECS = 10.0


@dataclass
class WorkerSpec:
    topology_id: str
    plan: Plan
    index: int
    incarnation: int
    control_address: str
    secret: bytes = field(repr=False)  # a logged or raised spec must not carry it
    host: str = "127.0.0.1"
    token: int | None = None  # the run's fencing token (state/fencing.py): every state write carries it


class Worker:
    """One worker process's event loop: it owns the queue, the sockets, the outbound batches and
    acker routing; its executors run the tasks and reach it only through ``self.port``."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.plan: Plan = spec.plan
        self.conf: dict[str, Any] = dict(spec.plan.conf)
        self.index = spec.index
        self.conf["topology.name"] = spec.topology_id
        self.conf[FENCING_TOKEN] = spec.token  # for the state this worker's tasks and spouts open
        plan = self.plan
        self.n_ackers = len(plan.acker_tasks)
        self.acker_tasks = plan.acker_tasks
        self.streams = plan.streams
        self.batch_size = int(self.conf["topology.transfer.batch.size"])

        self.queue: deque = deque()
        self.outbox: dict[int, list[list]] = {}
        self.errors: list[dict] = []
        self.errors_dropped = 0

        self.sent_batches = 0
        self.recv_batches = 0
        self.misrouted = 0
        self.stop_requested = False
        self.draining = False
        self._peer_addr: dict[int, str] = {}
        self.checkpoint_spout = None
        self.exactly_once = bool(plan.exactly_once)
        self._eo_failed = False
        self.eo = ExactlyOnceWorker(self._drain_queue) if self.exactly_once else None
        self.task_state = TaskStateProvider(self.conf, spec.topology_id, plan.component_tasks, plan.keyed,
                                             plan.key_groups)

        self.local_tasks = set(plan.tasks_of_worker(self.index))
        self.task_worker = plan.task_worker
        self.local_bolts: dict[int, BoltExecutor] = {}
        self.local_spouts: dict[int, SpoutExecutor] = {}
        self.local_ackers: dict[int, AckerExecutor] = {}
        self.acking = AckerRouting(self.acker_tasks, self.local_ackers, self.local_spouts, self.task_worker, self.outbox)
        self.completions = Completions()
        self.completed_calls = self.completions.pending  # a deque: cheap "anything finished?" test
        # Streams whose tuples go to the front of the queue (a transactional commit): control
        # tuples on a serial critical path that would otherwise wait behind a batch's data. Meant
        # for streams with one tuple in flight per receiver (ahead of data, not of each other).
        self.priority_sids = frozenset(
            info.sid for info in plan.streams
            if info.component in plan.topology.components
            and info.stream in getattr(plan.spec(info.component).template, "priority_streams", ()))
        # Streams whose tuples leave for their peer at once, with what is batched for it: priority
        # tuples, and chunks (one tuple carrying hundreds: no reason to wait for batch_size more).
        self.checkpoint_sids = frozenset(info.sid for info in plan.streams if info.stream == CHECKPOINT_STREAM)
        self.special_sids = self.priority_sids | self.checkpoint_sids
        self.chunk_sids = frozenset(info.sid for info in plan.streams if info.chunk)
        self.send_now_sids = self.priority_sids | self.chunk_sids
        self.off_loop_runners: dict[int, SerialRunner] = {}
        self.off_loop_inflight = 0
        self.dequeued = 0  # tuples ever run from the queue: with its length, a position in it
        self.capacity, self.backpressure = CapacityMeter(), Backpressure()

        max_bytes = int(self.conf["topology.transfer.max.message.bytes"])
        curve = transport_encryption(self.conf)
        self.transport = DataTransport(
            spec.secret, send_hwm=int(self.conf["topology.transfer.buffer.size"]),
            recv_hwm=int(self.conf["topology.executor.receive.buffer.size"]), host=spec.host, sender=self.index,
            epoch=spec.incarnation, max_bytes=max_bytes, curve=curve,
            window=self.conf.get("topology.transfer.peer.window.bytes"))
        self.address = self.transport.bind()
        self.control = ControlClient(self.transport.ctx, spec.secret, spec.control_address, me=self.address,
                                     sender=self.index, epoch=spec.incarnation, curve=curve)
        self.ctl = WorkerControl(self.control, self, self.index, spec.incarnation, self.address, spec.host)
        self.port = WorkerPort(
            deliver=make_deliver(self), enqueue=lambda ex, tup: self.queue.append((ex, tup)),
            record_error=self.record_error, run_off_loop=self.run_off_loop, barrier_done=self.barrier_done,
            exactly_once_failure=self.exactly_once_failure, preferred_acker_slot=self.preferred_acker_slot,
            n_ackers=self.n_ackers, streams=self.streams, exactly_once=self.exactly_once, fail_run=self.fail_run,
            lineage_failed=self.acking.lineage_failed)

    # --- what executors may call, through their WorkerPort ----------------------------------------------------------------
    def preferred_acker_slot(self, _counter=[0]) -> int:  # noqa: B006 - spreads spouts over local ackers
        local = [i for i, t in enumerate(self.acker_tasks) if t in self.local_tasks]
        if local:
            _counter[0] += 1
            return local[_counter[0] % len(local)]
        return self.index % max(1, self.n_ackers)

    def run_off_loop(self, task: int, fn, on_done: OnDone) -> None:
        """Run ``fn()`` on ``task``'s own thread (its calls in submission order); ``on_done(result,
        error)`` runs later on this loop's thread, where emits and acks are safe."""
        runner = self.off_loop_runners.get(task)
        if runner is None:
            runner = self.off_loop_runners[task] = SerialRunner(f"off-loop-{task}", self.completions)
            # The off-loop thread mostly waits on I/O and then needs the GIL back from a busy
            # loop: a short switch interval keeps each wait from costing ms (bench/README.md,
            # "GIL switch interval").
            sys.setswitchinterval(min(sys.getswitchinterval(), 0.0002))
        self.off_loop_inflight += 1
        runner.submit(fn, on_done)

    def _run_completions(self) -> None:
        done = self.completions.take()
        for on_done, result, error in done:
            self.off_loop_inflight -= 1
            on_done(result, error)  # the executor's wrapper reports what it raises
        if done:
            self._flush()  # a commit's acks leave now, not after the next (possibly long) queue drain

    def record_error(self, component: str, task: int, text: str, tb: str) -> None:
        if len(self.errors) < int(self.conf["topology.max.error.report.per.interval"]):
            self.errors.append({"component": component, "task": task, "error": text, "traceback": tb,
                                "worker": self.index, "time": time.time()})
        else:
            self.errors_dropped += 1

    # --- setup -------------------------------------------------------------------------------------
    def barrier_done(self, task: int, txid: int) -> None:
        self.ctl.barrier_done(task, txid)

    def exactly_once_failure(self, reason: str) -> None:
        if not self._eo_failed:  # once per incarnation: the supervisor rolls everything back
            self._eo_failed = True
            log.warning("exactly-once: %s; asking for a rollback to the last checkpoint", reason)
            self.ctl.exactly_once_failure(reason)

    def fail_run(self, component: str, task: int, error: str) -> None:
        """A component gave up (a transactional batch failed topology.transactional.max.attempts
        times): the supervisor ends the run ``failed`` with ``error``."""
        log.error("%s[%d]: %s; asking the supervisor to end the run as failed", component, task, error)
        self.ctl.run_failed(component, task, error)

    # --- what the supervisor's control messages do (control_channel.ControlledWorker) ----------
    def connect_peer(self, index: int, address: str) -> None:
        if self._peer_addr.get(index) != address:
            self.transport.connect(index, address)  # a restarted peer binds a new address
            self._peer_addr[index] = address

    def probe_reply(self, seq: int) -> ProbeReply:
        self._flush()
        cp = self.checkpoint_spout.machine if self.checkpoint_spout is not None else None
        spouts = self.local_spouts.values()
        return probe_reply(
            self.index, self.spec.incarnation, seq,
            idle=not self.queue and not self.transport.backlogged() and not self.off_loop_inflight,
            spouts=spouts, bolts=self.local_bolts.values(), cp_final_done=None if cp is None else cp.final_done,
            counters=[self.sent_batches, self.recv_batches, sum(e.stats.executed for e in self.local_bolts.values()),
                      sum(e.stats.emitted for e in spouts)])

    def stats_snapshot(self) -> dict:
        return stats_snapshot(
            (self.local_spouts, self.local_bolts, self.local_ackers), self.local_bolts, self.queue,
            {"backlog": self.transport.backlogged(), "pending": sum(len(s.pending) for s in self.local_spouts.values()),
             "acker_pending": sum(len(a.acker) for a in self.local_ackers.values()),
             "misrouted": self.misrouted, "rejected": self.transport.rejected,
             **self.backpressure.figures(time.monotonic())}, self.capacity)

    def executors(self) -> list:
        return [*self.local_spouts.values(), *self.local_bolts.values()]

    def take_errors(self) -> list[dict]:
        errors, self.errors = self.errors, []
        return errors

    def drain(self) -> None:
        self.draining = True
        for s in self.local_spouts.values():
            if not s.system:  # the checkpoint spout keeps going: the final commit needs it
                s.deactivated = True

    def pause(self) -> None:
        for s in self.local_spouts.values():
            if not s.system:  # the checkpoint spout keeps going: checkpoints go on while paused
                s.set_paused(True)

    def resume(self) -> None:
        for s in self.local_spouts.values():
            if not s.system:
                s.set_paused(False)

    def barrier(self, txid: int) -> None:
        try:
            self.eo.barrier(txid)
        except Exception as e:  # noqa: BLE001 - Redis down etc.: roll back, retry later
            log.exception("exactly-once barrier %s failed", txid)
            self.exactly_once_failure(f"barrier {txid}: {e}")

    def commit(self, txid: int) -> None:
        try:
            self.eo.commit(txid)
            self.ctl.committed(txid)
        except Exception as e:  # noqa: BLE001
            log.exception("exactly-once commit %s failed", txid)
            self.exactly_once_failure(f"commit {txid}: {e}")

    def end_of_input(self, components: set[str]) -> None:
        """A bounded run's input is done: these components' windows evaluate what they hold."""
        for ex in self.local_bolts.values():
            flush = getattr(ex.instance, "end_of_input", None) if ex.component in components else None
            if flush is not None:
                try:
                    flush()
                except Exception as e:  # noqa: BLE001 - a user's evaluation raised: reported, the worker goes on
                    ex.report_error("end of input", e)
        self._flush()

    def final_checkpoint(self) -> None:
        if self.checkpoint_spout is not None and self.checkpoint_spout.machine is not None:
            self.checkpoint_spout.machine.request_final(time.monotonic())

    def stop(self) -> None:
        self.stop_requested = True

    # --- the loop ------------------------------------------------------------------------------------
    def run(self) -> int:
        self.ctl.wait_for_peers()
        start_tasks(self)
        log.info("worker %d (incarnation %d) running %d task(s) at %s", self.index, self.spec.incarnation,
                 len(self.local_tasks), self.address)
        self.ctl.started()
        # Tuples are short-lived and acyclic: keep the collector off the hot path. Objects built
        # during start-up (plan, user state, inputs) move to the permanent generation, and the
        # young generation is collected less often, which removes multi-ms pauses from p99.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 50, 100)
        conf = self.conf
        ctl = self.ctl
        timeouts = bool(conf["topology.enable.message.timeouts"])
        timeout_secs = float(conf["topology.message.timeout.secs"])
        stats_every = float(conf["topology.stats.interval.secs"])
        idle_ms = max(1, int(conf["topology.sleep.spout.wait.strategy.time.ms"]))
        now = time.monotonic()
        next_timeout = now + timeout_secs
        next_stats = now + min(stats_every, 0.2)
        ticks = tick_schedule(self, now)
        poller = zmq.Poller()
        pull = self.transport.pull
        ctl_sock = self.control.sock
        poller.register(pull, zmq.POLLIN)
        poller.register(ctl_sock, zmq.POLLIN)
        completions = self.completions
        poller.register(completions.fd, zmq.POLLIN)
        spouts = list(self.local_spouts.values())
        transport = self.transport
        flush_secs = float(self.conf.get("topology.batch.flush.interval.millis") or 1) / 1000.0
        wait_ms = 0
        told_drained = False
        while not self.stop_requested:
            events = dict(poller.poll(wait_ms))
            busy = False
            if completions or completions.fd in events:
                self._run_completions()
                busy = True
            if ctl_sock in events:
                ctl.handle()
            if pull in events:
                for payload in transport.recv_payloads(64):
                    self._handle_batch(payload)
                    busy = True
                transport.queued(self.dequeued + len(self.queue))
            if self.queue:
                self._drain_queue()
                busy = True
            if (held := bool(spouts) and transport.backlogged() > 0) != self.backpressure.on:
                self.backpressure.held(held, time.monotonic())
            if spouts and not held:
                emitted = 0
                for s in spouts:
                    if s.can_emit():
                        emitted += s.run_next_tuple(SPOUT_CALLS_PER_ITERATION, flush_secs)
                if emitted:
                    busy = True
                    self._drain_queue()
            now = time.monotonic()
            # Senders are paid back for the batches whose tuples this worker ran: one that falls
            # behind holds its producers back instead of queueing without end.
            transport.release_credits(now, self.dequeued)
            self._flush()
            if timeouts and now >= next_timeout:
                next_timeout = now + timeout_secs
                for a in self.local_ackers.values():
                    a.acker.tick()
                for s in spouts:
                    s.timeout_tick()
            for t in ticks:
                if now >= t[2]:
                    t[2] = now + t[0]
                    for ex in t[1]:
                        ex.tick(t[0])
                    busy = True
            if now >= next_stats:
                next_stats = now + stats_every
                ctl.send_stats()
                if now - ctl.last_heard > SUPERVISOR_SILENCE_SECS:
                    # The supervisor probes every 0.1 s: silence means it is gone (killed driver).
                    log.error("worker %d: no word from the supervisor for %.0fs; stopping",
                              self.index, now - ctl.last_heard)
                    self.stop_requested = True
            if busy or self.queue:
                wait_ms = 0
                continue
            if not told_drained and not self.off_loop_inflight and all(
                    s.system or s.finished or s.deactivated or s.input_finished for s in spouts):
                told_drained = True  # the end of a bounded run need not wait for the next probe
                ctl.input_drained()
            if any(s.can_emit() for s in spouts) and not transport.backlogged():
                wait_ms = idle_ms
            else:
                wait_ms = 20 if not transport.backlogged() else 1
        self._shutdown()
        return 0

    def _drain_queue(self) -> None:
        q = self.queue
        pop = q.popleft
        n = 0  # tuples run, a chunk counting as its rows
        look, flush = RESPONSIVE_EVERY, FLUSH_EVERY  # n at the next look outside / own flush
        finished = self.completed_calls
        ran = 0  # entries run: a local, added to ``dequeued`` when it is read (not per tuple)
        try:
            while q and n < QUEUE_BUDGET:
                ex, tup = pop()
                ex.process(tup)
                ran += 1
                n += len(tup.values[1]) if tup.info.chunk else 1
                if finished:  # a commit ended off the loop: its acks are the pipeline's critical path
                    self._run_completions()
                if n >= look:
                    look = n + RESPONSIVE_EVERY
                    self.dequeued += ran
                    ran = 0
                    if n >= flush:
                        flush = n + FLUSH_EVERY
                        self._stay_responsive(True)
                    else:
                        self._stay_responsive(False)
        finally:
            self.dequeued += ran

    def _stay_responsive(self, flush: bool) -> None:
        """Mid-drain: a long drain must not hold back what waits outside the queue. Acks and
        outcomes that arrived (a spout's next batch or commit depends on them) are applied now;
        arriving data joins the end of the queue, priority tuples its front, as between drains.
        One non-blocking receive per RESPONSIVE_EVERY tuples, no per-tuple syscall. This
        drain's own acks and batches leave every 1024 tuples: flushing more often splits the
        XOR-combined acks (bench/README.md, "Mid-drain flushes")."""
        for payload in self.transport.recv_payloads(16):
            self._handle_batch(payload)
        self.transport.queued(self.dequeued + len(self.queue))
        if flush:
            self._flush()

    def _handle_batch(self, payload: bytes) -> None:
        self.recv_batches += 1
        msg = unpack(payload)
        data, inits, acks, fails, resets, outcomes = msg[1:7]
        if data:
            q = self.queue
            streams = self.streams
            bolts = self.local_bolts
            special, checkpoint = self.special_sids, self.checkpoint_sids
            first = None
            extend = q.extend
            for task, src, sid, values_of, anchors_of in data:
                ex = bolts.get(task)
                if ex is None:
                    self.misrouted += len(values_of)
                    continue
                info = streams[sid]
                if sid in special:
                    if sid in checkpoint:
                        ex = ex.checkpoint_handler
                    else:
                        if first is None:
                            first = []
                        first.extend((ex, Tuple(v, info, src, a)) for v, a in zip(values_of, anchors_of))
                        continue
                n = len(values_of)  # the run's tuples, built and queued without a Python loop
                extend(zip(repeat(ex, n), map(Tuple, values_of, repeat(info, n), repeat(src, n), anchors_of)))
            if first:
                q.extendleft(reversed(first))  # ahead of the queued data, in their own order
        if inits or acks or fails or resets:
            self.acking.apply(inits, acks.items() if isinstance(acks, dict) else acks, fails, resets)
        for spout_task, kind, root in outcomes:
            sp = self.local_spouts.get(spout_task)
            if sp is not None:
                sp.on_outcome(kind, root)

    def _flush(self) -> None:
        # Spout callbacks run while applying outcomes may emit again: loop until quiet.
        port = self.port
        while port.inits or port.acks or port.fails or port.resets:
            inits, port.inits = port.inits, []
            acks, port.acks = port.acks, {}
            fails, port.fails = port.fails, []
            resets, port.resets = port.resets, []
            # XOR-combined per root: zero means "no change" (every edge cancelled out).
            self.acking.apply(inits, [(r, v) for r, v in acks.items() if v], fails, resets)
        for w in list(self.outbox):
            self._send_peer(w)
        self.transport.flush()

    def _send_peer(self, w: int) -> None:
        ob = self.outbox.pop(w, None)
        if ob is None or not any(ob[:TUPLES]):
            return
        payload = pack([self.index, *ob[:TUPLES]])
        tuples = ob[TUPLES]
        if len(payload) > self.transport.max_bytes and (tuples > 1 or (tuples and any(ob[INIT:TUPLES]))):
            # Over the message cap (large tuples): two halves in order, acker messages with the
            # first; a single tuple goes alone. Only a single tuple over the cap is refused
            # (transport.send says why): what rode with it must not go down with it.
            for i, runs in enumerate(halves(ob[DATA])):
                half = self.outbox[w] = [runs, *ob[INIT:TUPLES], 0] if i == 0 else [runs, [], [], [], [], [], 0]
                half[TUPLES] = sum(len(run[3]) for run in runs)
                self._send_peer(w)
            return
        if self.transport.send(w, payload):
            self.sent_batches += 1  # a refused one is not awaited by a bounded run's end

    def _shutdown(self) -> None:
        for r in self.off_loop_runners.values():
            r.stop(2.0)
        self.completions.close()
        for s in self.local_spouts.values():
            try:
                s.instance.close()
            except Exception as e:  # noqa: BLE001
                s.report_error("close()", e)
        for b in self.local_bolts.values():
            try:
                b.instance.cleanup()
            except Exception as e:  # noqa: BLE001
                b.report_error("cleanup()", e)
        self.ctl.send_stats(final=True)
        log.info("worker %d stopped", self.index)
        self.control.close()
        self.transport.close()
