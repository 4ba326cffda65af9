"""The streams coordinated wrappers send each other, named once for every user of them
(transactional topologies and linear DRPC alike)."""

from __future__ import annotations

# Direct stream of [id, count]: how many tuples of an id this task sent to the receiving task
# (Storm's CoordinatedBolt coord-stream).
COORD_STREAM = "$coord"
COORD_FIELDS = ["id", "count"]

# Direct stream of [id, rows]: a transactional batch's default-stream tuples, sent per target
# task in chunks (transactional/batch_executor.py, RowChunks).
ROWS_STREAM = "$rows"

# A transactional coordinator's streams: each batch's start ([attempt, last committed txid,
# metadata], to every emitter task) and its commit ([attempt], to every committer task, which
# waits for it as its id stream).
BATCH_STREAM = "batch"
COMMIT_STREAM = "commit"
