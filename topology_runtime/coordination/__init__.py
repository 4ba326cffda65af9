"""Coordination (Storm's coordination package): knowing when a task has seen every tuple of a
batch or request id its upstream sent it.

``tracker.py`` is the pure state machine; ``bolt.py`` the ``CoordinatedBolt`` that wraps any
bolt with it (and ``coordinate`` to wire them in an ordinary topology); ``streams.py`` the names
of the streams coordinated wrappers send each other; ``batch.py`` the ``BatchBolt`` contract.
Transactional topologies and linear DRPC both run their components in the one CoordinatedBolt.
"""

from .batch import BatchBolt
from .bolt import ALL, DEFERRED, SINGLE, CoordinatedBolt, IdCodec, coordinate, is_finisher
from .streams import BATCH_STREAM, COMMIT_STREAM, COORD_FIELDS, COORD_STREAM, ROWS_STREAM
from .tracker import CoordinatedTracker, Finish

__all__ = [
    "ALL", "BATCH_STREAM", "COMMIT_STREAM", "COORD_FIELDS", "COORD_STREAM", "DEFERRED", "ROWS_STREAM", "SINGLE",
    "BatchBolt", "CoordinatedBolt", "CoordinatedTracker", "Finish", "IdCodec", "coordinate", "is_finisher",
]
