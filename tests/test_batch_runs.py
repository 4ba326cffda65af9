"""Batches between workers carry runs: consecutive tuples from one source task to one task on one
stream travel as one entry (their values and anchors as two columns), so a batch is packed and
unpacked with a few objects per tuple instead of one five-field entry each.

The send path (worker/delivery.py) builds the runs and the receiving worker's ``_handle_batch``
queues their tuples. What must hold: every channel's order (a checkpoint barrier stays between
the tuples it was sent between), each tuple's values, anchors, source and stream, priority tuples
ahead of the data, a full batch counted in tuples, and a batch over the size cap split in two
in order (by runs, or a lone run by its tuples)."""

from __future__ import annotations

import collections
import random
import types

from topology_runtime.transport.sockets import pack, unpack
from topology_runtime.worker import delivery
from topology_runtime.worker.batches import DATA, TUPLES, halves, new_batch
from topology_runtime.worker.worker import Worker

HERE, PEER = 0, 1
CHECKPOINT_SID, PRIORITY_SID = 7, 8


class Info:
    def __init__(self, sid: int) -> None:
        self.sid, self.chunk = sid, False


class Task:
    """A receiving task: what it runs, in order; its checkpoint handler records barriers."""

    def __init__(self, task: int, ran: list) -> None:
        self.task, self.ran = task, ran
        self.checkpoint_handler = types.SimpleNamespace(process=lambda tup: ran.append((task, "barrier", tup)))

    def process(self, tup) -> None:
        self.ran.append((self.task, "data", tup))


def sender(batch_size: int = 1000):
    w = types.SimpleNamespace(queue=collections.deque(), completed_calls=collections.deque(), local_bolts={},
                              outbox={}, task_worker={10: PEER, 11: PEER}, send_now_sids=frozenset({PRIORITY_SID}),
                              checkpoint_sids=frozenset({CHECKPOINT_SID}), priority_sids=frozenset({PRIORITY_SID}),
                              batch_size=batch_size, sent=[])

    def send_peer(peer):
        ob = w.outbox.pop(peer, None)
        if ob:
            w.sent.append((ob[TUPLES], pack([HERE, *ob[:TUPLES]])))
    w._send_peer, w._run_completions = send_peer, lambda: None
    return w, delivery.make_deliver(w)


def receiver(streams: dict):
    ran: list = []
    w = types.SimpleNamespace(queue=collections.deque(), streams=streams, recv_batches=0, misrouted=0,
                              local_bolts={10: Task(10, ran), 11: Task(11, ran)},
                              special_sids=frozenset({CHECKPOINT_SID, PRIORITY_SID}),
                              checkpoint_sids=frozenset({CHECKPOINT_SID}), acking=None)
    return w, types.MethodType(Worker._handle_batch, w), ran


def test_every_channel_keeps_its_order_and_each_tuple_its_values_anchors_source_and_stream():
    rng = random.Random(7)
    streams = {sid: Info(sid) for sid in (1, 2, CHECKPOINT_SID)}
    out, deliver = sender()
    sent = []  # (task, src, sid, values, anchors) in the order emitted
    for i in range(600):
        task, src = rng.choice((10, 11)), rng.choice((3, 4))
        sid = CHECKPOINT_SID if i % 97 == 0 else rng.choice((1, 2))
        # a sentence's words share one anchors object; None (unanchored) and per-tuple dicts too
        anchors = rng.choice((None, {i: i * 3}, {5: 0}))
        values = [f"w{i}", i]
        deliver(task, values, streams[sid], src, anchors)
        sent.append((task, src, sid, values, anchors))
    out._send_peer(PEER)
    assert sum(n for n, _ in out.sent) == 600
    runs = sum(len(unpack(p)[1]) for _, p in out.sent)
    assert runs < 600  # consecutive tuples of a channel did share entries

    into, handle_batch, ran = receiver(streams)
    for _, payload in out.sent:
        handle_batch(payload)
    while into.queue:
        ex, tup = into.queue.popleft()
        ex.process(tup)
    got = [(task, tup.source_task, tup.info.sid, tup.values, tup.anchors, kind) for task, kind, tup in ran]
    assert [g[:5] for g in got] == [(t, s, sid, v, a) for t, s, sid, v, a in sent]
    assert [g[5] == "barrier" for g in got] == [sid == CHECKPOINT_SID for _, _, sid, _, _ in sent]


def test_a_priority_tuple_leaves_at_once_and_is_queued_ahead_of_the_data():
    streams = {1: Info(1), PRIORITY_SID: Info(PRIORITY_SID)}
    out, deliver = sender()
    for i in range(5):
        deliver(10, [i], streams[1], 3, None)
    assert out.sent == []
    deliver(10, ["commit"], streams[PRIORITY_SID], 3, None)
    assert [n for n, _ in out.sent] == [6]  # the priority tuple took the batch with it at once
    into, handle_batch, ran = receiver(streams)
    handle_batch(out.sent[0][1])
    assert [tup.values for _, tup in into.queue] == [["commit"], [0], [1], [2], [3], [4]]


def test_a_batch_is_full_at_batch_size_tuples_however_few_runs_they_make():
    streams = {1: Info(1)}
    out, deliver = sender(batch_size=50)
    for i in range(120):
        deliver(10, [i], streams[1], 3, None)  # one channel: a single run until the batch leaves
    assert [n for n, _ in out.sent] == [50, 50]
    assert [len(unpack(p)[DATA + 1]) for _, p in out.sent] == [1, 1]
    assert out.outbox[PEER][TUPLES] == 20


def test_a_batch_over_the_cap_splits_in_order_by_runs_or_a_lone_run_by_its_tuples():
    runs = [[10, 3, 1, [[i] for i in range(k, k + 4)], [{k: i} for i in range(4)]] for k in (0, 4, 8)]
    first, second = halves(runs)
    assert (first, second) == (runs[:1], runs[1:])
    (lone,) = runs[1:2]
    first, second = halves([lone])
    assert first == [[10, 3, 1, lone[3][:2], lone[4][:2]]] and second == [[10, 3, 1, lone[3][2:], lone[4][2:]]]
    assert halves([]) == ([], [])
    one = [[10, 3, 1, [["w"]], [None]]]
    assert halves(one) == ([], one)  # a single tuple is not split into an empty run and itself


def test_a_new_batch_has_six_empty_sections_and_no_tuples():
    assert new_batch() == [[], [], [], [], [], [], 0]
