"""Storm's RotatingMap: timeouts without a timer per entry.

Entries live in the head bucket when put; ``rotate`` drops the oldest bucket and returns what
it held. With a tick every T seconds, an entry expires between (buckets-1)*T and buckets*T
after its last put.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

_MISSING = object()  # a stored None is a value like any other


class RotatingMap:
    __slots__ = ("_buckets", "_older", "_on_expire")

    def __init__(self, num_buckets: int, on_expire: Callable[[Any, Any], None] | None = None) -> None:
        if num_buckets < 2:
            raise ValueError("RotatingMap needs at least 2 buckets")
        self._buckets: list[dict] = [{} for _ in range(num_buckets)]
        self._older = self._buckets[1:]  # every bucket but the head: put clears the key there
        self._on_expire = on_expire

    def put(self, key: Any, value: Any) -> None:
        self._buckets[0][key] = value
        for b in self._older:
            b.pop(key, None)

    def get(self, key: Any, default: Any = None) -> Any:
        for b in self._buckets:
            v = b.get(key, _MISSING)
            if v is not _MISSING:
                return v
        return default

    def __contains__(self, key: Any) -> bool:
        for b in self._buckets:
            if key in b:
                return True
        return False

    def remove(self, key: Any, default: Any = None) -> Any:
        for b in self._buckets:
            v = b.pop(key, _MISSING)
            if v is not _MISSING:
                return v
        return default

    def __len__(self) -> int:
        return sum(map(len, self._buckets))  # no generator frame: a spout asks once a next_tuple

    def items(self) -> Iterator[tuple[Any, Any]]:
        for b in self._buckets:
            yield from b.items()

    def rotate(self) -> dict:
        """Drop the oldest bucket; return (and report to on_expire) its entries."""
        dead = self._buckets.pop()
        self._buckets.insert(0, {})
        self._older = self._buckets[1:]
        if self._on_expire is not None:
            for k, v in dead.items():
                self._on_expire(k, v)
        return dead
