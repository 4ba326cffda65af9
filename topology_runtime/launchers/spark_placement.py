"""How many workers each launch of a Spark run gets, and when the next launch happens.

A barrier stage needs one task slot per worker, all at once. When a node is lost its slots go
with it, and launching the same number of workers again would fail until it comes back. So after
a failed stage the driver waits the back-off (``topology.restart.backoff.*``), counts the slots
the cluster offers, and re-plans the same tasks onto that many workers (``plan.replan``: same
task ids, so state namespaces do not move). While a run is smaller than asked for, ``watch``
looks for the slots to return and then relaunches it at full size.
"""

from __future__ import annotations

import logging
import time

from ..api.status import RUNNING
from ..control.control_plane import ControlPlane
from ..control.rescale import plan_rescale, record_components
from ..plan.planner import Plan, replan
from ..supervisor.restart_backoff import RestartBackoff
from ..supervisor.run_supervisor import RunSupervisor
from . import spark_failures as failures

log = logging.getLogger("topology.driver")
GROW_CHECK_SECS = 5.0  # while smaller than asked for: how often the slots are counted
SLOT_WAIT_SECS = 5.0  # after a failure: how long to wait for slots to (re)appear


class Placement:
    def __init__(self, sc, sup: RunSupervisor, plan: Plan, control: ControlPlane | None = None,
                 token: int | None = None) -> None:
        self.sc, self.sup = sc, sup
        self.plan = plan
        self.control, self.token = control, token
        self.desired = plan.workers
        self._rescale: dict[str, int] = {}  # the components' new numbers of tasks, for the rebalance under way
        self.backoff = RestartBackoff.from_conf(plan.conf)
        self._growing = False
        self._rebalancing = False
        self._next_check = 0.0

    def rebalance_request(self, workers: int | None, timeout: float | None,
                          parallelism: dict[str, int] | None = None) -> str | None:
        """A rebalance asked of the run: refused (nothing changed) when the cluster cannot give
        ``workers`` task slots at once, or the id's state does not allow the rescale; else the
        spouts pause and drain (``rebalance_tick``)."""
        workers = workers or self.plan.workers
        found = failures.slots(self.sc)
        if workers > found:
            return (f"the cluster offers {found} task slot(s): a barrier stage of {workers} worker(s) could not "
                    f"start (at most {found})")
        _, refused = plan_rescale(self.control, self.sup.name, self.plan, workers, parallelism)
        if refused is not None:
            return refused
        self.sup.request_rebalance(workers, timeout, parallelism)
        return None

    def rebalance_tick(self) -> None:
        """From the supervisor loop: once drained, end the stage; ``relaunch`` starts the new one."""
        target = self.sup.rebalance_due(time.monotonic())
        if target is not None and not self._rebalancing:
            log.info("rebalance: relaunching the barrier stage with %d worker(s)", target.workers)
            self.desired = target.workers
            self._rescale = dict(target.parallelism)
            self._rebalancing = True
            self.sup.request_relaunch()

    def relaunch(self, reason: str) -> bool:
        """The stage ended without the run ending. True: launch ``self.plan`` again (re-planned
        onto the slots there are); False: the run is over (failed, killed, or given up)."""
        if self._rebalancing:  # stopped for a rebalance: the same tasks on the new number, no failure
            self._rebalancing = False
            found = failures.wait_for_slots(self.sc, self.desired, SLOT_WAIT_SECS, settle=2.0)
            plan, refused = plan_rescale(self.control, self.sup.name, self.plan, max(1, min(self.desired, found)),
                                         self._rescale)
            if refused is not None:
                log.warning("rescale refused after the drain, going on as it was: %s", refused)
                if self.control is not None:
                    self.control.refuse_rebalance(self.sup.name, refused)
            self.sup.rebalance_done(plan)  # exactly-once: the state settles under the old numbers
            record_components(self.control, self.sup.name, self.token, plan)
            self.plan = plan
            return not self.sup.done.is_set()
        if self._growing:  # we stopped it ourselves to grow back: no failure, no wait
            self._growing = False
            delay: float | None = 0.0
        else:
            if self.sup.running_since is not None:
                self.backoff.started(self.sup.running_since)
            delay = self.backoff.failed(time.monotonic())
        if not self.sup.stage_failed(reason, give_up=delay is None):
            return False
        if delay:
            log.warning("relaunching in %.1f s (failure %d in a row)", delay, self.backoff.streak)
            if self.sup.done.wait(delay):
                return False
        while True:
            found = failures.wait_for_slots(self.sc, self.desired, SLOT_WAIT_SECS, settle=2.0)
            if found >= 1:
                break
            delay = self.backoff.failed(time.monotonic())
            if delay is None:
                self.sup.fail(f"the cluster offers no task slot for run {self.sup.name!r} and the back-off "
                              "gave up (topology.max.restarts consecutive failures)")
                self.sup.all_stopped()
                return False
            log.warning("the cluster offers no task slot; looking again in %.1f s", delay)
            if self.sup.done.wait(max(delay, 1.0)):
                return False
        workers = min(self.desired, found)
        if workers != self.plan.workers:
            if workers < self.desired:
                log.warning("the cluster offers %d task slot(s) for %d worker(s): running the same tasks on %d "
                            "worker(s) until the slots return", found, self.desired, workers)
            self.plan = replan(self.plan, workers)
            self.sup.replan(self.plan)
        return True

    def watch(self) -> None:
        """From the supervisor loop: a run smaller than asked for grows back once the cluster
        offers the slots again (one relaunch: workers stop, the stage ends, ``relaunch``)."""
        if self.plan.workers >= self.desired or self._growing or self._rebalancing or self.sup.state != RUNNING:
            return
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + GROW_CHECK_SECS
        try:
            found = failures.slots(self.sc)
        except Exception as e:  # noqa: BLE001 - diagnosis only: try again later
            log.debug("cannot count task slots: %s", e)
            return
        if found >= self.desired:
            log.info("the cluster offers %d task slot(s) again: relaunching on %d worker(s)", found, self.desired)
            self._growing = True
            self.sup.request_relaunch()
