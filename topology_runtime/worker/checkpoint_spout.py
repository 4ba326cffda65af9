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

    HOLD_CHECK_SECS = 0.05  # a hold is looked up at most this often, only when a checkpoint is due

    def __init__(self, load: Callable[[], Any], save: Callable[[Any], None], interval_ms: float,
                 held: Callable[[], bool] | None = None) -> None:
        self.load = load
        self.save = save
        self.interval_ms = interval_ms
        self.held = held
        self.machine: CheckpointSpoutMachine | None = None
        self._hold = False
        self._hold_checked = float("-inf")

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
        now = time.monotonic()
        hold = False
        if self.held is not None and self.machine.would_start(now):
            if now - self._hold_checked >= self.HOLD_CHECK_SECS:
                self._hold_checked, self._hold = now, bool(self.held())
            hold = self._hold
        out, save = self.machine.next(now, hold)
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
