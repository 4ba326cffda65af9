"""The system spout ``$checkpointspout``: drives CheckpointSpoutMachine and persists its
CheckPointState (Redis control record, or memory with the in-memory provider)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..api.components import Spout
from ..reliability.checkpointing import CHECKPOINT_STREAM, CheckpointSpoutMachine


class CheckpointSpout(Spout):
    outputs = {CHECKPOINT_STREAM: ["txid", "action"]}

    def __init__(self, load: Callable[[], Any], save: Callable[[Any], None], interval_ms: float) -> None:
        self.load = load
        self.save = save
        self.interval_ms = interval_ms
        self.machine: CheckpointSpoutMachine | None = None

    def open(self, conf, context) -> None:
        self.saved = self.load()
        self.machine = CheckpointSpoutMachine(self.saved, self.interval_ms, time.monotonic())

    def _save(self, state) -> None:
        # The record must say PREPARING/COMMITTING before the step is sent; if it cannot be
        # written (Redis down), fall back to what is recorded and recover from there.
        try:
            self.save(state)
        except Exception:
            self.machine.state = self.saved
            self.machine.on_fail(state.txid)
            raise
        self.saved = state

    def next_tuple(self) -> None:
        out, save = self.machine.next(time.monotonic())
        if save is not None:
            self._save(save)
        if out is not None:
            self.emit([out[0], out[1]], msg_id=out[0], stream=CHECKPOINT_STREAM)

    def ack(self, msg_id) -> None:
        state = self.machine.on_ack(msg_id)
        if state is not None:
            self._save(state)

    def fail(self, msg_id) -> None:
        self.machine.on_fail(msg_id)
