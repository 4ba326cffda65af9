"""The streams coordinated wrappers send each other, named once for every user of them
(transactional topologies and linear DRPC alike)."""

from __future__ import annotations

# Direct stream of [id, count]: how many tuples of an id this task sent to the receiving task
# (Storm's CoordinatedBolt coord-stream).
COORD_STREAM = "$coord"
COORD_FIELDS = ["id", "count"]

# Direct stream of [id, rows]: a transactional batch's default-stream tuples, sent per target
# task in chunks (transactional/coordinated_bolt.py, RowChunks).
ROWS_STREAM = "$rows"
