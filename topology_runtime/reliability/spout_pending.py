"""A spout task's pending map (Storm's SpoutExecutor ``pending``), without I/O.

root id -> (msg_id, emit time). ``tick`` every ``topology.message.timeout.secs`` rotates it;
what falls out timed out and must be failed to the spout.
"""

from __future__ import annotations

from typing import Any

from .rotating_map import RotatingMap


class SpoutPending:
    __slots__ = ("_map",)

    def __init__(self, buckets: int = 2) -> None:
        self._map = RotatingMap(buckets)

    def __len__(self) -> int:
        return len(self._map)

    def add(self, root: int, msg_id: Any, emitted_at: float) -> None:
        self._map.put(root, (msg_id, emitted_at))

    def complete(self, root: int) -> tuple[Any, float] | None:
        """ACK or FAIL from the acker: the entry, or None if it already timed out (ignored)."""
        return self._map.remove(root)

    def reset(self, root: int) -> None:
        e = self._map.get(root)
        if e is not None:
            self._map.put(root, e)

    def tick(self) -> list[tuple[Any, float]]:
        """Rotate; return the (msg_id, emitted_at) of every tuple that timed out."""
        return list(self._map.rotate().values())

    def msg_ids(self) -> list[Any]:
        return [v[0] for _, v in self._map.items()]


def value_bytes(values: list) -> int:
    """A cheap estimate of a tuple's size: strings and bytes by length, containers one level
    deep, anything else as a machine word or two. Sampled (``PendingBudget``), not per tuple."""
    n = 0
    for v in values:
        t = type(v)
        if t is str or t is bytes or t is bytearray or t is memoryview:
            n += len(v)
        elif t is list or t is tuple or t is set or t is frozenset:
            n += 16 + sum(len(x) if type(x) in _SIZED else 16 for x in v)
        elif t is dict:
            n += 16 + sum((len(k) if type(k) in _SIZED else 16) + (len(x) if type(x) in _SIZED else 16)
                          for k, x in v.items())
        else:
            n += 16
    return n


_SIZED = frozenset((str, bytes, bytearray, memoryview))


class PendingBudget:
    """How many tuple trees a spout task may have pending: ``topology.max.spout.pending``
    (count), and about ``max_bytes`` of tuple values among them
    (``topology.max.spout.pending.bytes``), so a worker's memory stays bounded whatever the
    tuples weigh. Sizes are sampled (the first emit, then every ``SAMPLE_EVERY``-th): the
    average follows a larger tuple at once and a smaller one slowly. ``cap`` is None when
    neither bound is set."""

    SAMPLE_EVERY = 32
    __slots__ = ("max_pending", "max_bytes", "avg", "countdown", "cap")

    def __init__(self, max_pending: int | None, max_bytes: int | None) -> None:
        self.max_pending = max_pending
        self.max_bytes = max_bytes or None
        self.avg = 0.0
        self.countdown = 0 if self.max_bytes else 1 << 62  # no byte bound: never sample
        self.cap = max_pending

    def observe(self, values: list) -> None:
        """Called when ``countdown`` ran out (the caller decrements it per anchored emit)."""
        self.countdown = self.SAMPLE_EVERY
        size = float(value_bytes(values))
        self.avg = size if size > self.avg else 0.9 * self.avg + 0.1 * size
        by_bytes = max(1, int(self.max_bytes // max(self.avg, 1.0)))
        self.cap = by_bytes if self.max_pending is None else min(self.max_pending, by_bytes)
