"""The run supervisor: one per run, launcher-independent; decides what happens to the run.

It owns the control endpoint the workers connect to, hands out peer addresses, aggregates
stats, detects that a bounded run is done, carries out kill/drain and, with exactly-once
state, rolls every worker back when one fails (the checkpoints themselves: ``checkpoints``).
A launcher starts and restarts the worker processes and calls ``worker_exited`` when one dies.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..api.status import COMPLETED, FAILED, FINAL_STATES, KILLED, RUNNING, STARTING, RunStatus
from ..plan.planner import Plan
from ..transport import messages as cm
from ..transport.sockets import ControlServer, transport_encryption
from .operations import DayTwoOperations
from .rebalance import Rebalance
from .slots import WorkerSlot
from .stats import add_task_stats, component_stats, rekey_task_stats
from .window_end import WindowStallCheck, end_of_input_round, windows_held

if TYPE_CHECKING:
    from .checkpoints import ExactlyOnceCheckpoints

log = logging.getLogger("topology.supervisor")

PROBE_INTERVAL = 0.1
# Once every worker is idle with its input done, the end is a few probes away (a final checkpoint,
# then the same counters twice): those come faster, so a bounded run does not idle ~0.3 s at its end.
ENDGAME_PROBE_INTERVAL = 0.02
MAX_STARTUP_FAILURES = 3


class RunSupervisor(DayTwoOperations):
    def __init__(self, name: str, plan: Plan, host: str = "127.0.0.1", restart_all_on_failure: bool = False,
                 token: int | None = None) -> None:
        """``token``: the run's fencing token (state/fencing.py; None for a run without the
        control plane): every state record this supervisor writes is fenced with it."""
        self.restart_all_on_failure = restart_all_on_failure
        self.token = token
        self.name = name
        self.plan = plan
        self.secret = secrets.token_bytes(32)
        self.control = ControlServer(self.secret, host, curve=transport_encryption(plan.conf))
        self.slots = {i: WorkerSlot(i) for i in range(plan.workers)}
        self._carried: dict = {}  # stats of the slots of earlier plans (re-planned runs)
        self.state = STARTING
        self.error: str | None = None
        self.errors: list[dict] = []
        self.restarts = 0
        self.max_restarts = int(plan.conf.get("topology.max.restarts", 10))
        self.started_at = time.time()
        self.running_since: float | None = None  # monotonic time the workers were all ready
        self.lock = threading.Lock()
        self.done = threading.Event()
        self._peers_sent = False
        self._probe_seq = 0
        self._probe_at = 0.0
        self._probe_every = PROBE_INTERVAL  # ENDGAME_PROBE_INTERVAL once a bounded run is about to end
        self._replies: dict[int, dict] = {}
        self._last_quiet: list | None = None
        self._stop_reason: str | None = None  # final state once workers stopped
        self._stop_sent_at: float | None = None
        self.draining = False
        self.paused = False
        self.inspection, self.samples = cm.Inspect({}, {}), []  # log level and sampling asked; tuples sampled
        self.rebalance: Rebalance | None = None
        self._final_checkpoint_sent = False
        self._window_stall = WindowStallCheck()
        # Exactly-once: this supervisor coordinates checkpoints (barriers start at the spouts).
        self.eo = bool(plan.exactly_once)
        self.restart_all_requested = False
        self.checkpoints: ExactlyOnceCheckpoints | None = None
        if self.eo:
            from .checkpoints import ExactlyOnceCheckpoints  # loads redis only for exactly-once runs

            self.checkpoints = ExactlyOnceCheckpoints(name, plan, self._send_all, self._eo_redis_lost, token)

    # --- called by the launcher -------------------------------------------------------------------
    def worker_exited(self, index: int, exitcode: int | None) -> bool:
        """A worker process ended. Returns True if the launcher should start it again."""
        slot = self.slots[index]
        with self.lock:
            # Its address is dead: no peer table may carry it again, and what that incarnation
            # sent before dying (a late hello) must not bring it back.
            slot.address = None
            slot.min_incarnation = max(slot.min_incarnation, slot.incarnation + 1)
            if self._stop_reason is not None or self.state in FINAL_STATES:
                slot.stopped = True
                return False
            if self.eo:
                # A lost worker means lost in-flight state: everyone goes back to the checkpoint.
                if slot.startup_failures >= MAX_STARTUP_FAILURES:
                    self._fail(f"worker {index} failed to start {slot.startup_failures} times")
                elif not self.restart_all_requested:
                    log.warning("run %s: worker %d died (exit code %s); exactly-once: restarting all workers",
                                self.name, index, exitcode)
                    self._request_restart_all()
                return False
            self._retire(slot)
            if slot.startup_failures >= MAX_STARTUP_FAILURES:
                last = next((e for e in reversed(self.errors) if e.get("fatal")), None)
                self._fail(f"worker {index} failed to start {slot.startup_failures} times"
                           + (f": {last['error']}" if last else ""))
                return False
            if self.restarts >= self.max_restarts:
                self._fail(f"worker {index} died (exit code {exitcode}) and the restart limit "
                           f"(topology.max.restarts={self.max_restarts}) is used up")
                return False
            self.restarts += 1
            log.warning("run %s: worker %d died (exit code %s); restarting it (restart %d of %d)",
                        self.name, index, exitcode, self.restarts, self.max_restarts)
            return True

    def fail(self, error: str, errors: list[dict] | tuple = ()) -> None:
        """End the run as failed, now (a launcher found an error no relaunch can fix); ``errors``
        (with tracebacks) go into its status."""
        with self.lock:
            self._add_errors(list(errors))
            self._fail(error)

    def request_relaunch(self) -> None:
        """Stop every worker so the launcher starts them again (a re-plan, e.g. to grow back);
        not a failure: it uses no restart."""
        with self.lock:
            if self._stop_reason is None and not self.restart_all_requested:
                self.restart_all_requested = True
                self._send_all(cm.Stop())

    def stage_failed(self, reason: str, give_up: bool | None = None) -> bool:
        """Every worker ended at once (a Spark barrier stage failed). True: relaunch them all.
        ``give_up`` is the launcher's back-off decision (None: count against topology.max.restarts)."""
        with self.lock:
            self.running_since = None
            if self._stop_reason is not None or self.state in FINAL_STATES:
                for slot in self.slots.values():
                    slot.stopped = True
                self._finish()
                return False
            for slot in self.slots.values():
                self._retire(slot)
                slot.address = None
            startup = [s for s in self.slots.values() if s.startup_failures >= MAX_STARTUP_FAILURES]
            if startup:
                last = next((e for e in reversed(self.errors) if e.get("fatal")), None)
                self._fail(f"worker {startup[0].index} failed to start {startup[0].startup_failures} times"
                           + (f": {last['error']}" if last else ""))
            elif give_up:
                self._fail(f"workers died ({reason}) {self.max_restarts + 1} times in a row, none of the launches "
                           f"staying up topology.restart.backoff.reset.secs; giving up")
            elif give_up is None and self.restarts >= self.max_restarts:
                self._fail(f"workers died ({reason}) and the restart limit "
                           f"(topology.max.restarts={self.max_restarts}) is used up")
            else:
                self.restarts += 1
                self._peers_sent = False
                self.restart_all_requested = False
                if self.state == RUNNING:
                    self.state = STARTING
                if self.eo:
                    self.eo_recover()
                log.warning("run %s: workers died (%s); relaunching them (restart %d of %d)",
                            self.name, reason, self.restarts, self.max_restarts)
                return True
            for slot in self.slots.values():
                slot.stopped = True
            self._finish()
            return False

    def replan(self, plan: Plan) -> None:
        """Between two launches (every worker down): the same tasks on ``plan.workers`` workers
        (plan.planner.replan), e.g. onto the Spark slots that remain after a node was lost."""
        with self.lock:
            for slot in self.slots.values():
                self._retire(slot)
                for task, s in slot.carried.items():
                    add_task_stats(self._carried, task, s)
            log.warning("run %s: re-planned from %d to %d worker(s)", self.name, self.plan.workers, plan.workers)
            if plan.component_tasks != self.plan.component_tasks:  # a rescale gave task ids out again
                self._carried = rekey_task_stats(self._carried, self.plan, plan)
            self.plan = plan
            self.slots = {i: WorkerSlot(i) for i in range(plan.workers)}
            self._peers_sent = False
            self._replies = {}
            self._last_quiet = None
            if self.checkpoints is not None:
                self.checkpoints.set_plan(plan)

    def workers_info(self) -> dict:
        with self.lock:
            now = time.monotonic()
            return {str(i): {"incarnation": s.incarnation, "address": s.address, "pid": s.extra.get("pid"),
                             "python": s.hello.get("python"), "host": s.hello.get("host"),
                             "heartbeat_age_secs": round(now - s.last_seen, 2) if s.last_seen else None,
                             "queue": s.extra.get("queue"), "backlog": s.extra.get("backlog"),
                             "pending": s.extra.get("pending"), "ready": s.ready,
                             "backpressure": bool(s.extra.get("backpressure")),
                             "backpressure_secs": round(s.backpressure_secs + s.extra.get("backpressure_secs", 0.0), 3)}
                    for i, s in self.slots.items()}

    def request_kill(self, drain: bool = False) -> None:
        with self.lock:
            if self.state in FINAL_STATES or self._stop_reason is not None:
                return
            if drain:
                self.draining = True
                self._send_all(cm.Drain())
                log.info("run %s: draining (spouts stopped; waiting for pending trees)", self.name)
            else:
                self._begin_stop(KILLED)

    def status(self) -> RunStatus:
        with self.lock:
            return self._status()

    # --- the control loop step -------------------------------------------------------------------
    def step(self, timeout_ms: int = 50) -> None:
        if self.state == RUNNING and self._stop_reason is None:  # wake for the next probe, not a poll later
            timeout_ms = max(0, min(timeout_ms, int((self._probe_at + self._probe_every - time.monotonic()) * 1000) + 1))
        if self.control.poll(timeout_ms):
            while True:
                got = self.control.recv()
                if got is None:
                    break
                identity, sender, epoch, msg = got
                if not isinstance(msg, cm.FromWorker) or msg.w != sender:
                    continue  # authentic, but not a worker's message or not its own index: ignore
                msg = replace(msg, inc=epoch)  # the incarnation the MAC vouches for
                with self.lock:
                    try:
                        self._on_message(identity, msg)
                    except Exception:  # noqa: BLE001 - one bad message must not stop the supervisor
                        log.exception("run %s: control message %.200r could not be handled", self.name, msg)
        with self.lock:
            now = time.monotonic()
            if self.state == RUNNING and self._stop_reason is None and now - self._probe_at >= self._probe_every:
                self._probe()
            if self.checkpoints is not None and not self.restart_all_requested:
                self.checkpoints.tick(now, running=self.state == RUNNING and self._stop_reason is None)
            if self._stop_reason is not None:
                if all(s.stopped for s in self.slots.values()) or (
                    self._stop_sent_at is not None and now - self._stop_sent_at > 10.0
                ):
                    self._finish()

    def all_stopped(self) -> None:
        """The launcher saw every worker process end."""
        with self.lock:
            for s in self.slots.values():
                s.stopped = True
            if self._stop_reason is not None:
                self._finish()

    # --- internals (lock held) --------------------------------------------------------------------
    def _send(self, slot: WorkerSlot, msg: cm.ControlMessage) -> None:
        if slot.identity is not None and slot.address:
            self.control.send(slot.identity, slot.address, msg)

    def _send_all(self, msg: cm.ControlMessage) -> None:
        for slot in self.slots.values():
            self._send(slot, msg)

    def _peers(self) -> dict:
        return {str(i): s.address for i, s in self.slots.items() if s.address}

    def _on_message(self, identity: bytes, msg: cm.FromWorker) -> None:
        w = msg.w
        if w not in self.slots:
            return
        slot = self.slots[w]
        inc = msg.inc
        if inc < slot.min_incarnation:
            return  # from an incarnation that already died
        if isinstance(msg, cm.Hello):
            if inc < slot.incarnation:
                return  # an older incarnation's hello, late or replayed
            slot.identity = identity  # its connection: the only one control messages go to
            if inc != slot.incarnation:
                if slot.incarnation >= 0:
                    self._retire(slot)
                slot.incarnation = inc
                slot.ready = False
                slot.stopped = False
            slot.address = msg.addr
            slot.hello = {"pid": msg.pid, "python": msg.python, "host": msg.host}
            slot.extra["pid"] = msg.pid
            slot.last_seen = time.monotonic()
            if self._stop_reason is not None:
                self._send(slot, cm.Stop())
                return
            if all(s.address for s in self.slots.values()):
                # First table, or a restarted worker: everyone learns its new address.
                restarted = self._peers_sent
                self._peers_sent = True
                self._send_all(cm.Peers(self._peers()))
                if restarted and self.draining:
                    self._send(slot, cm.Drain())
                if self.paused or self.rebalance is not None:
                    self._send(slot, cm.Pause())
                if self.inspection.log_level or self.inspection.sample:
                    self._send(slot, self.inspection)
            return
        if inc != slot.incarnation:
            return  # a late message from a previous incarnation
        if identity != slot.identity:
            # Its connection was re-made (a dropped TCP connection; the ROUTER names the new one
            # afresh): authentic and newer than anything before, so this is where it now listens.
            log.info("run %s: worker %d reconnected", self.name, w)
            slot.identity = identity
        slot.last_seen = time.monotonic()
        if isinstance(msg, cm.Ready):
            slot.ready = True
            slot.startup_failures = 0
            if self.state == STARTING and all(s.ready for s in self.slots.values()):
                self.state = RUNNING
                self.running_since = time.monotonic()
                log.info("run %s: running on %d worker(s)", self.name, len(self.slots))
        elif isinstance(msg, cm.Stats):  # Stopped too: the final ones
            slot.stats = msg.stats.get("tasks", {})
            slot.extra = {"pid": slot.extra.get("pid"), **{k: v for k, v in msg.stats.items() if k not in ("tasks", "samples")}}
            self.samples = (self.samples + list(msg.stats.get("samples") or []))[-1000:]
            self._add_errors(msg.errors)
            if isinstance(msg, cm.Stopped):
                slot.stopped = True
        elif isinstance(msg, cm.Fatal):
            slot.startup_failures += 1
            self._add_errors([{"component": msg.component, "task": msg.task, "error": msg.error,
                               "traceback": msg.traceback, "worker": w, "fatal": True}])
            if self.restart_all_on_failure:
                # Spark: the barrier stage only ends when every task returns, so stop the rest
                # and let the driver relaunch the stage (or give up after repeated failures).
                self._send_all(cm.Stop())
        elif isinstance(msg, cm.ExactlyOnceFailure):
            if self.checkpoints is not None and not self.restart_all_requested and self._stop_reason is None:
                log.warning("run %s: %s: rolling every task back to checkpoint %d",
                            self.name, msg.reason, self.checkpoints.committed)
                self._request_restart_all()
        elif isinstance(msg, cm.RunFailed):
            if self._stop_reason is None and self.state not in FINAL_STATES:
                self._add_errors([{"component": msg.component, "task": msg.task, "error": msg.error, "worker": w}])
                self._fail(f"{msg.component}: {msg.error}")
        elif isinstance(msg, (cm.BarrierDone, cm.Committed)):
            if self.checkpoints is not None:
                self.checkpoints.on_message(msg)
        elif isinstance(msg, cm.InputDrained):
            self._probe_at = 0.0  # probe at once: the run may be ending
        elif isinstance(msg, cm.ProbeReply):
            if msg.seq == self._probe_seq:
                self._replies[w] = msg
                if len(self._replies) == len(self.slots):
                    self._evaluate_probe()

    def _add_errors(self, errors: list[dict]) -> None:
        for e in errors:
            e = {k: v for k, v in e.items() if k != "t"}
            self.errors.append(e)
        del self.errors[:-50]

    def _retire(self, slot: WorkerSlot) -> None:
        for task, s in slot.stats.items():
            add_task_stats(slot.carried, task, s)
        slot.stats = {}
        slot.backpressure_secs += float(slot.extra.pop("backpressure_secs", 0.0) or 0.0)
        slot.extra.pop("backpressure", None)  # a dead incarnation holds nothing back
        slot.ready = False

    def _probe(self) -> None:
        self._probe_at = time.monotonic()
        self._probe_seq += 1
        self._replies = {}
        self._send_all(cm.Probe(self._probe_seq))

    def _evaluate_probe(self) -> None:
        replies = [self._replies[i] for i in sorted(self._replies)]
        # Every spout is done: only the tuples in flight are left, and the end is near.
        self._probe_every = ENDGAME_PROBE_INTERVAL if all(r.input_done for r in replies) else PROBE_INTERVAL
        if self.rebalance is not None and self._probe_seq > self.rebalance.after_probe:
            self.rebalance.pending = sum(r.pending for r in replies)
        if not all(r.idle and r.input_done for r in replies):
            self._last_quiet = None
            stall = self._window_stall.update(replies, time.monotonic())
            if stall is not None:
                is_error, component, text = stall
                log.log(logging.WARNING if is_error else logging.INFO, "run %s: %s", self.name, text)
                if is_error:
                    self._add_errors([{"component": component, "task": None, "error": text}])
            return
        held = windows_held(replies)
        if held:
            # Input done and only windows hold tuples: once nothing moves for a whole probe,
            # their windows get end of input (never a message timeout), in rounds down the graph.
            vector = [(r.inc, *r.counters) for r in replies]
            if self._last_quiet == vector:
                ready = sorted(end_of_input_round(self.plan, set(held)))
                log.info("run %s: input done; end of input for window(s) %s", self.name, ", ".join(ready))
                self._send_all(cm.EndOfInput(ready))
                self._last_quiet = None
            else:
                self._last_quiet = vector
            return
        if any(r.pending or not r.finished for r in replies):
            self._last_quiet = None
            return
        self._probe_every = ENDGAME_PROBE_INTERVAL
        if self.checkpoints is not None:
            if not self.checkpoints.coordinator.can_complete:
                # The final checkpoint must start after this point: one in flight does not count.
                self.checkpoints.request_final()
                self._last_quiet = None
                return
        elif self.plan.stateful and not any(r.cp_final_done for r in replies):
            # Stateful: one more full checkpoint commits what the last tuples changed. Asked
            # again on every quiet probe: a restarted checkpoint spout forgets the request.
            if not self._final_checkpoint_sent:
                self._final_checkpoint_sent = True
                log.info("run %s: input done; taking a final checkpoint", self.name)
            self._send_all(cm.FinalCheckpoint())
            self._last_quiet = None
            return
        vector = [(r.inc, *r.counters) for r in replies]
        no_restarts = all(r.inc == 0 for r in replies)
        balanced = (not no_restarts) or sum(r.counters[0] for r in replies) == sum(
            r.counters[1] for r in replies)
        # Quiet twice in a row with nothing moved in between: no tuple can still be in flight.
        if balanced and self._last_quiet == vector:
            log.info("run %s: %s", self.name, "drained" if self.draining else "all spouts finished and every tuple is processed")
            self._begin_stop(COMPLETED)
        else:
            self._last_quiet = vector

    def _begin_stop(self, final_state: str) -> None:
        self._stop_reason = final_state
        self._stop_sent_at = time.monotonic()
        self._send_all(cm.Stop())

    def _fail(self, error: str) -> None:
        log.error("run %s failed: %s", self.name, error)
        self.error = error
        self._begin_stop(FAILED)

    def _finish(self) -> None:
        if self.state in FINAL_STATES:
            return
        self.state = self._stop_reason or KILLED
        self.done.set()

    def _status(self) -> RunStatus:
        slots = self.slots.values()
        components, system = component_stats(self.plan, [self._carried, *(s.carried for s in slots)],
                                             [s.stats for s in slots])
        return RunStatus(
            name=self.name, state=self.state, error=self.error, components=components,
            system_components=system, restarts=self.restarts, errors=list(self.errors),
            uptime_secs=round(time.time() - self.started_at, 3), paused=self.paused, workers=len(self.slots),
            parallelism={c: len(t) for c, t in self.plan.component_tasks.items() if c in self.plan.topology.components},
        )

    # --- exactly-once rollback ------------------------------------------------------------------
    def eo_recover(self) -> None:
        """Every worker is down: settle the checkpoint record before they start again."""
        assert self.checkpoints is not None, "exactly-once recovery of a run without exactly-once"
        self.checkpoints.recover()

    def _eo_redis_lost(self) -> None:
        """A checkpoint was abandoned for lack of Redis: roll every worker back once it is back."""
        if not self.restart_all_requested and self._stop_reason is None:
            self._request_restart_all()

    def _request_restart_all(self) -> None:
        if self.restarts >= self.max_restarts:
            self._fail(f"exactly-once rollback needed but the restart limit "
                       f"(topology.max.restarts={self.max_restarts}) is used up")
            return
        self.restart_all_requested = True
        if self.restart_all_on_failure:  # Spark: end the stage; the driver relaunches it
            self._send_all(cm.Stop())

    def restart_all_done(self) -> None:
        """The launcher stopped every worker: recover the state, then they start again."""
        with self.lock:
            self.restarts += 1
            for slot in self.slots.values():
                self._retire(slot)
                slot.address = None
            self._peers_sent = False
            self.state = STARTING
            self.running_since = None
            self.restart_all_requested = False
            self._last_quiet = None
            self.eo_recover()

    def close(self) -> None:
        self.control.close()
