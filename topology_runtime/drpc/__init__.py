"""Coordinated bolts and linear DRPC (Storm's coordination and drpc packages; docs/drpc.md).

``CoordinatedBolt`` tracks, per request id in field 0, when a task has seen every tuple its
upstream sent it; ``LinearDRPCTopologyBuilder`` builds a DRPC function from stages;
``DRPCClient`` calls one through Redis.
"""

from .builder import LinearDRPCInputDeclarer, LinearDRPCTopologyBuilder
from .client import DRPCClient
from .coordinated import COORD_STREAM, CoordinatedBolt, coordinate
from .protocol import DRPCExecutionException, DRPCTimeoutException
from .results import JoinResult, PrepareRequest, ReturnResults
from .spout import DRPCSpout

__all__ = [
    "COORD_STREAM", "CoordinatedBolt", "DRPCClient", "DRPCExecutionException", "DRPCSpout", "DRPCTimeoutException", "JoinResult",
    "LinearDRPCInputDeclarer", "LinearDRPCTopologyBuilder", "PrepareRequest", "ReturnResults", "coordinate",
]
