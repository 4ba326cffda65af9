"""Registers the topology Airflow plugin when this folder is Airflow's plugins_folder."""

from topology_airflow.plugin import TopologyPlugin  # noqa: F401
