"""Storm-style reliable topologies in Python: spouts, bolts, XOR acking, on worker processes
or Spark.

The folders are the layers (docs/architecture.md): ``api`` (what users program against),
``transport``, ``reliability`` (protocol state machines), ``plan``, ``worker``,
``supervisor``, ``control`` (the control plane in Redis), ``launchers``, ``coordination``,
``transactional``, ``drpc``, ``windowing``, ``connectors``, ``cli``, ``testing``. Importing the API names loads no launcher, zmq or redis:
``LocalCluster``, ``SparkCluster`` and ``TopologyFailed`` load on first use.
"""

from typing import Any

from .api.builder import Topology, TopologyBuilder, TopologyError
from .api.components import (
    BasicBolt,
    Bolt,
    FailedException,
    ReplayableSpout,
    Spout,
    StatefulBolt,
    Stream,
    TopologyContext,
    Tuple,
)
from .api.config import Config, ConfigError
from .api.groupings import CustomStreamGrouping
from .api.status import ComponentStats, RunStatus

_LAZY = {"LocalCluster": "launchers.local", "TopologyFailed": "launchers.local", "SparkCluster": "launchers.spark"}

__all__ = [
    "BasicBolt", "Bolt", "ComponentStats", "Config", "ConfigError", "CustomStreamGrouping", "FailedException",
    "LocalCluster", "ReplayableSpout", "RunStatus", "SparkCluster", "Spout", "StatefulBolt", "Stream", "Topology",
    "TopologyBuilder", "TopologyContext", "TopologyError", "TopologyFailed", "Tuple",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value

