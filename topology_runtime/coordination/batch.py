"""BatchBolt: the delegate a coordinated wrapper runs once per batch or request id (Storm's
coordination/IBatchBolt), in transactional topologies and DRPC alike."""

from __future__ import annotations

from typing import Any


class BatchBolt:
    """One instance per batch attempt, created and dropped by the runtime.

    ``prepare(conf, context, batch_id)``, ``execute(tup)`` for each tuple of the batch, then
    ``finish_batch()`` once every upstream task's tuples of this batch arrived. ``self.emit``
    sends a tuple whose first value is the batch id (a transactional topology's
    TransactionAttempt, a DRPC request id).
    """

    outputs: list[str] = []

    def prepare(self, conf: dict, context: Any, batch_id: Any) -> None:
        pass

    def execute(self, tup: Any) -> None:
        pass

    def finish_batch(self) -> None:
        pass
