"""The batch a worker sends a peer: its sections, and how its data travels as runs.

A batch is ``[sender, data, inits, acks, fails, resets, outcomes]`` on the wire (msgpack). Its
data section holds runs, ``[task, source task, stream id, [values, ...], [anchors, ...]]``: one
per stretch of consecutive tuples from one source to one task on one stream, in the order they
were sent. A word count's split sends most of its words to each remote count task this way, so
a batch costs two list items a tuple instead of a five-field entry each, both ways. While it
fills, the batch also counts its data tuples (``TUPLES``, not sent): it leaves at
``topology.transfer.batch.size`` tuples, however few runs they make."""

from __future__ import annotations

DATA, INIT, ACKS, FAILS, RESETS, OUTCOMES, TUPLES = range(7)


def new_batch() -> list:
    """The next batch for a peer: six empty sections and no tuples."""
    return [[], [], [], [], [], [], 0]


def halves(data: list[list]) -> tuple[list[list], list[list]]:
    """A data section in two halves, in order: by runs, or a lone run by its tuples (a batch over
    the message size cap goes as two)."""
    if len(data) > 1:
        half = len(data) // 2
        return data[:half], data[half:]
    if not data:
        return [], []
    task, src, sid, values, anchors = data[0]
    half = len(values) // 2
    if not half:  # a single tuple: it goes alone, the acker sections ride with an empty half
        return [], data
    return [[task, src, sid, values[:half], anchors[:half]]], [[task, src, sid, values[half:], anchors[half:]]]
