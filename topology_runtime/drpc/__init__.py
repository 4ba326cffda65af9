"""Linear DRPC (Storm's drpc package; docs/drpc.md).

``LinearDRPCTopologyBuilder`` builds a DRPC function from stages, each in a ``CoordinatedBolt``
(the coordination layer's, offered here too: it tracks, per request id in field 0, when a task
has seen every tuple its upstream sent it); ``DRPCClient`` calls a function through Redis.
"""

from ..coordination import COORD_STREAM, CoordinatedBolt, coordinate
from .builder import LinearDRPCInputDeclarer, LinearDRPCTopologyBuilder
from .client import DRPCClient
from .protocol import DRPCExecutionException, DRPCTimeoutException
from .results import JoinResult, PrepareRequest, ReturnResults
from .spout import DRPCSpout

__all__ = [
    "COORD_STREAM", "CoordinatedBolt", "DRPCClient", "DRPCExecutionException", "DRPCSpout", "DRPCTimeoutException", "JoinResult",
    "LinearDRPCInputDeclarer", "LinearDRPCTopologyBuilder", "PrepareRequest", "ReturnResults", "coordinate",
]
