"""Spouts for tests (Storm's ``FixedTupleSpout``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..api.components import Spout
from ..api.names import name_list


class FixedTupleSpout(Spout):
    """Emits a fixed list of tuples, each with its index as message id; replays what fails and
    calls ``finish()`` once every tuple was acked, so a run over it is bounded (``finish_input()``
    once everything was emitted, so windows holding its tuples get end of input). ``acked`` and
    ``failed`` list the message ids (per task: each task emits the tuples of its index modulo
    the parallelism)."""

    def __init__(self, tuples: Sequence[Sequence[Any]], fields: Sequence[str]) -> None:
        if isinstance(tuples, (str, bytes)) or any(isinstance(t, (str, bytes)) for t in tuples):
            raise ValueError(f"FixedTupleSpout: tuples must be a list of value lists, got {tuples!r} "
                             "(for one value per tuple write [['a'], ['b']])")
        self.tuples = [list(t) for t in tuples]
        self.outputs = name_list(fields, "fields", "FixedTupleSpout")

    def open(self, conf, context) -> None:
        n, i = len(context.component_tasks(context.component_id)), context.task_index
        self.todo = [k for k in range(len(self.tuples)) if k % n == i]
        self.todo.reverse()  # popped from the end: emitted in order
        self.pending: set[int] = set()
        self.acked: list[int] = []
        self.failed: list[int] = []

    def next_tuple(self) -> None:
        if self.todo:
            k = self.todo.pop()
            self.pending.add(k)
            self.emit(self.tuples[k], msg_id=k)
        elif not self.pending:
            self.finish()
        else:
            self.finish_input()  # the rest may sit in windows until end of input

    def ack(self, msg_id) -> None:
        self.pending.discard(msg_id)
        self.acked.append(msg_id)

    def fail(self, msg_id) -> None:
        self.failed.append(msg_id)
        self.todo.append(msg_id)  # replayed next
