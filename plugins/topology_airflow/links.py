"""``TopologyLink``: the "Topology" button on a SubmitTopologyOperator task, to its status page."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator

URL_PREFIX = "/topologies"  # where plugin.py mounts the status app (app.URL_PREFIX; not imported:
# the link runs in task processes, which must not load the API server's app)


def topology_url(name: str) -> str:
    """The topology page of run ``name``: absolute under ``[api] base_url`` when that is set,
    else a path on the UI's own host (what the UI opens from a link)."""
    base = ""
    try:
        from airflow.sdk.configuration import conf

        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    except Exception:  # noqa: BLE001 - no Airflow configuration here: a host-relative link still works
        base = ""
    return f"{base}{URL_PREFIX}/topology/{quote(str(name), safe='')}"


class TopologyLink(BaseOperatorLink):
    """Computed when the task ends (Airflow 3 stores it as an XCom), from the rendered ``name``."""

    name = "Topology"

    def get_link(self, operator: BaseOperator, *, ti_key: Any) -> str:
        return topology_url(getattr(operator, "name", "") or "")
