"""What an operator does to a live run besides stopping it: pause and resume its spouts,
rebalance it onto another number of workers, take a savepoint. Part of ``RunSupervisor`` (run_supervisor.py),
kept apart so each module reads on its own; every method takes the supervisor's lock."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from ..api.status import FINAL_STATES, RUNNING, STARTING
from ..plan.planner import Plan
from ..transport import messages as cm
from .rebalance import Rebalance, check_workers
from .slots import WorkerSlot

if TYPE_CHECKING:
    from .checkpoints import ExactlyOnceCheckpoints

log = logging.getLogger("topology.supervisor")


class DayTwoOperations:
    # Set by RunSupervisor.__init__ (declared for the type checker).
    lock: threading.Lock
    name: str
    plan: Plan
    state: str
    paused: bool
    eo: bool
    rebalance: Rebalance | None
    running_since: float | None
    slots: dict[int, WorkerSlot]
    _stop_reason: str | None
    restart_all_requested: bool
    _probe_seq: int
    checkpoints: ExactlyOnceCheckpoints | None
    inspection: cm.Inspect
    samples: list[dict]

    if TYPE_CHECKING:
        def _send_all(self, msg: cm.ControlMessage) -> None: ...
        def replan(self, plan: Plan) -> None: ...
        def eo_recover(self) -> None: ...

    def set_paused(self, paused: bool) -> None:
        """Pause (Storm's deactivate) or resume the user spouts; checkpoints, acks and the
        lease go on. A worker that starts again while paused is paused too."""
        with self.lock:
            if self.state in FINAL_STATES or self._stop_reason is not None or paused == self.paused:
                return
            self.paused = paused
            self._send_all(cm.Pause() if paused else cm.Resume())
            log.info("run %s: %s", self.name, "paused (spouts deactivated)" if paused else "resumed")

    def set_inspection(self, log_level: dict, sample: dict) -> None:
        """What the workers log (``topology set-log-level``) and sample (``topology sample``);
        a worker that starts again gets it too. Each undoes its part at its expiry."""
        with self.lock:
            if (log_level, sample) == (self.inspection.log_level, self.inspection.sample):
                return
            self.inspection = cm.Inspect(log_level, sample)
            self._send_all(self.inspection)
            log.info("run %s: log level %s, sampling %s", self.name, log_level or "as configured", sample or "off")

    def take_samples(self) -> list[dict]:
        with self.lock:
            out, self.samples = self.samples, []
            return out

    def request_rebalance(self, workers: int | None, timeout: float | None = None,
                          parallelism: dict[str, int] | None = None) -> None:
        """Go on with ``workers`` worker processes (None: as many as now) and ``parallelism``
        tasks for the components named (the launcher carries it out once ``rebalance_due``): the
        spouts pause until in-flight trees drained, at most ``timeout`` seconds (default: the
        message timeout)."""
        workers = check_workers(len(self.slots) if workers is None else workers)
        with self.lock:
            if self.state in FINAL_STATES or self._stop_reason is not None or self.rebalance is not None:
                return
            wait = float(self.plan.conf.get("topology.message.timeout.secs", 30) if timeout is None else timeout)
            self.rebalance = Rebalance(workers, time.monotonic() + wait, self.paused, self._probe_seq,
                                       parallelism=dict(parallelism or {}))
            if not self.paused:
                self._send_all(cm.Pause())
            log.info("run %s: rebalancing from %d to %d worker(s)%s: spouts paused, draining in-flight trees",
                     self.name, len(self.slots), workers,
                     "".join(f", {c} to {n} task(s)" for c, n in (parallelism or {}).items()))

    def rebalance_due(self, now: float) -> Rebalance | None:
        """The rebalance once the drain is over (the launcher then stops every worker)."""
        with self.lock:
            r = self.rebalance
            return r if r is not None and self.state == RUNNING and r.due(now) else None

    def rebalance_done(self, plan: Plan) -> None:
        """Every worker is down: the run goes on with ``plan`` (same tasks, new placement)."""
        self.replan(plan)
        with self.lock:
            self.restart_all_requested = False  # a Spark launcher ended the stage through request_relaunch
            r, self.rebalance = self.rebalance, None
            self.paused = bool(r and r.was_paused)
            self.state = STARTING
            self.running_since = None
            if self.eo:
                self.eo_recover()


    def request_savepoint(self, name: str) -> str | None:
        """Take savepoint ``name`` (state/savepoints.py): exactly-once, at a checkpoint started
        now; Storm's protocol, between two checkpoints (``storm_savepoint``). None when under
        way, else why not (nothing was changed)."""
        with self.lock:
            if self.state in FINAL_STATES or self._stop_reason is not None:
                return "the run is stopping: take the savepoint once it stopped"
            if self.checkpoints is None:
                if not self.plan.stateful:
                    return "the run keeps no checkpointed state: there is nothing to save"
                threading.Thread(target=storm_savepoint, args=(self.name, self.plan, name), daemon=True,
                                 name=f"savepoint-{name}").start()
                log.info("run %s: savepoint %r asked: taken between two checkpoints", self.name, name)
                return None
            self.checkpoints.request_savepoint(name)
            log.info("run %s: savepoint %r asked: a checkpoint starts now", self.name, name)
            return None


SAVEPOINT_TRIES_SECS = 60.0  # how long a Storm-protocol run's savepoint looks for a quiet moment
HOLD_TTL_SECS = 10.0  # a savepoint's hold on new checkpoints outlives a dead taker this long at most


def storm_savepoint(topology_id: str, plan: Plan, name: str) -> None:
    """A live savepoint of a run on Storm's protocol: its checkpoint spout, not the supervisor,
    drives checkpoints, so the copy is taken while the record is COMMITTED and kept only if it
    still is, at the same txid, afterwards (tasks commit only once COMMITTING is recorded, so the
    state hashes did not move). Tried again until a checkpoint interval leaves room for it."""
    from state import savepoints
    from state.connection import connect
    from state.layout import savepoint_hold_key

    from ..api.config import state_redis_url

    client = connect(state_redis_url(plan.conf, needed_for="a savepoint"))
    deadline = time.monotonic() + SAVEPOINT_TRIES_SECS
    why = "no quiet moment between two checkpoints"
    hold = savepoint_hold_key(topology_id)
    try:
        while time.monotonic() < deadline:
            # The checkpoint spout starts no checkpoint while the hold stands: once the one under
            # way commits, the record stays COMMITTED for the copy, however short the interval.
            client.set(hold, name, px=int(HOLD_TTL_SECS * 1000))
            try:
                m = savepoints.take(client, topology_id, name)
            except savepoints.Unsettled as e:
                why = str(e)
                time.sleep(0.02)
                continue
            except savepoints.SavepointRefused as e:
                why = str(e)
                break
            log.info("run %s: savepoint %r taken at txid %d (%d task state(s))", topology_id, name, m.txid,
                     len(m.parts))
            return
        log.warning("run %s: savepoint %r not taken: %s", topology_id, name, why)
        savepoints.record_failure(client, topology_id, name, why)
    except Exception as e:  # noqa: BLE001 - a thread of its own: report, never die silently
        log.exception("run %s: savepoint %r failed", topology_id, name)
        try:
            savepoints.record_failure(client, topology_id, name, f"{type(e).__name__}: {e}")
        except Exception:  # noqa: BLE001 - Redis gone: the waiting caller times out
            pass
    finally:
        try:
            client.delete(hold)
        except Exception:  # noqa: BLE001 - Redis gone: the hold expires by itself
            pass
        client.close()
