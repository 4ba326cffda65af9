"""Operators: submit a topology as a long-running PySpark job; recover a stopped topology's state; call a DRPC function."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from topology_runtime.api.status import FINAL_STATES

from .hooks import TopologyHook, driver_reason, driver_summary, failure_lines
from .links import TopologyLink
from .triggers import TopologyTrigger, _pid_alive


def _default_deferrable() -> bool:
    try:
        from airflow.configuration import conf

        return conf.getboolean("operators", "default_deferrable", fallback=False)
    except Exception:  # noqa: BLE001 - outside a configured Airflow
        return False


class SubmitTopologyOperator(BaseOperator):
    """Run ``topology`` ("package.module:attribute") as a PySpark application named ``name``.

    Default (``deferrable=False``): spark-submit runs in the task and every driver line (progress
    every ``progress_interval`` seconds, a summary at the end) goes into the task log; the task
    fails unless the run completed, and on kill it stops the topology so the task never ends as a
    success.

    ``deferrable=True``: the driver is started detached (its own process session in client mode;
    cluster deploy mode on YARN/Kubernetes), writing its log to a file under ``driver_log_dir``
    (default ``<base_log_folder>/topology/NAME/``) that the run registry points at; the task then
    defers to :class:`TopologyTrigger` and frees its worker slot. When the run ends the task
    resumes, logs the driver's end summary and the final state, and fails unless it completed.
    Marking the task failed or clearing it kills the topology (``on_kill`` here, the trigger's
    ``on_kill`` when deferred), or drains it when its conf sets ``topology.sigterm.action`` to
    ``drain``; the run ends ``killed`` with its final state recorded, never ``lost``.

    ``wait_for_completion=False``: the driver is started detached as above, and the task
    succeeds once the run this submission started is ``running`` (or already completed), leaving
    it running: for a run that never ends (a DAG that starts a new version, then checks it with
    :class:`TopologySensor`). It fails if the run ended otherwise first, or never registered.

    A retry of the same DAG run's task whose earlier try left the run live (the task's process
    died: a scheduler or worker SIGKILLed) re-attaches to it and follows it to the end instead of
    submitting again; another DAG run still gets "already live" (docs/operations.md).
    """

    template_fields: Sequence[str] = ("topology", "name", "conf", "workers", "redis_url", "spark_conf",
                                      "from_savepoint")
    template_fields_renderers = {"conf": "json", "spark_conf": "json"}
    ui_color = "#e8f1fb"
    operator_extra_links = (TopologyLink(),)  # the task's "Topology" button: its status page

    def __init__(self, *, topology: str, name: str, conf: dict[str, Any] | None = None, workers: int | str = 2,
                 spark_conf: dict[str, str] | None = None, conn_id: str = "spark_default",
                 redis_url: str | None = None, progress_interval: float = 5.0,
                 deferrable: bool | None = None, poll_interval: float = 2.0, start_timeout: float = 600.0,
                 driver_log_dir: str | None = None, python_env: str = "auto", executor_python: str | None = None,
                 py_files: str | list[str] | None = None, archives: str | list[str] | None = None,
                 from_savepoint: str | None = None, wait_for_completion: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wait_for_completion = wait_for_completion
        self.from_savepoint = from_savepoint  # "ID/NAME": the run starts with that savepoint's state
        # What a cluster master's executors get (docs/cluster.md): the code is always shipped;
        # python_env "auto" adds the runtime's dependencies, "none" nothing, a path your archive.
        self.shipping = {"python_env": python_env, "executor_python": executor_python, "py_files": py_files,
                         "archives": archives}
        self.topology = topology
        self.name = name
        self.conf = conf or {}
        self.workers = workers
        self.spark_conf = spark_conf or {}
        self.conn_id = conn_id
        self.redis_url = redis_url
        self.progress_interval = progress_interval
        self.deferrable = _default_deferrable() if deferrable is None else deferrable
        self.poll_interval = poll_interval
        self.start_timeout = start_timeout
        self.driver_log_dir = driver_log_dir
        self._hook: TopologyHook | None = None
        self._killed = False

    def execute(self, context: Any) -> dict:
        self._hook = TopologyHook(self.conn_id, self.redis_url)
        ours = self._live_run_of_this_task(context)
        if ours is not None and not self.wait_for_completion:
            self.log.info("topology %r is live, started by an earlier try of this task: not starting it again",
                          self.name)
            return {"name": self.name, "state": ours.display_state, "log_file": ours.info.get("log")}
        if ours is not None:
            return self._reattach(ours)
        self._refuse_if_live()
        if self.from_savepoint:
            self._hook.restore(self.from_savepoint, self.topology, self.name, int(self.workers), self.conf)
        if not self.wait_for_completion:
            run = self._hook.start_detached(self.topology, self.name, int(self.workers), self.conf, self.spark_conf,
                                            self.progress_interval, self.driver_log_dir, self.shipping)
            return self._until_running(run)
        if self.deferrable:
            run = self._hook.start_detached(self.topology, self.name, int(self.workers), self.conf, self.spark_conf,
                                            self.progress_interval, self.driver_log_dir, self.shipping)
            self.defer(
                trigger=TopologyTrigger(name=self.name, redis_url=self._hook.redis_url, log_file=run.log_file,
                                        pid=run.pid, host=run.host, deploy_mode=run.deploy_mode,
                                        poll_interval=self.poll_interval, start_timeout=self.start_timeout,
                                        submitted=run.submitted, on_kill_action=self._kill_action()),
                method_name="execute_complete",
            )
        error: Exception | None = None
        try:
            self._hook.submit(self.topology, self.name, int(self.workers), self.conf, self.spark_conf,
                              self.progress_interval, self.shipping)
        except AirflowException as e:
            error = e
        if self._killed:
            rec = self._hook.get_run(self.name)
            raise AirflowException(f"topology {self.name!r} was stopped because the task was killed "
                                   f"(state {rec.state if rec else 'unknown'})")
        return self._outcome(str(error) if error else None)

    def _live_run_of_this_task(self, context: Any) -> Any:
        """The live run an earlier try of this very task (same DAG, DAG run and task id) started,
        or None."""
        from .hooks import started_by

        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is None:
            return None
        assert self._hook is not None  # execute sets it first
        rec = self._hook.get_run(self.name)
        return rec if started_by(rec, ti.dag_id, ti.run_id, ti.task_id) else None

    def _refuse_if_live(self) -> None:
        """Another run of this id is live (another DAG run's, a CLI's): fail now, naming it,
        instead of starting a driver that the control plane would refuse once its JVM is up."""
        assert self._hook is not None  # execute sets it first
        rec = self._hook.get_run(self.name)
        if rec is None or not rec.live:
            return
        info = rec.info
        by = (f", started by DAG {info['dag_id']!r} run {info.get('dag_run_id')!r} task {info.get('task_id')!r}"
              if info.get("dag_id") else "")
        raise AirflowException(f"topology {self.name!r} is already live ({rec.display_state}, driver "
                               f"{info.get('host', '?')} pid {info.get('pid', '?')}, started {info.get('started', '?')}"
                               f"{by}); kill it first: topology kill {self.name}")

    def _reattach(self, rec: Any) -> dict:
        assert self._hook is not None  # execute sets it first
        info = rec.info
        self.log.info("topology %r is live, started by an earlier try of this task (driver pid %s on %s, "
                      "started %s): following it to the end instead of submitting again",
                      self.name, info.get("pid"), info.get("host"), info.get("started"))
        if self.deferrable and info.get("log"):
            self.defer(trigger=TopologyTrigger(name=self.name, redis_url=self._hook.redis_url, log_file=info["log"],
                                               pid=int(info["pid"]) if info.get("pid") else None,
                                               host=info.get("host"), poll_interval=self.poll_interval,
                                               start_timeout=self.start_timeout,
                                               on_kill_action=self._kill_action()),
                       method_name="execute_complete")
        final = self._hook.follow(self.name, self.poll_interval, self.progress_interval, self.log)
        if self._killed:
            raise AirflowException(f"topology {self.name!r} was stopped because the task was killed "
                                   f"(state {final.state if final else 'unknown'})")
        return self._outcome(None, final)

    def _until_running(self, run: Any) -> dict:
        """Poll until the run this submission started (its record names this driver log) is
        running; fail if it ends otherwise first or never registers (a rejected topology, an id
        already live, nothing within ``start_timeout``)."""
        assert self._hook is not None  # execute sets it first
        local = run.deploy_mode == "client"
        while True:
            rec = self._hook.get_run(self.name)
            if rec is not None and rec.info.get("log") == run.log_file:
                if rec.state in ("running", "completed"):
                    self.log.info("topology %r is %s (driver pid %s, log %s): not waiting for it to end",
                                  self.name, rec.display_state, run.pid, run.log_file)
                    return {"name": self.name, "state": rec.display_state, "log_file": run.log_file}
                if rec.state in FINAL_STATES or rec.state == "lost":
                    return self._outcome(None, rec)  # fails the task with the run's error
            elif local and not _pid_alive(run.pid):
                self._not_started(run.log_file, f"the driver (pid {run.pid}) exited before registering run "
                                                f"{self.name!r}: see {run.log_file}")
            elif time.time() - run.submitted > self.start_timeout:
                self._not_started(run.log_file, f"run {self.name!r} did not register within "
                                                f"{self.start_timeout:.0f}s: see {run.log_file}")
            time.sleep(min(self.poll_interval, 1.0))

    def _not_started(self, log_file: str, error: str | None) -> None:
        try:
            lines = Path(log_file).read_text(errors="replace").splitlines()
        except OSError:
            lines = []  # the driver ran on another machine
        # The driver's reason (an import error, a rejected config) first, wherever it is in the
        # log: Spark's shutdown may print many lines after it.
        reason = driver_reason(lines)
        tail = "\n".join(lines[-20:])
        raise AirflowException(f"topology {self.name!r} did not start: "
                               + (f"{reason.removeprefix('error: ')} ({error})" if reason else str(error))
                               + (f"\nlast driver lines:\n{tail}" if tail else ""))

    def _kill_action(self) -> str:
        return "drain" if (self.conf or {}).get("topology.sigterm.action") == "drain" else "kill"

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict:
        """Resumed from the trigger: the driver's summary and the final state into the task log."""
        self._hook = TopologyHook(self.conn_id, self.redis_url)
        log_file = event.get("log_file") or ""
        try:
            text = Path(log_file).read_text(errors="replace")
        except OSError:
            text = None  # the driver ran on another machine (cluster mode, another worker)
        rec = self._hook.get_run(self.name) if event.get("state") != "not-started" else None
        summary = driver_summary(text, self.name) if text else []
        if not summary and rec is not None and rec.status:
            # No readable driver log: the same summary, rebuilt from the final status in Redis.
            from topology_runtime.control.control_plane import status_from_dict
            from topology_runtime.control.reporter import summary as summarize

            summary = summarize(status_from_dict(rec.status)).splitlines()
        self.log.info("driver log: %s", log_file)
        for line in summary:
            self.log.info("%s", line)
        if event.get("state") == "not-started":
            self._not_started(log_file, event.get("error"))
        return self._outcome(None, rec, event.get("state"))

    def _outcome(self, error: str | None, rec: Any = None, state: str | None = None) -> dict:
        """Log the final state (and, for a failure, the failing components, tasks and tracebacks
        last, so that they end the task log) and fail the task unless the run completed."""
        assert self._hook is not None  # execute or execute_complete sets it first
        rec = rec if rec is not None else self._hook.get_run(self.name)
        state = rec.state if rec else (state or "unknown")
        status = (rec.status or {}) if rec else {}
        self.log.info("topology %r final state: %s", self.name, state)
        if error is not None or state != "completed":
            why = status.get("error")
            for line in failure_lines(status):
                self.log.error("%s", line)
            if error is not None:  # the hook's message starts with the driver's own reason
                raise AirflowException(error)
            raise AirflowException(f"topology {self.name!r} ended {state}" + (f": {why}" if why else ""))
        return status

    def on_kill(self) -> None:
        # Called from the task's SIGTERM handler (mark-failed, clear); execute may still return
        # normally, hence the flag. A deferred task has no process: the trigger's on_kill acts.
        self._killed = True
        hook = self._hook or TopologyHook(self.conn_id, self.redis_url)
        drain = self._kill_action() == "drain"
        if hook.kill(self.name, drain=drain):
            self.log.info("%s requested for topology %r", "drain" if drain else "kill", self.name)
            deadline = time.monotonic() + (60 if drain else 20)
            while time.monotonic() < deadline and hook.control.is_live(self.name):
                time.sleep(0.2)
        hook.kill_driver()  # SIGTERM to spark-submit's own session: the driver records the end


class TopologyRecoveryOperator(BaseOperator):
    """Run the recovery protocol on a stopped topology's state: commit or roll back what a crash
    left prepared (``action`` auto/rollback/commit; ``dry_run`` reports without changing).

    An id Redis has no record of fails the task, without retries: ``no topology 'X' in Redis
    (known: a, b, c)``. ``allow_unknown=True`` (a DAG that recovers before its first submit)
    makes such an id a first run instead: nothing to recover, the task succeeds."""

    template_fields: Sequence[str] = ("topology_id", "action", "dry_run", "redis_url")
    ui_color = "#fbeee8"

    def __init__(self, *, topology_id: str, action: str = "auto", dry_run: bool | str = False,
                 redis_url: str | None = None, allow_unknown: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topology_id = topology_id
        self.action = action
        # Shadows BaseOperator.dry_run(), a CLI helper that renders template fields; this
        # templated argument keeps its public name.
        self.dry_run = dry_run  # type: ignore[assignment,method-assign]
        self.redis_url = redis_url
        self.allow_unknown = allow_unknown

    def execute(self, context: Any) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from state import RecoveryRefused
        from state.recovery import UnknownTopology

        dry = self.dry_run if isinstance(self.dry_run, bool) else str(self.dry_run).lower() in ("true", "1", "yes")
        hook = TopologyHook(redis_url=self.redis_url)
        try:
            report = hook.recover(self.topology_id, self.action, dry, allow_unknown=self.allow_unknown)
        except UnknownTopology as e:  # a typo or the wrong Redis: retrying would not help
            raise AirflowFailException(str(e)) from e
        except (RecoveryRefused, ValueError) as e:
            raise AirflowException(f"recovery of topology {self.topology_id!r} refused: {e}") from e
        for line in report.text().splitlines():
            self.log.info("%s", line)
        return {"decision": report.decision, "known": report.known, "checkpoint_before": report.checkpoint_before,
                "checkpoint_after": report.checkpoint_after, "dry_run": report.dry_run,
                "tasks": [t.__dict__ for t in report.tasks]}


class DRPCOperator(BaseOperator):
    """Call DRPC function ``function`` with ``args`` (a string) on the topology serving it and
    return the result string (pushed to XCom). A failed or timed-out request fails the task
    (``DRPCExecutionException``'s message in the log); Redis as for the other operators
    (``redis_url``, else ``TOPOLOGY_REDIS_URL``, else the project-local Redis)."""

    template_fields: Sequence[str] = ("function", "args", "timeout", "redis_url")
    ui_color = "#e8f1fb"

    def __init__(self, *, function: str, args: str, timeout: float = 30.0, redis_url: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.function = function
        self.args = args
        self.timeout = timeout
        self.redis_url = redis_url

    def execute(self, context: Any) -> str:
        from topology_runtime.drpc import DRPCClient, DRPCExecutionException

        with DRPCClient(TopologyHook(redis_url=self.redis_url).redis_url) as client:
            try:
                result = client.execute(self.function, str(self.args), timeout=float(self.timeout))
            except DRPCExecutionException as e:
                raise AirflowException(f"DRPC {self.function}({self.args!r:.200}): {e}") from e
        self.log.info("DRPC %s(%r) = %r", self.function, str(self.args)[:200], result[:200])
        return result
