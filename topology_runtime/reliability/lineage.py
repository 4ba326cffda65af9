"""What an exactly-once spout task emitted since its last committed checkpoint, without I/O.

In exactly-once mode completion is proven by barriers, not by per-tuple acker trees: a
checkpoint t commits only after barrier t passed every bolt, and channels are FIFO, so every
tuple a spout emitted before barrier t was processed by then. No acker sees a data tuple.
A tuple still carries its spout root (``{root: 0}``, passed unchanged down the topology) for
one reason: a bolt that fails it must name the spout entry (a poison record's failure count)
before the rollback. The root encodes the spout task and a per-task sequence number, so that
entry is found by index, not by a per-tuple map.

``add`` per emit (one list append), ``barrier`` per checkpoint, ``committed`` hands back the
message ids checkpoint t covered (the spout's acks), ``msg_id`` resolves a failed root.
"""

from __future__ import annotations

from typing import Any

SEQ_BITS = 40
SEQ_MASK = (1 << SEQ_BITS) - 1
_ABSENT = object()


def spout_task_of(root: int) -> int:
    """The spout task that emitted the tuple tree ``root`` (exactly-once roots only)."""
    return root >> SEQ_BITS


class SpoutLineage:
    __slots__ = ("prefix", "base", "ids", "marks")

    def __init__(self, task: int) -> None:
        self.prefix = task << SEQ_BITS
        self.base = 0  # sequence number of ids[0]
        self.ids: list[Any] = []  # message ids emitted and not yet committed, in emit order
        self.marks: list[tuple[int, int]] = []  # (txid, sequence number its barrier followed)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, msg_id: Any) -> int:
        """Record an emit; return the tuple's root."""
        ids = self.ids
        ids.append(msg_id)
        return self.prefix | ((self.base + len(ids) - 1) & SEQ_MASK)

    def barrier(self, txid: int) -> None:
        """Barrier ``txid`` leaves after everything added so far."""
        self.marks.append((txid, self.base + len(self.ids)))

    def committed(self, txid: int) -> list[Any]:
        """Checkpoint ``txid`` committed: the message ids it covers (every barrier up to it)
        leave; returned in emit order."""
        upto = None
        marks = self.marks
        while marks and marks[0][0] <= txid:
            upto = marks.pop(0)[1]
        if upto is None:
            return []
        n = upto - self.base
        done = self.ids[:n]
        del self.ids[:n]
        self.base = upto
        return done

    def msg_id(self, root: int) -> Any:
        """The message id of an uncommitted root of this task, or ``_ABSENT`` (see ``known``)."""
        i = (root & SEQ_MASK) - (self.base & SEQ_MASK)
        if root >> SEQ_BITS != self.prefix >> SEQ_BITS or not 0 <= i < len(self.ids):
            return _ABSENT
        return self.ids[i]

    @staticmethod
    def known(msg_id: Any) -> bool:
        return msg_id is not _ABSENT
