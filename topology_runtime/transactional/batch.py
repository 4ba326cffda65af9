"""BatchBolt and Committer: what users implement in a transactional topology."""

from __future__ import annotations

from typing import Any


class BatchBolt:
    """One instance per batch attempt, created and dropped by the runtime.

    ``prepare(conf, context, batch_id)``, ``execute(tup)`` for each tuple of the batch, then
    ``finish_batch()`` once every upstream task's tuples of this batch arrived. ``self.emit``
    sends a tuple (the TransactionAttempt must be its first value).
    """

    outputs: list[str] = []

    def prepare(self, conf: dict, context: Any, batch_id: Any) -> None:
        pass

    def execute(self, tup: Any) -> None:
        pass

    def finish_batch(self) -> None:
        pass


class Committer:
    """Mixin: this bolt's finish_batch runs in the commit phase, strictly in txid order.

    It runs on the task's own thread, off the worker's event loop, so a slow sink does not stall
    the processing of later batches; its ``self.emit`` calls are sent once it returns (and return
    ``[]``); an exception fails the batch, which the coordinator replays."""
