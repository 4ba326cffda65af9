"""Which Kafka offsets a reliable spout may commit (Storm's KafkaSpout OffsetManager), without
I/O: per partition, the offsets emitted and not yet acked; the committable offset is the first
one still pending (or one past the last emitted when none is), so a crash replays from the first
unacked record and never skips one, however out of order the acks came.

A commit counts as done only once the broker confirmed it: an asynchronous one is "sent" until
its callback says so, and a failed one is sent again at the next commit, whether or not more
acks came.
"""

from __future__ import annotations

import heapq

TopicPartitionKey = tuple[str, int]


class PartitionOffsets:
    """One partition: offsets in flight, and the offset to commit."""

    __slots__ = ("_pending", "_heap", "next_offset", "committed", "sent")

    def __init__(self) -> None:
        self._pending: set[int] = set()
        self._heap: list[int] = []  # pending offsets, lazily cleaned of acked ones
        self.next_offset: int | None = None  # one past the highest offset emitted
        self.committed: int | None = None  # what the broker confirmed last
        self.sent: int | None = None  # an asynchronous commit not confirmed yet

    def emitted(self, offset: int) -> None:
        if offset not in self._pending:
            self._pending.add(offset)
            heapq.heappush(self._heap, offset)
        if self.next_offset is None or offset + 1 > self.next_offset:
            self.next_offset = offset + 1

    def acked(self, offset: int) -> None:
        self._pending.discard(offset)

    def pending(self) -> int:
        return len(self._pending)

    def committable(self, resend: bool = False) -> int | None:
        """The offset to commit (Kafka's convention: the next record to read), None if the
        broker has it already or, unless ``resend``, an asynchronous commit of it is on its way."""
        heap = self._heap
        while heap and heap[0] not in self._pending:
            heapq.heappop(heap)
        point = heap[0] if heap else self.next_offset
        if point is None or point == self.committed or (point == self.sent and not resend):
            return None
        return point


class OffsetManager:
    """Every partition a spout task owns, keyed by (topic, partition)."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartitionKey, PartitionOffsets] = {}

    def emitted(self, tp: TopicPartitionKey, offset: int) -> None:
        p = self.partitions.get(tp)
        if p is None:
            p = self.partitions[tp] = PartitionOffsets()
        p.emitted(offset)

    def acked(self, tp: TopicPartitionKey, offset: int) -> bool:
        """False when the partition is no longer this task's (revoked): nothing to record."""
        p = self.partitions.get(tp)
        if p is None:
            return False
        p.acked(offset)
        return True

    def owns(self, tp: TopicPartitionKey) -> bool:
        return tp in self.partitions

    def revoke(self, tp: TopicPartitionKey) -> None:
        self.partitions.pop(tp, None)

    def pending(self) -> int:
        return sum(p.pending() for p in self.partitions.values())

    def to_commit(self, resend: bool = False) -> dict[TopicPartitionKey, int]:
        """What to commit; ``resend``: also what was sent and not confirmed (a synchronous commit
        at close or revoke, after which no callback would come)."""
        return {tp: point for tp, p in self.partitions.items() if (point := p.committable(resend)) is not None}

    def sent(self, points: dict[TopicPartitionKey, int]) -> None:
        for tp, point in points.items():
            p = self.partitions.get(tp)
            if p is not None:
                p.sent = point

    def committed(self, points: dict[TopicPartitionKey, int]) -> None:
        """The broker confirmed these commits (a late confirmation never moves a partition back)."""
        for tp, point in points.items():
            p = self.partitions.get(tp)
            if p is not None:
                if p.committed is None or point > p.committed:
                    p.committed = point
                if p.sent is not None and p.sent <= point:
                    p.sent = None

    def commit_failed(self, points: dict[TopicPartitionKey, int]) -> None:
        """These commits did not happen: the next commit sends them again."""
        for tp, point in points.items():
            p = self.partitions.get(tp)
            if p is not None and p.sent == point:
                p.sent = None
