"""Committer: what marks a BatchBolt of a transactional topology as one that commits (the
BatchBolt contract itself is coordination's: DRPC runs it too)."""

from __future__ import annotations


class Committer:
    """Mixin: this bolt's finish_batch runs in the commit phase, strictly in txid order.

    It runs on the task's own thread, off the worker's event loop, so a slow sink does not stall
    the processing of later batches; its ``self.emit`` calls are sent once it returns (and return
    ``[]``); an exception fails the batch, which the coordinator replays."""
