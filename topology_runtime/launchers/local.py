"""LocalCluster: worker processes on this machine, supervised (restarted when they die)."""

from __future__ import annotations

import gc
import importlib
import json
import logging
import multiprocessing
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from state.layout import check_topology_id
from state.namespaces import StateComponents
from state.settings import state_settings, writes_state

from ..api.builder import Topology, TopologyError
from ..api.config import layered, resolve_config
from ..api.status import FAILED, FINAL_STATES, RunStatus
from ..control.rescale import checked_rescale, plan_rescale, record_components, state_components
from ..plan.planner import Plan, build_plan
from ..supervisor.run_supervisor import RunSupervisor
from ..worker.process import run_worker
from ..worker.worker import WorkerSpec

log = logging.getLogger("topology.local")
_fork = multiprocessing.get_context("fork")


class TopologyFailed(RuntimeError):
    def __init__(self, status: RunStatus) -> None:
        super().__init__(f"topology {status.name!r} failed: {status.error}")
        self.status = status


_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def load_topology(ref: Any) -> Topology:
    """A Topology, a function returning one, or "package.module:attribute" naming either."""
    obj = ref
    if isinstance(ref, str):
        mod_name, _, attr = ref.partition(":")
        if not _MODULE.fullmatch(mod_name) or not attr.isidentifier():
            raise TopologyError(f"topology reference {ref!r} must look like 'package.module:attribute' "
                                "(a module on PYTHONPATH, not a file path)")
        try:
            module = importlib.import_module(mod_name)
        except SyntaxError as e:
            raise TopologyError(f"topology reference {ref!r}: {mod_name!r} has a syntax error: {e.msg} "
                                f"({e.filename}, line {e.lineno})") from e
        except Exception as e:  # noqa: BLE001 - whatever the module raised while importing: the user's bug
            raise TopologyError(f"topology reference {ref!r}: importing {mod_name!r} raised "
                                f"{type(e).__name__}: {e}") from e
        try:
            obj = getattr(module, attr)
        except AttributeError:
            raise TopologyError(f"topology reference {ref!r}: module {mod_name!r} has no attribute {attr!r}") from None
    if callable(obj) and not isinstance(obj, Topology):
        try:
            obj = obj()
        except TopologyError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's factory raised
            raise TopologyError(f"topology reference {ref!r}: calling it raised {type(e).__name__}: {e}") from e
    if not isinstance(obj, Topology):
        raise TopologyError(f"{ref!r} is a {type(obj).__name__}, not a Topology (use TopologyBuilder.create_topology())")
    return obj


def state_of(plan: Plan) -> tuple[dict[str, Any], bool, StateComponents]:
    """(the run's state settings, whether it writes state that outlives it, its stateful
    components): what the control plane checks against the settings and components the id's
    committed state was written with."""
    components = state_components(plan)
    return state_settings(plan.conf), writes_state(plan.conf, plan.stateful), components


def check_state_without_control(name: str, plan: Plan) -> None:
    """A run without the control plane still keeps state in its ``redis.url`` Redis when it
    names one: the same check and record there (no lease: best effort)."""
    url = plan.conf.get("redis.url")
    if not url:
        return
    import redis

    from state import namespaces
    from state.connection import connect
    from state.settings import check_and_record

    settings, writes, components = state_of(plan)
    client = connect(str(url))
    try:
        check_and_record(client, name, settings, writes)
        namespaces.check_and_record(client, name, components, writes)
    except redis.ConnectionError:
        if writes:
            raise
        # A run that keeps no state may not need that Redis now (a spout's, later): its own
        # connections report it, as before.
        log.debug("run %s: Redis unreachable for the state settings check", name)
    finally:
        client.close()


def restore_savepoint(ref: str, name: str, plan: Plan, redis_url: str | None) -> None:
    """Write savepoint ``ref`` ("ID/NAME") into ``name`` before its run starts
    (state/savepoints.py); TopologyError for a malformed or unknown savepoint, StateSettingsChanged
    (exit 8) when the run may not start from it. Nothing is written when refused."""
    from state import savepoints
    from state.connection import connect

    url = redis_url or plan.conf.get("redis.url")
    if not url:
        raise TopologyError("from_savepoint needs the Redis that holds the savepoint (redis_url / redis.url)")
    try:
        source, sp = savepoints.parse_ref(ref)
    except ValueError as e:
        raise TopologyError(f"from_savepoint: {e}") from None
    client = connect(str(url))
    try:
        m = savepoints.restore(client, source, sp, name, state_of(plan)[2])
    except savepoints.NoSuchSavepoint as e:
        raise TopologyError(str(e)) from None
    finally:
        client.close()
    log.info("run %s: state restored from savepoint %s/%s (txid %d)", name, source, sp, m.txid)


def _worker_main(spec: WorkerSpec) -> None:
    import os
    import sys

    os.environ.setdefault("TOPOLOGY_WORKER_INDEX", str(spec.index))
    sys.exit(run_worker(spec))


class LocalRun:
    """Handle of a submitted run: status, wait, kill."""

    def __init__(self, name: str, topology: Topology, conf: Mapping[str, Any] | None, workers: int,
                 redis_url: str | None = None, progress_interval: float | None = None,
                 from_savepoint: str | None = None) -> None:
        conf = layered(topology.conf, conf)
        resolved = resolve_config(conf)
        if "topology.workers" not in conf:
            resolved["topology.workers"] = workers
        self.name = name
        self.plan = build_plan(topology, resolved)
        self.control = self.keeper = None
        token = None
        if from_savepoint:
            restore_savepoint(from_savepoint, name, self.plan, redis_url)
        if redis_url:  # optional: makes the run visible to `topology status/list/kill`
            from ..control.control_plane import ControlPlane

            self.control = ControlPlane(redis_url)
            # before any state is touched; refused if the id's state was written with other settings
            token = self.control.register(name, "local", self.plan.workers, state=state_of(self.plan),
                                          graph=json.dumps(self.plan.topology.graph()))
        else:
            check_state_without_control(name, self.plan)
        try:
            self.supervisor = RunSupervisor(name, self.plan, token=token)
        except BaseException:
            if self.control is not None and token is not None:
                self.control.release(name, token)
            raise
        if self.control is not None:
            from ..control.control_plane import LeaseKeeper

            self.keeper = LeaseKeeper(self.control, name, token, lambda: self.supervisor.request_kill())
        self.token = token
        from ..control.reporter import RunReporter

        self.reporter = RunReporter(self.supervisor, self.control, token, progress_interval,
                                    rebalancer=self._rebalance_request)
        self.procs: dict[int, multiprocessing.Process] = {}
        self.incarnations: dict[int, int] = {}
        for i in range(self.plan.workers):
            self._start(i, 0)
        self._thread = threading.Thread(target=self._supervise, name=f"supervisor-{name}", daemon=True)
        self._thread.start()

    def _start(self, index: int, incarnation: int) -> None:
        spec = WorkerSpec(self.name, self.plan, index, incarnation, self.supervisor.control.address,
                          self.supervisor.secret, token=self.token)
        p = _fork.Process(target=_worker_main, args=(spec,), name=f"{self.name}-worker-{index}", daemon=True)
        # The child inherits this process's heap: frozen around the fork, it lands in the child's
        # permanent generation, so the worker's start-up collection does not walk it (a driver
        # holding a million rows: ~0.3 s a worker) and its pages are not touched (copy-on-write).
        gc.freeze()
        try:
            p.start()
        finally:
            gc.unfreeze()
        self.procs[index] = p
        self.incarnations[index] = incarnation

    def _restart_all(self) -> None:
        """Exactly-once rollback: stop every worker, settle the state, start them all again."""
        self._stop_all()
        self.supervisor.restart_all_done()
        for i in list(self.procs):
            self._start(i, self.incarnations[i] + 1)

    def _rebalance_request(self, workers: int | None, timeout: float | None,
                           parallelism: dict[str, int] | None = None) -> str | None:
        """None once under way, else why not (nothing changed): a rescale the id's state does not
        allow is refused here, before the spouts pause."""
        _, refused = plan_rescale(self.control, self.name, self.plan, workers or self.plan.workers, parallelism)
        if refused is not None:
            return refused
        self.supervisor.request_rebalance(workers, timeout, parallelism)  # ValueError: a bad worker count
        return None

    def _rebalance(self, workers: int, parallelism: dict[str, int]) -> None:
        """Stop every worker, then start ``workers`` of them: the same tasks (replan), or after a
        rescale the new numbers (checked again now: state may have changed while draining)."""
        self._stop_all()
        plan, refused = plan_rescale(self.control, self.name, self.plan, workers, parallelism)
        if refused is not None:
            log.warning("run %s: rescale refused after the drain, going on as it was: %s", self.name, refused)
            if self.control is not None:
                self.control.refuse_rebalance(self.name, refused)
        log.info("run %s: rebalance: every worker stopped; starting %d", self.name, workers)
        self.supervisor.rebalance_done(plan)  # exactly-once: the state settles under the old numbers
        record_components(self.control, self.name, self.token, plan)
        self.plan = plan
        old, self.procs, self.incarnations = self.incarnations, {}, {}
        for i in range(workers):
            self._start(i, old.get(i, -1) + 1)

    def _stop_all(self) -> None:
        for p in self.procs.values():
            if isinstance(p, multiprocessing.process.BaseProcess) and p.is_alive():
                p.kill()
        for p in self.procs.values():
            if isinstance(p, multiprocessing.process.BaseProcess):
                p.join(10)

    @property
    def pids(self) -> dict[int, int]:
        return {i: p.pid for i, p in self.procs.items() if p.is_alive()}

    def _supervise(self) -> None:
        sup = self.supervisor
        try:
            while not sup.done.is_set():
                sup.step(50)
                self.reporter.tick()
                if sup.restart_all_requested:
                    self._restart_all()
                    continue
                target = sup.rebalance_due(time.monotonic())
                if target is not None:
                    self._rebalance(target.workers, target.parallelism)
                    continue
                for i, p in list(self.procs.items()):
                    if p.exitcode is not None and p.pid is not None:
                        code = p.exitcode
                        if sup.worker_exited(i, code):
                            self._start(i, self.incarnations[i] + 1)
                        else:
                            self.procs[i] = _Exited(code)
                if all(isinstance(p, _Exited) for p in self.procs.values()):
                    sup.all_stopped()
        except Exception:  # the supervisor must never die silently
            log.exception("supervisor of run %s crashed", self.name)
            with sup.lock:
                sup.error = "supervisor crashed (see log)"
                sup._stop_reason = FAILED
                sup._finish()
        finally:
            for p in self.procs.values():
                if isinstance(p, multiprocessing.process.BaseProcess):
                    p.join(5)
                    if p.is_alive():
                        p.kill()
                        p.join(2)
            if self.keeper is not None:
                self.keeper.stop()
            self.final_status = self.reporter.final()
            sup.close()

    def status(self) -> RunStatus:
        return self.supervisor.status()

    def wait(self, timeout: float | None = None) -> RunStatus:
        if not self.supervisor.done.wait(timeout):
            raise TimeoutError(f"run {self.name!r} has not ended after {timeout}s (state {self.status().state})")
        self._thread.join(10)
        return self.status()

    def kill(self, drain: bool = False, timeout: float | None = 60) -> RunStatus:
        self.supervisor.request_kill(drain=drain)
        return self.wait(timeout)

    def rebalance(self, workers: int | None = None, parallelism: Mapping[str, int] | None = None,
                  timeout: float | None = None) -> None:
        """Go on with ``workers`` worker processes and ``parallelism`` tasks for the components
        named: the spouts pause until in-flight trees finish (at most ``timeout`` s, default the
        message timeout), every worker stops, the new shape starts with the state. Returns once
        asked; ``status()`` tells. TopologyError (an unknown component, a bad number) and
        StateComponentsChanged (state that cannot follow its keys) before anything changes."""
        if parallelism:
            checked_rescale(self.control, self.name, self.plan, workers or self.plan.workers, parallelism)
        if workers is not None or parallelism:
            self.supervisor.request_rebalance(workers, timeout, dict(parallelism or {}))

    def savepoint(self, name: str | None = None, timeout: float = 120.0) -> str:
        """Take a savepoint at a checkpoint started now (exactly-once runs) and return its name
        once taken; SavepointRefused if it cannot be."""
        from state import savepoints
        from state.connection import connect

        from ..api.config import state_redis_url

        sp = name or savepoints.default_name()
        refused = self.supervisor.request_savepoint(sp)
        if refused is not None:
            raise savepoints.SavepointRefused(refused, self.name)
        client = connect(state_redis_url(self.plan.conf))
        deadline = time.monotonic() + timeout
        try:
            while True:
                if client.hexists(savepoints.savepoints_key(self.name), sp):
                    return sp
                why = savepoints.failure(client, self.name, sp)
                if why is not None:
                    raise savepoints.SavepointRefused(why, self.name)
                if self.done or time.monotonic() >= deadline:
                    raise TimeoutError(f"run {self.name!r}: savepoint {sp!r} not taken "
                                       f"({'the run ended' if self.done else f'after {timeout}s'})")
                time.sleep(0.1)
        finally:
            client.close()

    def pause(self) -> None:
        """Deactivate the spouts (Storm's deactivate); in-flight trees finish, checkpoints go on."""
        self._set_paused(True)

    def resume(self) -> None:
        self._set_paused(False)

    def _set_paused(self, paused: bool) -> None:
        if self.control is not None:  # the record too: `topology pause/resume` and this agree
            self.control.request_pause(self.name, paused)
        self.supervisor.set_paused(paused)

    @property
    def done(self) -> bool:
        return self.supervisor.done.is_set()


class _Exited:
    def __init__(self, code: int | None) -> None:
        self.exitcode = code
        self.pid = None

    def is_alive(self) -> bool:
        return False


class ClusterBase:
    """What every launcher shares: ``run`` = submit + wait, and killing live runs on exit."""

    runs: dict

    def submit(self, name: str, topology: Any, conf: Mapping[str, Any] | None = None,
               from_savepoint: str | None = None):
        raise NotImplementedError

    def run(self, name: str, topology: Any, conf: Mapping[str, Any] | None = None,
            timeout: float | None = None, from_savepoint: str | None = None) -> RunStatus:
        """Run a bounded topology to its end; raises TimeoutError (after killing it) or
        TopologyFailed."""
        run = self.submit(name, topology, conf, from_savepoint=from_savepoint) if from_savepoint else \
            self.submit(name, topology, conf)
        try:
            status = run.wait(timeout)
        except TimeoutError:
            run.kill(timeout=30)
            raise
        if status.state == FAILED:
            raise TopologyFailed(status)
        return status

    def shutdown(self) -> None:
        for run in self.runs.values():
            if not run.done:
                run.kill(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


class LocalCluster(ClusterBase):
    """Runs topologies on worker processes of this machine (the same worker code as Spark)."""

    def __init__(self, workers: int = 2, redis_url: str | None = None, progress_interval: float | None = None) -> None:
        if workers < 1:
            raise ValueError(f"LocalCluster: workers must be >= 1, got {workers}")
        self.workers = workers
        self.redis_url = redis_url
        self.progress_interval = progress_interval
        self.runs: dict[str, LocalRun] = {}

    def submit(self, name: str, topology: Any, conf: Mapping[str, Any] | None = None,
               from_savepoint: str | None = None) -> LocalRun:
        """Start a run; ``from_savepoint`` ("ID/NAME"): its state from that savepoint first."""
        check_topology_id(name)  # before anything is started or written
        live = self.runs.get(name)
        if live is not None and not live.done:
            raise RuntimeError(f"a run named {name!r} is already live in this cluster")
        run = LocalRun(name, load_topology(topology), conf, self.workers, self.redis_url, self.progress_interval,
                       from_savepoint)
        self.runs[name] = run
        return run



__all__ = ["LocalCluster", "LocalRun", "TopologyFailed", "load_topology", "state_of", "FINAL_STATES"]
