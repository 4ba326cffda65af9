"""The checks ``topology submit`` makes before spark-submit starts a JVM."""

from __future__ import annotations

import logging
from typing import Any

from state.settings import StateSettingsChanged

from ..api.builder import TopologyError
from ..api.config import ConfigError

log = logging.getLogger("topology.cli")


def spark_preflight(redis_url: str, name: str, ref: str, conf: dict[str, Any], workers: int) -> StateSettingsChanged | None:
    """The refusal of a submit whose state settings differ from those the id's committed state
    was written with (the topology's own conf under ``--conf``), else None. A topology that
    does not load here is left to the driver, which reports it (the code may only import with
    the files shipped to Spark)."""
    from ..control.control_plane import ControlPlane
    from ..launchers.local import load_topology
    from ..launchers.spark import preflight

    try:
        topology = load_topology(ref)
    except TopologyError as e:
        log.debug("pre-flight skipped: %s", e)
        return None
    try:
        preflight(ControlPlane(redis_url), name, topology, conf, workers)
    except (TopologyError, ConfigError) as e:
        log.debug("pre-flight skipped: %s", e)  # the driver rejects it with its reason
    except StateSettingsChanged as e:
        return e
    return None


__all__ = ["StateSettingsChanged", "spark_preflight"]
