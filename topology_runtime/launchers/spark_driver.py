"""The Spark driver (the run's supervisor on Spark): run a topology as one long-running PySpark job.

Started by ``spark-submit`` (``topology submit``, ``SparkCluster``, Airflow's TopologyHook):

    spark-submit --master local[2] topology_runtime/launchers/spark_main.py \
        --topology examples.wordcount:topology --name wordcount --workers 2 --redis redis://...

The driver plans the topology, takes the run's lease in Redis, and runs ONE barrier stage of W
tasks, each hosting one worker (the same worker code as LocalCluster); the tasks exchange
addresses with ``BarrierTaskContext.allGather``. A failed barrier stage is not retried by Spark,
so the driver relaunches it with a new epoch (kept in Redis), at most ``topology.max.restarts``
times. The exit code (``ExitCode``) is 0 only for a completed run (1 failed, 2 killed, 4 the
topology cannot be loaded or placed, 5 already live, 8 the id's state was written with other
state settings).

Failures a relaunch cannot fix end the run at once, with the executor's Python traceback in
this log and in the run's status (``spark_failures``): the topology's code or the interpreter
missing on an executor (exit 4), a component's ``open``/``prepare`` raising (exit 1, reported by
the worker through the control channel), fewer task slots than workers (exit 4, checked before
the first launch). Every other failed stage is logged with Spark's per-task error and relaunched.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import signal
import sys
import threading

from state.connection import redacted
from state.settings import StateSettingsChanged

from ..api.builder import TopologyError
from ..api.config import ConfigError, coerce_cli_value, layered, resolve_config
from ..api.exit_codes import ExitCode
from ..api.status import FAILED
from ..control.control_plane import ControlPlane, LeaseKeeper, RunAlreadyLive
from ..control.reporter import RunReporter
from ..plan.planner import build_plan
from ..supervisor.run_supervisor import RunSupervisor
from ..worker.process import run_worker
from ..worker.worker import WorkerSpec
from . import spark_failures as failures
from .local import load_topology, state_of
from .spark_placement import Placement

log = logging.getLogger("topology.driver")


def _barrier_partition(name: str, plan, control_address: str, secret: bytes, epoch: int, token: int):
    driver_host = control_address.rsplit(":", 1)[0].removeprefix("tcp://")

    def run(_rows):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        index = ctx.partitionId()
        host = failures.executor_address(driver_host)  # where Spark runs this task, as peers reach it
        spec = WorkerSpec(name, plan, index, epoch, control_address, secret, host=host, token=token)

        def exchange(address: str) -> dict:
            return dict(enumerate(ctx.allGather(address)))

        yield run_worker(spec, peers_from=exchange)

    return run


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    for line in text.splitlines():
        if "Exception" in line or "Error" in line or "died" in line:
            return line.strip()[:300]
    return (text.splitlines()[0][:300] if text else type(e).__name__)


def _fail_now(sup: RunSupervisor, error: str, errors: list[dict] = ()) -> None:
    """End the run as failed without a relaunch; ``errors`` (with tracebacks) go into its status."""
    sup.fail(error, errors)
    sup.all_stopped()  # no worker is running: the run is final at once


def _check_slots(sc, sup: RunSupervisor, workers: int, master: str) -> ExitCode | None:
    """Before the first launch: a barrier stage needs ``workers`` task slots at once. Waits for
    executors to register (up to ``spark.scheduler.maxRegisteredResourcesWaitingTime``); with too
    few, fails the run naming both numbers. Returns an exit code, or None to go on."""
    in_process = master == "local" or master.startswith("local[")  # slots exist with the context
    wait = 0.0 if in_process else failures.parse_secs(
        sc.getConf().get("spark.scheduler.maxRegisteredResourcesWaitingTime", None), 30.0)
    try:
        # Standalone (local-cluster too) grants a run's executors at once: 5 s after the last one
        # arrived, no more come. YARN and Kubernetes start them one by one, far apart: wait it all.
        standalone = master.startswith(("spark://", "local-cluster"))
        found = failures.wait_for_slots(sc, workers, wait, settle=5.0 if standalone else wait)
    except Exception as e:  # noqa: BLE001 - a Spark without the call: Spark's own check stays
        log.warning("cannot count the cluster's task slots (%s); Spark checks them at launch", e)
        return None
    if found >= workers:
        return None
    cpus = sc.getConf().get("spark.task.cpus", "1")
    hosts = failures.executor_hosts(sc) if not master.startswith("local") else [master]
    error = (f"the topology needs {workers} worker(s), one barrier task each, but the cluster offers {found} "
             f"task slot(s) (master {master}, executors on {', '.join(hosts) or 'no host'}, "
             f"spark.task.cpus={cpus}): submit with --workers {found} or add executors")
    log.error("%s", error)
    _fail_now(sup, error)
    return ExitCode.INVALID


def _startup_failed(sup: RunSupervisor) -> bool:
    """Has a worker reported that a component's open()/prepare() raised? Then the run fails now,
    once (the monitor checks every tick: a worker that says hello after the others were told to
    stop would otherwise wait 10 s for a supervisor that no longer talks to it)."""
    fatal = [s for s in list(sup.slots.values()) if s.startup_failures]
    if fatal and sup.error is None:
        last = next((e for e in reversed(sup.status().errors) if e.get("fatal")), {})
        sup.fail(f"worker {fatal[0].index} could not start: {last.get('error', 'see the log')}")
    return bool(fatal)


def _unrecoverable(sc, sup: RunSupervisor, group: str) -> ExitCode | None:
    """After a failed stage: log what Spark recorded for each failed task; for a failure that a
    relaunch cannot fix, end the run and return its exit code (None: relaunch)."""
    if _startup_failed(sup):  # open()/prepare() raised: the worker reported it, with its traceback
        sup.all_stopped()
        return ExitCode.FAILED
    try:
        errors = failures.task_errors(sc, group)
    except Exception as e:  # noqa: BLE001 - diagnosis only
        log.warning("cannot read the failed tasks' errors from Spark (%s)", e)
        return None
    seen = set()
    for err in errors:
        if err.summary not in seen:
            seen.add(err.summary)
            log.error("worker %d on %s (executor %s) failed: %s\n%s", err.partition, err.host, err.executor,
                      err.summary, err.python_part)
    bad = [e for e in errors if e.unfixable]
    if not bad:
        return None
    records = [{"w": e.partition, "component": None, "task": None, "fatal": True,
                "error": f"worker {e.partition} on {e.host}: {e.summary}", "traceback": e.traceback} for e in bad]
    _fail_now(sup, f"the workers cannot start on the executors ({bad[0].summary}); "
                   "a relaunch cannot fix this", records)
    return ExitCode.INVALID


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="spark_driver")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--topology", help="package.module:attribute")
    src.add_argument("--topology-file", help="a pickled Topology written by SparkCluster (trusted: your own)")
    p.add_argument("--name", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--settings", help="a 0600 JSON file {redis, conf} written by the submitter; read, then deleted")
    p.add_argument("--redis", help="the control plane's Redis (prefer --settings: a command line is public)")
    p.add_argument("--progress-interval", type=float, default=5.0, help="seconds between progress lines; 0: none")
    p.add_argument("--log-file", default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"%(asctime)s %(levelname)s [{args.name} driver] %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    conf = {}
    if args.settings:
        with open(args.settings) as f:
            settings = json.load(f)
        os.unlink(args.settings)  # read once: the secrets in it live on only in this process
        args.redis = args.redis or settings.get("redis")
        conf.update(settings.get("conf") or {})
    for item in args.conf:
        k, _, v = item.partition("=")
        conf[k] = coerce_cli_value(v)
    if not args.redis:
        print("error: no Redis URL (--settings or --redis)", flush=True)
        return ExitCode.INVALID
    try:
        if args.topology_file:
            with open(args.topology_file, "rb") as f:
                topology = load_topology(pickle.load(f))
        else:
            topology = load_topology(args.topology)
        resolved = resolve_config(layered(topology.conf, conf), workers=args.workers)
        plan = build_plan(topology, resolved)
    except (TopologyError, ConfigError) as e:
        print(f"topology {args.name!r} rejected: {e}", flush=True)
        return ExitCode.INVALID
    control = ControlPlane(args.redis)
    master = os.environ.get("MASTER", "")
    try:
        # Before the Spark job (and its session) starts: refused if the id's state was written with other settings.
        token = control.register(args.name, "spark", plan.workers, state=state_of(plan), master=master,
                                 graph=json.dumps(plan.topology.graph()),
                                 log=args.log_file)
    except RunAlreadyLive as e:
        print(f"error: {e}", flush=True)
        return ExitCode.ALREADY_LIVE
    except StateSettingsChanged as e:
        print(f"error: {e}", flush=True)
        return ExitCode.REFUSED
    lost = threading.Event()
    keeper = LeaseKeeper(control, args.name, token, lost.set)
    # SIGTERM (Airflow's mark-failed/clear, a scheduler stopping the task, `kill`): stop the
    # topology and record its final state instead of dying with it `lost`. The handler only
    # sets an event: the supervisor thread acts on it (a handler must not take the lock).
    terminated = threading.Event()
    drain_on_term = plan.conf.get("topology.sigterm.action") == "drain"

    def on_sigterm(signum, frame) -> None:
        if not terminated.is_set():
            log.warning("run %s: SIGTERM: %s the topology and recording its final state", args.name,
                        "draining" if drain_on_term else "killing")
        terminated.set()
    signal.signal(signal.SIGTERM, on_sigterm)
    log.info("run %s: plan %s", args.name, plan.describe())
    log.info("Redis control plane: %s", redacted(args.redis))

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"topology-{args.name}").getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    host = failures.driver_address(sc.getConf().get)  # the address Spark's driver uses, not loopback
    sup = RunSupervisor(args.name, plan, host=host, restart_all_on_failure=True, token=token)
    log.info("supervisor at %s", sup.control.address)
    # 0 turns progress lines off; the summary at the end is always printed.
    reporter = RunReporter(sup, control, token, progress_interval=args.progress_interval or 1e9,
                           rebalancer=lambda workers, timeout, parallelism: placement.rebalance_request(
                               workers, timeout, parallelism))
    stop_monitor = threading.Event()

    def monitor() -> None:
        while not stop_monitor.is_set():
            sup.step(50)
            if lost.is_set():
                sup.request_kill()
            if terminated.is_set() and not sup.done.is_set():
                sup.request_kill(drain=drain_on_term)
            reporter.tick()
            placement.watch()  # fewer workers than asked for: grow back when the slots return
            placement.rebalance_tick()
            _startup_failed(sup)  # open()/prepare() raised on a worker: no relaunch can fix it
            if sup.done.is_set():
                sc.cancelAllJobs()  # workers that ignored "stop" (hung user code) must not hold the driver
                stop_monitor.wait(1.0)

    placement = Placement(sc, sup, plan, control, token)
    monitor_thread = threading.Thread(target=monitor, name="supervisor", daemon=True)
    monitor_thread.start()
    exit_code = _check_slots(sc, sup, plan.workers, sc.master)  # None: enough slots for the barrier stage
    try:
        while exit_code is None:
            plan = placement.plan
            epoch = control.next_epoch(args.name)
            log.info("launching %d worker(s) as a barrier stage (epoch %d)", plan.workers, epoch)
            group = f"topology-{args.name}-{epoch}"
            sc.setJobGroup(group, f"topology {args.name} epoch {epoch}")
            rdd = sc.parallelize(range(plan.workers), plan.workers).barrier().mapPartitions(
                _barrier_partition(args.name, plan, sup.control.address, sup.secret, epoch, token))
            try:
                codes = rdd.collect()
                reason = f"workers returned with exit codes {codes}"
                if all(c == 0 for c in codes) and not sup.restart_all_requested and sup.done.wait(5.0):
                    break
            except Exception as e:  # noqa: BLE001 - a worker died: Spark failed the barrier stage
                reason = _first_line(e)
                if sup.done.is_set():
                    break
                # A SIGTERM to the whole process group kills the workers and this process at
                # once: give its handler a moment before taking the workers' death for a fault.
                if terminated.wait(0.5):  # the JVM got the signal too: the workers are gone
                    sup.request_kill()
                    sup.all_stopped()
                    break
            exit_code = _unrecoverable(sc, sup, group)  # errors a relaunch cannot fix end the run now
            if exit_code is not None or not placement.relaunch(reason):
                break
    except KeyboardInterrupt:
        sup.request_kill()
        sup.done.wait(15)
    except Exception as e:  # noqa: BLE001 - Spark itself went away (its JVM got a SIGTERM, or crashed)
        # The run still ends with a final state in the control plane, never `lost`.
        if terminated.is_set() or lost.is_set():
            sup.request_kill()
        else:
            log.exception("run %s: the Spark driver failed", args.name)
            sup.fail(f"the Spark driver failed: {_first_line(e)}")
        sup.all_stopped()
    finally:
        stop_monitor.set()
    sup.done.wait(15)
    keeper.stop()
    monitor_thread.join(5)  # it must not poll the supervisor's socket while it closes
    status = reporter.final()
    sup.close()
    try:
        spark.stop()
    except Exception as e:  # noqa: BLE001 - the JVM is gone already (it got the SIGTERM too)
        log.debug("spark.stop(): %s", e)
    if status.state == FAILED:
        log.error("run %s failed: %s", args.name, status.error)
        if exit_code is not None:
            return exit_code
    return status.exit_code


if __name__ == "__main__":
    sys.exit(main())
