"""The acker: XOR tracking of tuple trees (Storm's daemon/Acker.java), without I/O.

The worker feeds it init/ack/fail/reset messages in any order and sends each returned outcome
to the spout task it names. ``tick`` is called every ``topology.message.timeout.secs``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .rotating_map import RotatingMap

ACK, FAIL, RESET = 0, 1, 2
TIMEOUT_BUCKET_NUM = 3


class AckOutcome(NamedTuple):
    kind: int  # ACK | FAIL | RESET
    spout_task: int
    root: int


class _Entry:
    __slots__ = ("val", "spout_task", "failed")

    def __init__(self) -> None:
        self.val = 0
        self.spout_task = -1
        self.failed = False


class Acker:
    def __init__(self, buckets: int = TIMEOUT_BUCKET_NUM) -> None:
        self.pending = RotatingMap(buckets)

    def __len__(self) -> int:
        return len(self.pending)

    def _entry(self, root: int, refresh: bool) -> _Entry:
        e = self.pending.get(root)
        if e is None:
            e = _Entry()
            self.pending.put(root, e)
        elif refresh:
            self.pending.put(root, e)
        return e

    def _decide(self, root: int, e: _Entry, reset: bool = False) -> AckOutcome | None:
        if e.spout_task < 0:
            return None  # nothing can be reported before INIT names the spout task
        if e.val == 0:  # completion wins over a fail, as in Storm
            self.pending.remove(root)
            return AckOutcome(ACK, e.spout_task, root)
        if e.failed:
            self.pending.remove(root)
            return AckOutcome(FAIL, e.spout_task, root)
        if reset:
            return AckOutcome(RESET, e.spout_task, root)
        return None

    def init(self, root: int, init_val: int, spout_task: int) -> AckOutcome | None:
        e = self._entry(root, refresh=False)
        e.val ^= init_val
        e.spout_task = spout_task
        return self._decide(root, e)

    def ack(self, root: int, ack_val: int) -> AckOutcome | None:
        e = self._entry(root, refresh=False)
        e.val ^= ack_val
        return self._decide(root, e)

    def init_all(self, inits: Iterable[tuple[int, int, int]]) -> list[AckOutcome]:
        """``init`` for each (root, value, spout task) in turn, in one call: the outcomes."""
        out = []
        pending = self.pending
        get = pending.get
        for root, val, spout_task in inits:
            e = get(root)
            if e is None:
                e = _Entry()
                pending.put(root, e)
            e.val ^= val
            e.spout_task = spout_task
            if e.val == 0 or e.failed:  # as _decide, the spout task now known
                pending.remove(root)
                out.append(AckOutcome(ACK if e.val == 0 else FAIL, spout_task, root))
        return out

    def ack_all(self, acks: Iterable[tuple[int, int]]) -> list[AckOutcome]:
        """``ack`` for each (root, value) in turn, in one call (a worker's XOR-combined acks
        for this acker): the outcomes."""
        out = []
        pending = self.pending
        get = pending.get
        for root, val in acks:
            e = get(root)
            if e is None:
                e = _Entry()
                pending.put(root, e)
            e.val ^= val
            # as _decide: a failed entry whose spout task is known is gone already
            if e.val == 0 and e.spout_task >= 0:
                pending.remove(root)
                out.append(AckOutcome(ACK, e.spout_task, root))
        return out

    def fail(self, root: int) -> AckOutcome | None:
        e = self._entry(root, refresh=True)
        e.failed = True
        return self._decide(root, e)

    def reset_timeout(self, root: int) -> AckOutcome | None:
        e = self._entry(root, refresh=True)
        return self._decide(root, e, reset=True)

    def tick(self) -> int:
        """Rotate; expired entries are dropped silently (the spout's own timeout reports them)."""
        return len(self.pending.rotate())
