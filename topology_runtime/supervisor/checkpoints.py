"""The supervisor's side of exactly-once checkpoints: owns the Redis client, runs the recovery
when every worker is down, and carries out what the pure ``CheckpointCoordinator`` decides
(save the checkpoint record, then send the message to every worker).

Redis lost while coordinating: the checkpoint in flight is abandoned and ``on_redis_lost`` asks
the supervisor to roll every worker back (the record may be behind what workers prepared).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis

from state.checkpoint import COMMITTED, load_checkpoint, save_checkpoint
from state.connection import connect
from state.recovery import recover_stopped
from state.replication import Replication

from ..api.config import state_redis_url, state_replication
from ..plan.planner import Plan
from ..reliability.checkpoint_coordinator import CheckpointAction, CheckpointCoordinator
from ..transport.messages import BarrierDone, Committed

log = logging.getLogger("topology.supervisor")

RECOVERY_ATTEMPTS = 120  # every worker is down: wait for Redis up to ~1 min
RECOVERY_RETRY_SECS = 0.5


class ExactlyOnceCheckpoints:
    """Checkpoint coordination of one run. ``send_all(msg)`` sends a control message to every
    worker; ``on_redis_lost()`` is called after a checkpoint was abandoned for lack of Redis.
    Both are called with the supervisor's lock held (every method here runs under it)."""

    def __init__(self, name: str, plan: Plan, send_all: Callable[[dict], None],
                 on_redis_lost: Callable[[], None], token: int | None = None) -> None:
        self.name = name
        self.token = token  # the run's fencing token: a stale run's record writes are refused
        self.asset = plan.conf.get("topology.airflow.asset")  # commits announced under it
        self.redis = connect(state_redis_url(plan.conf, needed_for="topology.state.exactly.once"))
        self.replication = Replication(*state_replication(plan.conf))  # records wait for replicas (WAIT)
        self.coordinator = CheckpointCoordinator(
            spout_tasks=(t for c in plan.topology.spouts for t in plan.component_tasks[c.id]),
            workers=range(plan.workers),
            interval_ms=plan.conf["topology.state.checkpoint.interval.ms"],
            now=time.monotonic(),
        )
        self._send_all = send_all
        self._on_redis_lost = on_redis_lost
        # Savepoints asked of the live run: taken once a checkpoint started after the request
        # commits, before the next one may start (everything here runs under one lock).
        self.savepoints: list[str] = []
        self._savepoint_from: int | None = None  # the first txid whose commit serves them
        self.recover()

    def request_savepoint(self, name: str) -> None:
        self.savepoints.append(name)
        self._savepoint_from = None

    def set_plan(self, plan: Plan) -> None:
        """The run was re-planned (between launches: nothing in flight): its workers, and after
        a rescale its spout tasks."""
        self.coordinator.workers = frozenset(range(plan.workers))
        self.coordinator.spout_tasks = frozenset(t for c in plan.topology.spouts for t in plan.component_tasks[c.id])

    @property
    def committed(self) -> int:
        return self.coordinator.committed

    def recover(self) -> None:
        """Every worker is down: settle what the last checkpoint left (roll back a PREPARING
        one, finish a COMMITTING one) so that restarted tasks start from one committed cut."""
        for attempt in range(RECOVERY_ATTEMPTS):
            try:
                report = recover_stopped(self.redis, self.name, replication=self.replication, token=self.token)
                committed = load_checkpoint(self.redis, self.name).txid
                break
            except redis.RedisError as e:
                if attempt == 0:
                    log.warning("run %s: recovery waits for Redis (%s)", self.name, e)
                time.sleep(RECOVERY_RETRY_SECS)
        else:
            raise RuntimeError(f"run {self.name}: Redis unreachable for a minute; cannot recover state")
        # Rolled back: the input must be done again before a final checkpoint can end the run.
        self.coordinator.recovered(committed)
        log.info("run %s: exactly-once recovery: %s -> %s (%s)", self.name, report.checkpoint_before,
                 report.checkpoint_after, report.decision)

    def tick(self, now: float, running: bool) -> None:
        """Start a checkpoint when one is due (``running``: the run is up and not stopping); at
        once when a savepoint waits for one."""
        c = self.coordinator
        if self.savepoints and self._savepoint_from is None and not c.in_flight and running and not c.final_done:
            c.last = float("-inf")
            action = c.tick(now, running)
            if action is not None:
                self._savepoint_from = action.txid
            self._perform(action)
            return
        self._perform(c.tick(now, running))

    def on_message(self, msg: BarrierDone | Committed) -> None:
        """A worker's BarrierDone or Committed (already checked to be of its current incarnation)."""
        if isinstance(msg, BarrierDone):
            self._perform(self.coordinator.on_barrier_done(msg.txid, msg.task))
        else:
            self._perform(self.coordinator.on_committed(msg.txid, msg.w))

    def request_final(self) -> None:
        if self.coordinator.request_final():
            log.info("run %s: input done; taking a final checkpoint", self.name)

    def _perform(self, action: CheckpointAction | None) -> None:
        if action is None:
            return
        try:
            # the record first (on enough replicas), then the message
            # A COMMITTED record here is a commit (rollbacks are recovery's): announce it.
            announce = self.asset if action.record.state == COMMITTED else None
            save_checkpoint(self.redis, self.name, action.record, self.replication, self.token, announce)
        except redis.RedisError as e:
            log.warning("run %s: checkpoint coordination lost Redis (%s); rolling back", self.name, e)
            self.coordinator.abandon(unsaved=action)
            self._on_redis_lost()
            return
        msg = action.message()
        if msg is not None:
            self._send_all(msg)
        if action.record.state == COMMITTED and self.savepoints \
                and self._savepoint_from is not None and action.txid >= self._savepoint_from:
            self._take_savepoints()

    def _take_savepoints(self) -> None:
        """Copy the state just committed; no checkpoint starts until this returns (the lock)."""
        from state import savepoints

        names, self.savepoints, self._savepoint_from = self.savepoints, [], None
        for name in names:
            try:
                m = savepoints.take(self.redis, self.name, name)
                log.info("run %s: savepoint %r taken at txid %d (%d task state(s))", self.name, name, m.txid,
                         len(m.parts))
            except (savepoints.SavepointRefused, redis.RedisError, ValueError) as e:
                log.warning("run %s: savepoint %r not taken: %s", self.name, name, e)
                try:
                    savepoints.record_failure(self.redis, self.name, name, str(e))
                except redis.RedisError:
                    pass
