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
