"""SparkCluster: LocalCluster's interface, each run a PySpark application via spark-submit.

This module does not import pyspark (only the driver does); it builds the spark-submit
command, starts it, and reads the run's status from the Redis control plane.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..api.builder import Topology
from ..api.config import layered, resolve_config
from ..api.status import FAILED, FINAL_STATES, STARTING, RunStatus
from ..control.control_plane import ControlPlane, status_from_dict
from ..plan.planner import Plan, build_plan
from .local import ClusterBase, load_topology, state_of
from .shipping import is_local_master, ship
from .spark_failures import is_loopback, route_source

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DRIVER_SCRIPT = Path(__file__).resolve().parent / "spark_main.py"

DEFAULT_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Fail fast instead of retrying for minutes when there are fewer slots than workers.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "2s",
    "spark.python.worker.reuse": "false",
}


EXECUTOR_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DRIVER_LOG4J2 = Path(__file__).resolve().parent / "log4j2-driver.properties"  # WARN and up


def master_host(master: str) -> str | None:
    """The (first) host of a ``spark://`` or ``k8s://`` master URL; None for yarn and local."""
    if master.startswith("k8s://"):
        rest = master[len("k8s://"):]
        return urlsplit(rest if "://" in rest else f"https://{rest}").hostname
    if master.startswith("spark://"):
        return urlsplit("spark://" + master[len("spark://"):].split(",")[0]).hostname
    return None


def spark_env(master: str = "local[2]", extra_pythonpath: list[str] | None = None) -> dict[str, str]:
    """Environment for spark-submit. ``local`` masters: executors run this venv's Python and
    everything binds 127.0.0.1 (unless set). Cluster masters: executors get their interpreter
    from ``spark.pyspark.python`` (shipping.ship), and a loopback ``SPARK_LOCAL_IP`` inherited
    from the environment (the Makefile used to export one) is dropped unless the master is on
    loopback too: a driver bound to loopback cannot be reached from other machines."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local_master(master):
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    else:
        env.pop("PYSPARK_PYTHON", None)
        host = master_host(master)
        if is_loopback(env.get("SPARK_LOCAL_IP")) and not (host and is_loopback(host)):
            env.pop("SPARK_LOCAL_IP")
    paths = [str(PROJECT_ROOT), os.getcwd(), *(extra_pythonpath or [])]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def driver_host(master: str, env: Mapping[str, str], spark_conf: Mapping[str, str]) -> str | None:
    """``spark.driver.host`` for a cluster master when nothing sets it: this machine's address on
    the route to the master (what the cluster sees of it). None: Spark's own choice stands
    (``SPARK_LOCAL_IP``, the user's conf, local and yarn masters, a master on loopback)."""
    if is_local_master(master) or spark_conf.get("spark.driver.host") or env.get("SPARK_LOCAL_IP"):
        return None
    host = master_host(master)
    if not host or is_loopback(host):
        return None
    try:
        return route_source(host)
    except OSError:
        return None


@dataclass
class SubmitParts:
    """Everything a spark-submit of a topology takes besides the application's arguments."""

    conf: dict[str, str]
    py_files: list[str]
    archives: list[str]
    env: dict[str, str]
    notes: list[str]


def _csv(items: str | Sequence[str] | None) -> list[str]:
    if not items:
        return []
    if isinstance(items, str):
        items = [items]
    return [p.strip() for item in items for p in item.split(",") if p.strip()]


def submit_parts(master: str, topology: Any, workers: int, spark_conf: Mapping[str, str] | None = None,
                 py_files: str | Sequence[str] | None = None, archives: str | Sequence[str] | None = None,
                 python_env: str | None = "auto", executor_python: str | None = None,
                 deploy_mode: str | None = None) -> SubmitParts:
    """Spark conf, py-files, archives and environment of a submit of ``topology`` to ``master``:
    this project's defaults, what shipping adds for a cluster master (docs/cluster.md), the
    driver's address, ``spark.cores.max`` on standalone; the user's own settings win and their
    py-files and archives are added to ours."""
    user = {k: str(v) for k, v in (spark_conf or {}).items()}
    env = spark_env(master)
    lock = PROJECT_ROOT / "requirements.lock"
    shipment = ship(master, topology, python_env, executor_python, user, deploy_mode,
                    lock=lock if lock.is_file() else None,
                    search_path=[*sys.path, *env["PYTHONPATH"].split(os.pathsep)])  # as the driver will search
    conf = {**DEFAULT_SPARK_CONF, **{k: v for k, v in user.items() if k not in shipment.conf}, **shipment.conf}
    if master.startswith("spark://"):
        if "spark.cores.max" not in user:
            # A long-running job takes only the cores its barrier tasks use, not the whole cluster.
            conf["spark.cores.max"] = str(workers * int(user.get("spark.task.cpus", "1")))
        # Python workers talk to their JVM over Unix sockets, not loopback TCP ports (the socket
        # lives in java.io.tmpdir: short on standalone nodes; YARN's container dirs may be too long).
        conf.setdefault("spark.python.unix.domain.socket.enabled", "true")
    if not is_local_master(master):
        # An executor JVM only relays for its Python workers (barrier syncs, task plumbing): C1
        # alone and the serial collector start it ~1-3 s sooner (bench/README.md), at no cost here.
        conf.setdefault("spark.executor.extraJavaOptions", EXECUTOR_JAVA_OPTIONS)
    host = driver_host(master, env, user)
    if host:
        conf["spark.driver.host"] = host
    if deploy_mode != "cluster" and "log4j2.configurationFile" not in conf.get("spark.driver.extraJavaOptions", ""):
        # Spark's INFO start-up lines (40-odd) stay out of the driver's log; the user's file wins.
        opts = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = f"{opts} -Dlog4j2.configurationFile=file:{DRIVER_LOG4J2}".strip()
    return SubmitParts(conf, [*shipment.py_files, *_csv(py_files)], [*shipment.archives, *_csv(archives)], env,
                       shipment.notes)


def driver_args(name: str, topology_ref: str | None, topology_file: str | None, workers: int,
                conf: Mapping[str, Any] | None, redis_url: str, progress_interval: float = 5.0,
                log_file: str | None = None) -> list[str]:
    args = ["--name", name, "--workers", str(workers), "--settings", write_settings(redis_url, conf),
            "--progress-interval", str(progress_interval or 0)]
    args += ["--topology", topology_ref] if topology_ref else ["--topology-file", str(topology_file)]
    if log_file:
        args += ["--log-file", log_file]
    return args


def write_settings(redis_url: str, conf: Mapping[str, Any] | None) -> str:
    """The driver's Redis URL and topology config (either may hold a password) in a file only
    this user can read; its path goes on the command line instead of them (a command line is
    readable by anyone on the machine, and spark-submit's is logged). The driver deletes it."""
    import json

    fd, path = tempfile.mkstemp(prefix="topology-driver-", suffix=".json")  # mode 0600
    with os.fdopen(fd, "w") as f:
        json.dump({"redis": redis_url, "conf": dict(conf or {})}, f)
    return path


def spark_submit_command(master: str, app_args: list[str], spark_conf: Mapping[str, str] | None = None,
                         name: str = "topology", deploy_mode: str | None = None,
                         py_files: Sequence[str] = (), archives: Sequence[str] = ()) -> list[str]:
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", master, "--name", f"topology-{name}"]
    if deploy_mode:
        cmd += ["--deploy-mode", deploy_mode]
    for k, v in {**DEFAULT_SPARK_CONF, **(spark_conf or {})}.items():
        cmd += ["--conf", f"{k}={v}"]
    if py_files:
        cmd += ["--py-files", ",".join(py_files)]
    if archives:
        cmd += ["--archives", ",".join(archives)]
    return cmd + [str(DRIVER_SCRIPT), *app_args]


def preflight(control: ControlPlane, name: str, topology: Topology, conf: Mapping[str, Any] | None,
              workers: int) -> Plan:
    """What a Spark submit checks before spark-submit starts: the conf (the topology's own
    under ``conf``, as the driver resolves it) and the plan, then that the id's committed state
    was written with this run's state settings and stateful components (StateSettingsChanged
    names each setting that differs, its StateComponentsChanged each component whose
    parallelism changed or that is missing; the driver checks again when it takes the lease).
    Returns the plan."""
    plan = build_plan(topology, resolve_config(layered(topology.conf, conf), workers=workers))
    settings, _, components = state_of(plan)
    control.check_state_settings(name, settings, components)
    return plan


class SparkRun:
    def __init__(self, cluster: SparkCluster, name: str, topology: Any, conf: Mapping[str, Any] | None) -> None:
        self.name = name
        self.control = ControlPlane(cluster.redis_url)
        self._topology_file = None
        ref = topology if isinstance(topology, str) else None
        topo: Topology = load_topology(topology)
        # Fail fast, in the caller: a bad conf, or state written with other settings.
        self.plan = preflight(self.control, name, topo, conf, cluster.workers)
        if ref is None:  # an object: pickled into the job (the user's own process, so trusted)
            fd, path = tempfile.mkstemp(prefix=f"topology-{name}-", suffix=".pkl")
            os.close(fd)
            _pickle_topology(topo, path)
            self._topology_file = path
        self.log_path = Path(cluster.log_dir) / f"{name}-{int(time.time())}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        args = driver_args(name, ref, self._topology_file, cluster.workers, conf, cluster.redis_url,
                           cluster.progress_interval, str(self.log_path))
        parts = submit_parts(cluster.master, ref or topo, cluster.workers, cluster.spark_conf, cluster.py_files,
                             cluster.archives, cluster.python_env, cluster.executor_python)
        cmd = spark_submit_command(cluster.master, args, parts.conf, name, py_files=parts.py_files,
                                   archives=parts.archives)
        self._log = open(self.log_path, "wb")
        for note in parts.notes:
            self._log.write(f"shipping {note}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=parts.env,
                                     cwd=os.getcwd(), start_new_session=True)
        self.started = time.monotonic()

    def status(self) -> RunStatus:
        rec = self.control.get(self.name)
        if rec is None or rec.status is None:
            state = STARTING if self.proc.poll() is None else FAILED
            return RunStatus(self.name, state, error=None if state == STARTING else self._tail())
        st = status_from_dict(rec.status)
        if self.proc.poll() is not None and st.state not in FINAL_STATES:
            st.state, st.error = FAILED, st.error or f"driver exited with code {self.proc.returncode}: {self._tail()}"
        return st

    @property
    def pids(self) -> dict[int, int]:
        rec = self.control.get(self.name)
        workers = (rec.status or {}).get("workers", {}) if rec else {}
        return {int(i): w["pid"] for i, w in workers.items() if w.get("pid")}

    def _tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def wait(self, timeout: float | None = None) -> RunStatus:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"run {self.name!r} has not ended after {timeout}s") from None
        self._log.close()
        if self._topology_file:
            Path(self._topology_file).unlink(missing_ok=True)
        return self.status()

    def kill(self, drain: bool = False, timeout: float | None = 60) -> RunStatus:
        if not self.control.request_kill(self.name, drain=drain) and self.proc.poll() is None:
            self.proc.terminate()
        return self.wait(timeout)

    def pause(self) -> None:
        """Deactivate the spouts (through the control records: the driver applies it)."""
        self.control.request_pause(self.name, True)

    def resume(self) -> None:
        self.control.request_pause(self.name, False)

    def savepoint(self, name: str | None = None, wait: float = 120.0) -> str:
        """Take a savepoint of the live exactly-once run (through the control records: the driver
        takes it at a checkpoint it starts at once); returns its name."""
        from ..control import day_two

        return day_two.savepoint(self.control, self.name, name, wait).name

    @property
    def done(self) -> bool:
        return self.proc.poll() is not None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class SparkCluster(ClusterBase):
    """Same interface as LocalCluster; runs go through spark-submit onto ``master``."""

    def __init__(self, master: str = "local[2]", workers: int = 2, redis_url: str | None = None,
                 spark_conf: Mapping[str, str] | None = None, log_dir: str | None = None,
                 progress_interval: float = 5.0, python_env: str = "auto", executor_python: str | None = None,
                 py_files: str | Sequence[str] | None = None, archives: str | Sequence[str] | None = None) -> None:
        """``python_env``, ``executor_python``, ``py_files``, ``archives``: what a cluster master's
        executors get (launchers/shipping.py, docs/cluster.md); ``local`` masters need none of it."""
        self.master = master
        self.python_env = python_env
        self.executor_python = executor_python
        self.py_files = py_files
        self.archives = archives
        self.workers = workers
        if redis_url is None:
            from ..control.redis_server import resolve_redis_url

            redis_url = resolve_redis_url(None)[0]
        self.redis_url = redis_url
        self.spark_conf = dict(spark_conf or {})
        self.log_dir = log_dir or str(Path(tempfile.gettempdir()) / "topology-spark-logs")
        self.progress_interval = progress_interval
        self.runs: dict[str, SparkRun] = {}

    def submit(self, name: str, topology: Any, conf: Mapping[str, Any] | None = None,
               from_savepoint: str | None = None) -> SparkRun:
        if from_savepoint:
            topology = restore_before_submit(from_savepoint, name, topology, conf, self.workers, self.redis_url)
        run = SparkRun(self, name, topology, conf)
        self.runs[name] = run
        return run



def restore_before_submit(ref: str, name: str, topology: Any, conf: Mapping[str, Any] | None, workers: int,
                          redis_url: str | None) -> Topology:
    """Write savepoint ``ref`` into ``name`` before the job is submitted (local.restore_savepoint:
    TopologyError for an unknown one, StateSettingsChanged when the run may not start from it).
    Returns the loaded topology."""
    from ..api.config import layered, resolve_config
    from ..plan.planner import build_plan
    from .local import restore_savepoint

    topology = load_topology(topology)
    resolved = resolve_config(layered(topology.conf, conf))
    resolved.setdefault("topology.workers", workers)
    restore_savepoint(ref, name, build_plan(topology, resolved), redis_url)
    return topology


def _pickle_topology(topology: Topology, path: str) -> None:
    # cloudpickle (shipped with pyspark) pickles classes defined in __main__ or tests by value.
    try:
        from pyspark import cloudpickle
    except ImportError:  # pragma: no cover
        import cloudpickle  # type: ignore
    with open(path, "wb") as f:
        f.write(cloudpickle.dumps(topology))


__all__ = ["SparkCluster", "SparkRun", "SubmitParts", "driver_args", "preflight", "spark_env", "spark_submit_command",
           "submit_parts"]
