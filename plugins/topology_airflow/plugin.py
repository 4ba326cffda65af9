"""The Airflow plugin object (status UI comes with the Airflow UI issue)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class TopologyPlugin(AirflowPlugin):
    name = "topology_runtime"
