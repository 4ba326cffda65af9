"""Storm-style reliable topologies in Python: spouts, bolts, XOR acking, on worker processes."""

from .builder import Topology, TopologyBuilder, TopologyError
from .components import (
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
from .config import Config, ConfigError
from .local_cluster import LocalCluster, TopologyFailed
from .status import ComponentStats, RunStatus

__all__ = [
    "BasicBolt", "Bolt", "ComponentStats", "Config", "ConfigError", "FailedException", "LocalCluster",
    "ReplayableSpout", "RunStatus", "Spout", "StatefulBolt", "Stream", "Topology", "TopologyBuilder", "TopologyContext",
    "TopologyError", "TopologyFailed", "Tuple",
]
