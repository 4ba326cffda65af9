"""TopologyHook: owns spark-submit (through the Spark provider's SparkSubmitHook) and the
topology's Redis control plane. Operators, the sensor and the trigger stay thin."""

from __future__ import annotations

import collections
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook

from state import RecoveryReport, recover
from state.checkpoint import COMMITTED, load_checkpoint
from state.layout import ctl_key
from state.transactional import current_txid
from topology_runtime.api.exit_codes import ExitCode
from topology_runtime.api.status import FINAL_STATES
from topology_runtime.control.control_plane import ControlPlane, RunRecord, status_from_dict
from topology_runtime.control.reporter import progress_line
from topology_runtime.launchers.spark import DRIVER_SCRIPT, SubmitParts, driver_args, submit_parts

# A log line of the driver or of Spark (timestamped); the reporter's summary lines are not.
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|\d\d/\d\d/\d\d \d\d:\d\d:\d\d)")


# The driver's own one-line reasons for not running: a rejected topology (ExitCode.INVALID), an
# id already live (ExitCode.ALREADY_LIVE), a failed run's summary ("error: ...").
_REASON = re.compile(r"^(error: .+|topology '.+' rejected: .+)$")
_EXIT_CODE = re.compile(r"Error code is: (-?\d+)")
_GONE_POLLS = 3  # polls without a lease and without a final state: the driver vanished


class _DriverSubmit(SparkSubmitHook):
    """SparkSubmitHook that keeps the driver's last output lines, so a failure can be reported
    by its reason rather than by spark-submit's command line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tail: collections.deque[str] = collections.deque(maxlen=200)

    def _process_spark_submit_log(self, itr: Any) -> None:
        def tee() -> Iterator[str]:
            for line in itr:
                self.tail.append(line.rstrip("\n"))
                yield line
        return super()._process_spark_submit_log(tee())

    def reason(self) -> str | None:
        return driver_reason(self.tail)


def driver_reason(lines: Any) -> str | None:
    """The driver's own last one-line reason for not running, among its output ``lines`` (however
    many lines of Spark's shutdown follow it)."""
    return next((m.group(1) for line in reversed(list(lines)) if (m := _REASON.match(line.strip()))), None)


def submit_failure(name: str, reason: str | None, code: int | None) -> str:
    """A failed submit's message, its reason first: ``topology 'x' failed: <the run's error>``,
    ``topology 'x' rejected: ...``, ``topology 'x' is already live ...``."""
    if reason is None:
        return f"topology {name!r}: spark-submit failed before the driver gave a reason"
    text = reason.removeprefix("error: ")
    if code == ExitCode.FAILED:
        return f"topology {name!r} failed: {text}"
    if code == ExitCode.KILLED:
        return f"topology {name!r} was killed: {text}"
    return text


def started_by(rec: RunRecord | None, dag_id: str, run_id: str, task_id: str) -> bool:
    """Is ``rec`` a live run that this DAG run's task started (an earlier try of it)?"""
    return bool(rec and rec.live and rec.info.get("dag_id") == dag_id and rec.info.get("dag_run_id") == run_id
                and rec.info.get("task_id") == task_id)


@dataclass
class DetachedRun:
    """A driver started by :meth:`TopologyHook.start_detached`; what the trigger needs to follow it."""

    name: str
    log_file: str
    pid: int
    host: str
    master: str
    deploy_mode: str
    submitted: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_driver_log_dir() -> str:
    """``<[logging] base_log_folder>/topology``: beside Airflow's own logs, on the worker's disk."""
    try:
        from airflow.configuration import conf

        base = conf.get("logging", "base_log_folder")
    except Exception:  # noqa: BLE001 - outside a configured Airflow: fall back to the temp dir
        import tempfile

        base = tempfile.gettempdir()
    return str(Path(base) / "topology")


def driver_summary(log_text: str, name: str) -> list[str]:
    """The reporter's end summary (``run 'NAME' STATE after ...``, the table, errors, traceback)
    from a driver log: the last such block, up to the next timestamped log line."""
    lines = log_text.splitlines()
    head = f"run {name!r} "
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith(head)), None)
    if start is None:
        return []
    out = [lines[start]]
    for line in lines[start + 1:]:
        if _LOG_LINE.match(line):
            break
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out


def failure_lines(status: dict[str, Any] | None) -> list[str]:
    """The failing component(s), task(s) and traceback(s) of a run, from its RunStatus ``errors``."""
    lines: list[str] = []
    for err in ((status or {}).get("errors") or [])[-3:]:
        lines.append(f"failed in component {err.get('component')!r} task {err.get('task')}: {err.get('error')}")
        if err.get("traceback"):
            lines.append(str(err["traceback"]).rstrip())
    return lines


def _client_env(master: str, parts: SubmitParts) -> dict[str, str] | None:
    """The environment for a client-mode spark-submit, as the provider's ``env_vars``. The provider
    only adds to the task's environment: a loopback ``SPARK_LOCAL_IP`` that ``spark_env`` dropped
    for a cluster master is replaced by the driver's address (``spark.driver.host``) instead.
    YARN and Kubernetes masters get none: the provider would turn every variable into driver conf."""
    if master.startswith(("yarn", "k8s://")):
        return None
    env = dict(parts.env)
    if "SPARK_LOCAL_IP" in os.environ and "SPARK_LOCAL_IP" not in env and parts.conf.get("spark.driver.host"):
        env["SPARK_LOCAL_IP"] = parts.conf["spark.driver.host"]
    return env


def mask_url_secret(url: str | None) -> None:
    """Register a Redis URL's password (and the URL) with Airflow's secret masker: task logs
    show *** wherever they would show it."""
    from urllib.parse import urlparse

    password = urlparse(url).password if url else None
    if password:
        from airflow.sdk.log import mask_secret

        mask_secret(password)
        mask_secret(url)


class TopologyHook(BaseHook):
    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    hook_name = "Topology"

    def __init__(self, conn_id: str = "spark_default", redis_url: str | None = None) -> None:
        super().__init__()
        self.conn_id = conn_id
        self._redis_url = redis_url
        self._spark: SparkSubmitHook | None = None

    @property
    def redis_url(self) -> str:
        if not self._redis_url:
            from topology_runtime.control.redis_server import resolve_redis_url

            self._redis_url, where = resolve_redis_url(None)
            self.log.info("Redis: %s", where)
        mask_url_secret(self._redis_url)
        return self._redis_url

    @property
    def control(self) -> ControlPlane:
        return ControlPlane(self.redis_url)

    def _parts(self, master: str, topology: str, workers: int, spark_conf: dict[str, str] | None,
               shipping: dict[str, Any] | None, deploy_mode: str | None = None) -> SubmitParts:
        """Conf, py-files, archives and environment of the submit (launchers/spark.py): on a
        cluster master the topology's code, the runtime and its dependencies are shipped."""
        parts = submit_parts(master, topology, workers, spark_conf, deploy_mode=deploy_mode, **(shipping or {}))
        for note in parts.notes:
            self.log.info("shipping %s", note)
        return parts

    def submit(self, topology: str, name: str, workers: int = 2, conf: dict[str, Any] | None = None,
               spark_conf: dict[str, str] | None = None, progress_interval: float = 5.0,
               shipping: dict[str, Any] | None = None) -> None:
        """Run the topology's driver through spark-submit; every driver line goes to the log.

        ``shipping``: ``python_env``, ``executor_python``, ``py_files``, ``archives`` for a
        cluster master (docs/cluster.md). Raises AirflowException (from SparkSubmitHook) when
        the driver exits non-zero, i.e. the run did not complete.
        """
        conf = dict(conf or {})
        conf.setdefault("redis.url", self.redis_url)
        args = driver_args(name, topology, None, workers, conf, self.redis_url, progress_interval)
        master = SparkSubmitHook(conn_id=self.conn_id)._connection["master"]
        parts = self._parts(master, topology, workers, spark_conf, shipping)
        self._spark = _DriverSubmit(
            conf=parts.conf,
            conn_id=self.conn_id,
            name=f"topology-{name}",
            application_args=args,
            py_files=",".join(parts.py_files) or None,
            archives=",".join(parts.archives) or None,
            env_vars=_client_env(master, parts),
        )
        try:
            # Its own session: Airflow's SIGTERM to the task's process group (mark-failed, clear)
            # must not kill the driver before on_kill has stopped the topology and recorded it.
            # No stdin: the task's fd 0 is its channel to Airflow's supervisor, and a driver left
            # holding it (the task process SIGKILLed) kept the supervisor from reporting the death
            # until the run ended, so the retry came too late to re-attach.
            self._spark.submit(application=str(DRIVER_SCRIPT), start_new_session=True, stdin=subprocess.DEVNULL)
        except AirflowException as e:
            m = _EXIT_CODE.search(str(e))
            code = int(m.group(1)) if m else None
            raise AirflowException(f"{submit_failure(name, self._spark.reason(), code)} (spark-submit exit code "
                                   f"{code if code is not None else '?'}; the driver's lines are above)") from e

    def restore(self, savepoint: str, topology: str, name: str, workers: int, conf: dict[str, Any] | None) -> None:
        """Write savepoint ``savepoint`` ("ID/NAME") into ``name`` before its driver starts;
        AirflowFailException (no retry can help) when it is unknown or the run may not start from it."""
        from airflow.sdk.exceptions import AirflowFailException

        from state.refusal import StateSettingsChanged
        from topology_runtime.api.builder import TopologyError
        from topology_runtime.launchers.spark import restore_before_submit

        conf = dict(conf or {})
        conf.setdefault("redis.url", self.redis_url)
        try:
            restore_before_submit(savepoint, name, topology, conf, workers, self.redis_url)
        except (StateSettingsChanged, TopologyError) as e:
            raise AirflowFailException(f"topology {name!r} from savepoint {savepoint!r}: {e}") from e
        self.log.info("topology %r starts from savepoint %s", name, savepoint)

    def start_detached(self, topology: str, name: str, workers: int = 2, conf: dict[str, Any] | None = None,
                       spark_conf: dict[str, str] | None = None, progress_interval: float = 5.0,
                       log_dir: str | None = None, shipping: dict[str, Any] | None = None) -> DetachedRun:
        """Start the driver so that it outlives this process, its output going to a log file.

        The master and deploy mode come from the Spark connection. For ``yarn`` and ``k8s://``
        masters the driver runs in the cluster (``--deploy-mode cluster``, spark-submit returns
        once it is accepted) unless the connection asks for client mode. ``local[...]`` and
        ``spark://`` masters only offer client mode for Python applications: the driver runs here,
        in its own process session (``start_new_session``) so that the task process ending (when
        it defers) or its process group being signalled does not end it.

        The log file's path is passed to the driver (``--log-file``), which records it in the run
        registry (``topology:{ID:ctl}:run``, field ``log``): that is how the trigger knows the
        record is this submission's. In cluster mode the file holds spark-submit's client output;
        the driver's own lines are in the cluster's logs (YARN application / driver pod logs).
        """
        conf = dict(conf or {})
        conf.setdefault("redis.url", self.redis_url)
        probe = SparkSubmitHook(conn_id=self.conn_id)  # only to resolve the connection's master
        master = probe._connection["master"]
        requested = probe._connection.get("deploy_mode")
        if master.startswith(("yarn", "k8s://")):
            deploy_mode = requested or "cluster"
        else:
            if requested == "cluster":
                self.log.warning("master %s offers no cluster deploy mode for Python: using client mode", master)
            deploy_mode = "client"
        parts = self._parts(master, topology, workers, spark_conf, shipping, deploy_mode)
        spark_conf = parts.conf
        if deploy_mode == "cluster":
            # spark-submit returns once the cluster accepted the driver instead of waiting for it.
            spark_conf.setdefault("spark.yarn.submit.waitAppCompletion", "false")
            spark_conf.setdefault("spark.kubernetes.submission.waitAppCompletion", "false")
        log_path = Path(log_dir or default_driver_log_dir()) / name / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        args = driver_args(name, topology, None, workers, conf, self.redis_url, progress_interval, str(log_path))
        # This machine's venv and paths mean nothing to a driver in the cluster: the shipped
        # code and environment serve it there (docs/cluster.md), not driver env vars.
        spark = SparkSubmitHook(conf=spark_conf, conn_id=self.conn_id, name=f"topology-{name}",
                                application_args=args, deploy_mode=deploy_mode,
                                py_files=",".join(parts.py_files) or None, archives=",".join(parts.archives) or None,
                                env_vars=None if deploy_mode == "cluster" else _client_env(master, parts))
        # The provider builds the command from the connection (master, queue, namespace, Kerberos,
        # env for YARN/K8s); it has no public "start and return" call, so build it and start it here.
        cmd = spark._build_spark_submit_command(str(DRIVER_SCRIPT))
        env = {**parts.env, **(spark._env or {})}
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=os.getcwd(), start_new_session=True, close_fds=True)
        self.log.info("driver of topology %r started (%s mode, master %s, pid %d); its log: %s",
                      name, deploy_mode, master, proc.pid, log_path)
        return DetachedRun(name=name, log_file=str(log_path), pid=proc.pid, host=socket.gethostname(),
                           master=master, deploy_mode=deploy_mode, submitted=time.time())

    def committed_txids(self, name: str, tx_id: str | None = None) -> dict[str, int | None]:
        """The last committed txid of the topology's checkpoints (stateful bolts, exactly-once
        mode) and of its transactional coordinator (``tx_id``: ``topology.transactional.id``,
        default the run name); None where the topology has none."""
        client = self.control.redis
        cp = load_checkpoint(client, name) if client.exists(ctl_key(name, "checkpoint")) else None
        # PREPARING(t) and COMMITTING(t) mean t-1 is the last txid committed everywhere.
        checkpoint = None if cp is None else (cp.txid if cp.state == COMMITTED else cp.txid - 1)
        cur = current_txid(client, tx_id or name)  # the next txid to commit: one past the last committed
        return {"checkpoint": checkpoint, "transactional": cur - 1 if cur is not None else None}

    def kill(self, name: str, drain: bool = False) -> bool:
        """Ask the live run to stop (through Redis); the driver then exits on its own."""
        return self.control.request_kill(name, drain=drain)

    def kill_driver(self, grace: float = 20.0) -> None:
        """Stop the spark-submit this hook started: SIGTERM to its session (the driver then kills
        the topology and records it), and only after ``grace`` seconds the provider's kill."""
        spark = self._spark
        proc = getattr(spark, "_submit_sp", None)
        if spark is None or proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(grace)
        except (OSError, subprocess.TimeoutExpired):
            spark.on_kill()

    def follow(self, name: str, poll_interval: float = 2.0, progress_interval: float = 5.0,
               log: Any = None) -> RunRecord | None:
        """Poll a live run until it ends (a re-attached retry): progress lines to ``log`` every
        ``progress_interval`` seconds; the final record, or one marked ``lost`` if the driver
        vanished without a final word."""
        prev: dict[str, int] = {}
        last = time.monotonic()
        gone = 0
        while True:
            rec = self.get_run(name)
            if rec is None or rec.state in FINAL_STATES:
                return rec
            gone = gone + 1 if not rec.live else 0
            if gone >= _GONE_POLLS:
                return rec  # get() reports a record without a lease and a final state as lost
            now = time.monotonic()
            if log is not None and rec.status and now - last >= progress_interval:
                for line in progress_line(status_from_dict(rec.status), prev, now - last).splitlines():
                    log.info("%s", line)
                last = now
            time.sleep(poll_interval)

    def get_run(self, name: str) -> RunRecord | None:
        return self.control.get(name)

    def recover(self, topology_id: str, action: str = "auto", dry_run: bool = False,
                allow_unknown: bool = False) -> RecoveryReport:
        """The recovery protocol on the stopped topology's state (raises RecoveryRefused; its
        subclass UnknownTopology for an id Redis has no record of, unless ``allow_unknown``)."""
        return recover(topology_id, self.redis_url, action=action, dry_run=dry_run, allow_unknown=allow_unknown)
