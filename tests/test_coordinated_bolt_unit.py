"""The one CoordinatedBolt, driven by hand (no worker): a fake context and collector stand in for
the executor, so each scenario is a few calls. Deferred finishes (a transactional commit off the
loop), ids that failed staying failed, and ids that travel in another form than they are tracked."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from topology_runtime.api.components import Bolt, StreamInfo, Tuple
from topology_runtime.coordination import COORD_STREAM, DEFERRED, CoordinatedBolt, IdCodec

TASKS = {"up": [1, 2], "me": [3], "down": [4]}


class Recorder:
    """What the executor would have done with the wrapper's emits, acks and fails."""

    def __init__(self, bolt: CoordinatedBolt) -> None:
        self.coord: list[tuple[int, list, list]] = []
        self.acked: list[Tuple] = []
        self.failed: list[Tuple] = []
        bolt.emit = lambda values, anchors=None, stream="default": [4]
        bolt.emit_direct = self._emit_direct
        bolt.ack, bolt.fail = self.acked.append, self.failed.append
        bolt.router = lambda stream="default": (lambda values: [4])
        bolt.chunk_emitter = lambda stream: (lambda task, head, rows: None)
        bolt.reset_timeout = lambda tup: None
        bolt.run_off_loop = lambda fn, done: None
        context = SimpleNamespace(component_tasks=lambda c: TASKS[c], component_id="me", task_id=3)
        bolt.prepare({"topology.message.timeout.secs": 30}, context)

    def _emit_direct(self, task: int, values: list, anchors: Any = None, stream: str = "default") -> list[int]:
        if stream == COORD_STREAM:
            self.coord.append((task, list(values), list(anchors or [])))
        return [task]


def _tup(values: list, component: str, stream: str = "default", source_task: int = 1) -> Tuple:
    return Tuple(values, StreamInfo(0, component, stream, ["id", "x"]), source_task, None)


class Deferring(Bolt):
    """Passes tuples on and finishes an id later, as a committer whose commit runs off the loop."""

    outputs = ["id", "x"]

    def __init__(self) -> None:
        self.finishing: list[Any] = []

    def execute(self, tup: Tuple) -> None:
        self.emit([tup.values[0], tup.values[1]])
        self.ack(tup)

    def finished_id(self, id_: Any) -> Any:
        self.finishing.append(id_)
        return DEFERRED


def test_a_deferred_finish_sends_its_counts_and_acks_what_was_held_only_when_it_completes():
    d = Deferring()
    bolt = CoordinatedBolt(d, sources={"up": "all"}, downstream=["down"])
    rec = Recorder(bolt)
    data = _tup(["r1", "a"], "up")
    bolt.execute(data)
    c1 = _tup(["r1", 1], "up", COORD_STREAM, 1)
    c2 = _tup(["r1", 0], "up", COORD_STREAM, 2)
    bolt.execute(c1)
    bolt.execute(c2)  # every upstream task reported, the count matches: finished, deferred
    assert d.finishing == ["r1"]
    assert rec.coord == [] and c1 not in rec.acked and c2 not in rec.acked
    d.finish_deferred("r1", None)
    assert rec.coord == [(4, ["r1", 1], [c2, c1])]  # anchored to the finishing tuple and what was held
    assert c1 in rec.acked and c2 in rec.acked and not rec.failed


def test_a_deferred_finish_that_failed_fails_what_was_held_and_raises_for_the_executor():
    d = Deferring()
    bolt = CoordinatedBolt(d, sources={"up": "all"}, downstream=["down"])
    rec = Recorder(bolt)
    c1, c2 = _tup(["r2", 0], "up", COORD_STREAM, 1), _tup(["r2", 0], "up", COORD_STREAM, 2)
    bolt.execute(c1)
    bolt.execute(c2)
    with pytest.raises(RuntimeError, match="commit failed"):
        d.finish_deferred("r2", RuntimeError("commit failed"))
    assert rec.coord == [] and c1 in rec.failed and c2 in rec.failed
    late = _tup(["r2", 0], "up", COORD_STREAM, 1)
    bolt.execute(late)  # the id failed here: a late count fails at once instead of timing out
    assert late in rec.failed


class FailsOnX(Bolt):
    outputs = ["id", "x"]

    def execute(self, tup: Tuple) -> None:
        (self.fail if tup.values[1] == "x" else self.ack)(tup)


def test_an_id_that_failed_here_stays_failed_late_data_is_dropped():
    bolt = CoordinatedBolt(FailsOnX(), sources={"up": "all"}, downstream=["down"])
    rec = Recorder(bolt)
    bad = _tup(["r3", "x"], "up")
    bolt.execute(bad)
    assert rec.failed == [bad]
    late = _tup(["r3", "fine"], "up")
    bolt.execute(late)
    assert late in rec.acked  # dropped (acked, never executed): its request already failed
    bolt.execute(_tup(["r4", "fine"], "up"))  # another id goes on
    bolt.execute(_tup(["r4", 1], "up", COORD_STREAM, 1))
    bolt.execute(_tup(["r4", 0], "up", COORD_STREAM, 2))
    assert [c[1] for c in rec.coord] == [["r4", 0]]


class PairIds(IdCodec):
    """Ids travel as [a, b] lists (unhashable) and are tracked as tuples."""

    def key(self, value: Any) -> Any:
        return tuple(value)

    def wire(self, key: Any) -> Any:
        return list(key)


class Echo(Bolt):
    outputs = ["id", "x"]

    def execute(self, tup: Tuple) -> None:
        self.emit([tup.values[0], tup.values[1]])
        self.ack(tup)


def test_ids_that_travel_as_lists_are_tracked_by_their_key_and_reported_in_their_wire_form():
    bolt = CoordinatedBolt(Echo(), sources={"up": "single"}, downstream=["down"], ids=PairIds())
    rec = Recorder(bolt)
    bolt.execute(_tup([[7, 1], "a"], "up"))
    bolt.execute(_tup([[7, 1], "b"], "up"))  # a fresh list each time: the same id
    bolt.execute(_tup([[7, 1], 2], "up", COORD_STREAM, 1))
    assert [c[1] for c in rec.coord] == [[[7, 1], 2]]
