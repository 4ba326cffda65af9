"""Coordination (Storm's coordination package): knowing when a task has seen every tuple of a
batch or request id its upstream sent it.

``tracker.py`` is the pure state machine; ``bolt.py`` the ``CoordinatedBolt`` that wraps any
bolt with it (and ``coordinate`` to wire them in an ordinary topology); ``streams.py`` the names
of the streams coordinated wrappers send each other; ``batch.py`` the ``BatchBolt`` contract.
Transactional topologies and linear DRPC both build on this layer.
"""

from .batch import BatchBolt
from .bolt import ALL, SINGLE, CoordinatedBolt, CoordinatedCore, coordinate, is_finisher
from .streams import COORD_FIELDS, COORD_STREAM, ROWS_STREAM
from .tracker import CoordinatedTracker, Finish

__all__ = [
    "ALL", "COORD_FIELDS", "COORD_STREAM", "ROWS_STREAM", "SINGLE", "BatchBolt", "CoordinatedBolt", "CoordinatedCore",
    "CoordinatedTracker", "Finish", "coordinate", "is_finisher",
]
