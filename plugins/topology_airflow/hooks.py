"""TopologyHook: owns spark-submit (through the Spark provider's SparkSubmitHook) and the
topology's Redis control plane. Operators stay thin."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook

from state import RecoveryReport, recover
from topology_runtime.control_plane import ControlPlane, RunRecord
from topology_runtime.spark_cluster import DEFAULT_SPARK_CONF, DRIVER_SCRIPT, driver_args, spark_env


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
            from topology_runtime.redis_server import resolve_redis_url

            self._redis_url, where = resolve_redis_url(None)
            self.log.info("Redis: %s", where)
        return self._redis_url

    @property
    def control(self) -> ControlPlane:
        return ControlPlane(self.redis_url)

    def submit(self, topology: str, name: str, workers: int = 2, conf: dict[str, Any] | None = None,
               spark_conf: dict[str, str] | None = None, progress_interval: float = 5.0) -> None:
        """Run the topology's driver through spark-submit; every driver line goes to the log.

        Raises AirflowException (from SparkSubmitHook) when the driver exits non-zero, i.e. the
        run did not complete.
        """
        conf = dict(conf or {})
        conf.setdefault("redis.url", self.redis_url)
        args = driver_args(name, topology, None, workers, conf, self.redis_url, progress_interval)
        self._spark = SparkSubmitHook(
            conf={**DEFAULT_SPARK_CONF, **(spark_conf or {})},
            conn_id=self.conn_id,
            name=f"topology-{name}",
            application_args=args,
            env_vars=spark_env(),
        )
        self._spark.submit(application=str(DRIVER_SCRIPT))

    def kill(self, name: str, drain: bool = False) -> bool:
        """Ask the live run to stop (through Redis); the driver then exits on its own."""
        return self.control.request_kill(name, drain=drain)

    def kill_driver(self) -> None:
        if self._spark is not None:
            self._spark.on_kill()

    def get_run(self, name: str) -> RunRecord | None:
        return self.control.get(name)

    def recover(self, topology_id: str, action: str = "auto", dry_run: bool = False) -> RecoveryReport:
        """The recovery protocol on the stopped topology's state (raises RecoveryRefused)."""
        return recover(topology_id, self.redis_url, action=action, dry_run=dry_run)
