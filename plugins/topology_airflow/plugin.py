"""The Airflow plugin: the read-only topology status app, its UI views and the operator link.

Loaded either from the ``airflow.plugins`` entry point (the installed project) or from the
plugins folder (``plugins/topology_plugin.py``), never both: see that file.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from .links import URL_PREFIX, TopologyLink


class _StatusApp:
    """``fastapi_apps``, built on first access. Every Airflow process imports plugins (task
    processes too, for macros); only the API server reads ``fastapi_apps``, so only it pays for
    importing the app and Airflow's API security stack."""

    def __get__(self, obj: Any, owner: type | None = None) -> list[dict[str, Any]]:
        from .app import app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "Topology status"}]


class TopologyPlugin(AirflowPlugin):
    name = "topology_runtime"
    fastapi_apps = _StatusApp()
    # hrefs without a leading slash resolve against the UI's <base href>, so they also work when
    # Airflow is served under a sub-path.
    external_views = [
        {"name": "Topologies", "href": "topologies/", "url_route": "topologies", "destination": "nav",
         "category": "browse"},
        {"name": "Topologies", "href": "topologies/?dag_id={DAG_ID}&run_id={RUN_ID}",
         "url_route": "topologies-of-run", "destination": "dag_run"},
    ]
    operator_extra_links = [TopologyLink()]
