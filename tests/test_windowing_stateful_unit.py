"""StatefulWindowedBolt in-process: the window saved at PREPARE and restored by a new instance
evaluates exactly the windows an uninterrupted one does (contents, new, expired), acks wait for
the checkpoint, emits anchor only to tuples not yet checkpointed, a rollback reloads the window,
and only the partitions that changed are rewritten. The state round-trips through msgpack, as
in Redis; emit/ack/fail are recorded where the executor would take them."""

from __future__ import annotations

from types import SimpleNamespace

import msgpack
import pytest

from topology_runtime.api.components import StreamInfo, Tuple
from topology_runtime.windowing import Count, Duration, StatefulWindowedBolt
from topology_runtime.windowing import stateful as stateful_mod

INFO = StreamInfo(3, "src", "default", ["key", "ts"])


class PackedState:
    """A KeyValueState whose committed values went through msgpack (what Redis would return)."""

    def __init__(self):
        self.data, self.puts, self.deletes = {}, [], []

    def get(self, key, default=None):
        v = self.data.get(key)
        return default if v is None else msgpack.unpackb(v)

    def put(self, key, value):
        self.puts.append(key)
        self.data[key] = msgpack.packb(value)

    def delete(self, key):
        self.deletes.append(key)
        self.data.pop(key, None)

    def __iter__(self):
        return ((k, msgpack.unpackb(v)) for k, v in self.data.items())


class Recorder(StatefulWindowedBolt):
    outputs = ["end", "keys"]

    def init_state(self, state):
        self.user_state = state

    def execute(self, window):
        self.windows.append(([t["ts"] for t in window.get()], [t["ts"] for t in window.get_new()],
                             [t["ts"] for t in window.get_expired()], window.end_ts))
        self.emit([window.end_ts, len(window.get())])


def make(spec, state, log=None):
    bolt = spec()
    bolt.windows = []
    log = log if log is not None else SimpleNamespace(acked=[], failed=[], emits=[])
    bolt.emit = lambda values, anchors=None, stream="default": log.emits.append((values, [t["ts"] for t in anchors or []]))
    bolt.emit_direct = lambda *a, **k: None
    bolt.ack = lambda t: log.acked.append(t["ts"])
    bolt.fail = lambda t: log.failed.append(t["ts"])
    ctx = SimpleNamespace(component_id="win", task_id=5, component_tasks=lambda c: [1])
    bolt._window_inputs = [("src", "default")]
    bolt.prepare({}, ctx)
    bolt.init_state(state)
    return bolt, log


def feed(bolt, lo, hi):
    for ts in range(lo, hi):
        bolt.execute(Tuple(["k", ts], INFO, 1, {ts: ts}))


def watermark(bolt):
    mark = bolt._wmgen.compute(0)
    if mark is not None:
        bolt._wm.add_watermark(mark)


def event_time_spec(length, sliding=None):
    def spec():
        return Recorder().with_window(length, sliding).with_timestamp_field("ts").with_lag(Duration(0.002))
    return spec


@pytest.mark.parametrize("length,sliding", [
    (Duration(0.01), None),                 # tumbling 10 ms
    (Duration(0.02), Duration(0.005)),      # sliding
    (Count(7), Count(3)),                   # count windows on event time
])
def test_restored_window_evaluates_what_an_uninterrupted_one_does(length, sliding, monkeypatch):
    monkeypatch.setattr(stateful_mod, "PARTITION", 4)  # several partitions, some dropped as they expire
    spec = event_time_spec(length, sliding)
    whole, _ = make(spec, PackedState())
    for lo in range(0, 120, 15):
        feed(whole, lo, lo + 15)
        watermark(whole)

    state = PackedState()
    first, log1 = make(spec, state)
    for lo in range(0, 60, 15):
        feed(first, lo, lo + 15)
        watermark(first)
    feed(first, 60, 67)  # in the window, not evaluated yet
    first.pre_prepare(1)
    assert sorted(log1.acked) == list(range(67))  # every tuple is acked at the checkpoint that holds it
    second, log2 = make(spec, state)  # a new worker: the window comes from the state
    feed(second, 67, 75)
    watermark(second)
    for lo in range(75, 120, 15):
        feed(second, lo, lo + 15)
        watermark(second)
    assert first.windows + second.windows == whole.windows
    assert len(whole.windows) >= 8
    # After the restore, emits anchor only to tuples that are not in a checkpoint yet.
    assert all(ts >= 67 for _, anchors in log2.emits for ts in anchors)


def test_acks_wait_for_the_checkpoint_and_partitions_are_rewritten_only_when_changed(monkeypatch):
    monkeypatch.setattr(stateful_mod, "PARTITION", 10)
    state = PackedState()
    bolt, log = make(event_time_spec(Duration(1)), state)  # 1 s window: nothing leaves it here
    feed(bolt, 0, 25)
    assert log.acked == []
    bolt.pre_prepare(1)
    assert sorted(log.acked) == list(range(25))
    assert {k for k in state.puts if k != "__window"} == {"__window:0", "__window:1", "__window:2"}
    state.puts.clear()
    feed(bolt, 25, 28)
    bolt.pre_prepare(2)
    assert state.puts == ["__window:2", "__window"]  # only the partition that grew
    assert sorted(log.acked) == list(range(28))


def test_expired_partitions_are_deleted(monkeypatch):
    monkeypatch.setattr(stateful_mod, "PARTITION", 5)
    state = PackedState()
    bolt, log = make(event_time_spec(Duration(0.01)), state)
    feed(bolt, 0, 12)
    bolt.pre_prepare(1)
    feed(bolt, 12, 40)
    watermark(bolt)  # windows up to ~37 evaluated; the first tuples expired
    bolt.pre_prepare(2)
    assert "__window:0" in state.deletes and "__window:0" not in state.data
    kept = [row[2] for p in state.get("__window")["parts"] for row in state.get(f"__window:{p}")]
    assert kept == list(range(kept[0], 40)) and kept[0] > 5


def test_rollback_reloads_the_committed_window_and_fails_what_came_after():
    state = PackedState()
    bolt, log = make(event_time_spec(Duration(1)), state)
    feed(bolt, 0, 10)
    bolt.pre_prepare(1)
    committed = dict(state.data)
    feed(bolt, 10, 15)
    bolt.pre_rollback()
    state.data = committed  # what the state's rollback does
    assert sorted(log.failed) == list(range(10, 15))
    feed(bolt, 10, 15)  # the replays
    bolt._wmgen.latest[1] = 2000
    watermark(bolt)
    # Each tuple once: the reload dropped the failed ones, the replays took their place.
    assert sorted(ts for _, new, _, _ in bolt.windows for ts in new) == list(range(15))


def test_failing_evaluation_fails_only_tuples_not_yet_checkpointed():
    class Boom(Recorder):
        def execute(self, window):
            raise RuntimeError("boom")

    state = PackedState()
    bolt, log = make(lambda: Boom().with_window(Duration(0.01)).with_timestamp_field("ts"), state)
    errors = []
    bolt.report_error = lambda what, e: errors.append(str(e))
    feed(bolt, 0, 5)
    bolt.pre_prepare(1)
    feed(bolt, 5, 9)
    bolt._wmgen.latest[1] = 100
    watermark(bolt)  # windows ending 0 ([0]) and 10 ([1..8]) evaluated: both raise
    assert errors == ["boom", "boom"]
    assert sorted(log.failed) == [5, 6, 7, 8]  # 0..4 are in checkpoint 1: acked, they stay


def test_window_longer_than_the_message_timeout_is_allowed():
    from topology_runtime import TopologyBuilder
    from topology_runtime.testing import FixedTupleSpout

    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout([["k", 1]], ["key", "ts"]))
    b.set_bolt("win", Recorder().with_window(Duration(120)).with_timestamp_field("ts")).global_grouping("src") \
        .add_configuration("topology.message.timeout.secs", 30)
    b.create_topology()  # acks wait for the checkpoint, not for the window


def test_window_state_of_another_format_is_refused_naming_the_bolt():
    state = PackedState()
    state.put("__window", {"format": 99})
    with pytest.raises(ValueError, match=r"win\[5\]: window state format 99 is not 2"):
        make(event_time_spec(Duration(1)), state)
