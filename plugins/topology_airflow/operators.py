"""Operators: submit a topology as a long-running PySpark job."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from .hooks import TopologyHook


class SubmitTopologyOperator(BaseOperator):
    """Run ``topology`` ("package.module:attribute") as a PySpark application named ``name``.

    Streams the driver's lines (progress every few seconds, a summary at the end) into the task
    log, fails the task unless the run completed, and on kill stops the topology so the task
    never ends as a success.
    """

    template_fields: Sequence[str] = ("topology", "name", "conf", "workers", "redis_url", "spark_conf")
    template_fields_renderers = {"conf": "json", "spark_conf": "json"}
    ui_color = "#e8f1fb"

    def __init__(self, *, topology: str, name: str, conf: dict[str, Any] | None = None, workers: int | str = 2,
                 spark_conf: dict[str, str] | None = None, conn_id: str = "spark_default",
                 redis_url: str | None = None, progress_interval: float = 5.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.name = name
        self.conf = conf or {}
        self.workers = workers
        self.spark_conf = spark_conf or {}
        self.conn_id = conn_id
        self.redis_url = redis_url
        self.progress_interval = progress_interval
        self._hook: TopologyHook | None = None
        self._killed = False

    def execute(self, context: Any) -> dict:
        self._hook = TopologyHook(self.conn_id, self.redis_url)
        error: Exception | None = None
        try:
            self._hook.submit(self.topology, self.name, int(self.workers), self.conf, self.spark_conf,
                              self.progress_interval)
        except AirflowException as e:
            error = e
        rec = self._hook.get_run(self.name)
        state = rec.state if rec else "unknown"
        if self._killed:
            raise AirflowException(f"topology {self.name!r} was stopped because the task was killed (state {state})")
        if error is not None or state != "completed":
            why = (rec.status or {}).get("error") if rec else None
            raise AirflowException(f"topology {self.name!r} ended {state}" + (f": {why}" if why else "")
                                   + (f" ({error})" if error and not why else ""))
        self.log.info("topology %r completed", self.name)
        return (rec.status or {}) if rec else {}

    def on_kill(self) -> None:
        # Called from a SIGTERM handler; execute may still return normally, hence the flag.
        self._killed = True
        hook = self._hook or TopologyHook(self.conn_id, self.redis_url)
        if hook.kill(self.name):
            self.log.info("kill requested for topology %r", self.name)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and hook.control.is_live(self.name):
                time.sleep(0.2)
        hook.kill_driver()


class TopologyRecoveryOperator(BaseOperator):
    """Run the recovery protocol on a stopped topology's state: commit or roll back what a crash
    left prepared (``action`` auto/rollback/commit; ``dry_run`` reports without changing)."""

    template_fields: Sequence[str] = ("topology_id", "action", "dry_run", "redis_url")
    ui_color = "#fbeee8"

    def __init__(self, *, topology_id: str, action: str = "auto", dry_run: bool | str = False,
                 redis_url: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topology_id = topology_id
        self.action = action
        self.dry_run = dry_run
        self.redis_url = redis_url

    def execute(self, context: Any) -> dict:
        from state import RecoveryRefused

        dry = self.dry_run if isinstance(self.dry_run, bool) else str(self.dry_run).lower() in ("true", "1", "yes")
        hook = TopologyHook(redis_url=self.redis_url)
        try:
            report = hook.recover(self.topology_id, self.action, dry)
        except (RecoveryRefused, ValueError) as e:
            raise AirflowException(f"recovery of topology {self.topology_id!r} refused: {e}") from e
        for line in report.text().splitlines():
            self.log.info("%s", line)
        return {"decision": report.decision, "checkpoint_before": report.checkpoint_before,
                "checkpoint_after": report.checkpoint_after, "dry_run": report.dry_run,
                "tasks": [t.__dict__ for t in report.tasks]}
