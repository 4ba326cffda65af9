"""Airflow integration: launch, watch and recover topologies from Airflow.

Importable from the plugins folder (Airflow puts it on sys.path) and installed with the project.
"""

from .assets import TopologyCommitTrigger, topology_asset
from .hooks import TopologyHook
from .operations import (
    PauseTopologyOperator,
    RebalanceTopologyOperator,
    ResumeTopologyOperator,
    SavepointTopologyOperator,
    StopTopologyOperator,
)
from .operators import DRPCOperator, SubmitTopologyOperator, TopologyRecoveryOperator
from .sensors import TopologySensor
from .triggers import TopologyTrigger

__all__ = ["DRPCOperator", "PauseTopologyOperator", "RebalanceTopologyOperator", "ResumeTopologyOperator",
           "SavepointTopologyOperator", "StopTopologyOperator", "SubmitTopologyOperator", "TopologyCommitTrigger", "TopologyHook", "TopologyRecoveryOperator",
           "TopologySensor", "TopologyTrigger", "topology_asset"]
