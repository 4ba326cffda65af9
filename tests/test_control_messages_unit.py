"""The typed control messages: every kind round-trips through its wire map and msgpack, and a
map that is not a message this version understands is refused naming the kind and the field."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from topology_runtime.transport import messages as m

SAMPLES = [
    m.Hello(0, 1, "tcp://127.0.0.1:5", 42, "/usr/bin/python3", "127.0.0.1"),
    m.Ready(1, 0),
    m.Stats(0, 0, {"tasks": {"3": {"emitted": 1}}}, []),
    m.Stopped(0, 2, {"tasks": {}}, [{"component": "c", "task": 1, "error": "e"}]),
    m.Fatal(0, 0, "split", 3, "split[3] prepare() raised ValueError: x", "Traceback ..."),
    m.ProbeReply(1, 0, 7, idle=True, finished=False, input_done=True, pending=3, counters=[1, 2, 3, 4],
                 held={"win": 3}, at_cap={"src": 1000}, cp_final_done=None),
    m.InputDrained(1, 0),
    m.BarrierDone(0, 0, 5, 12),
    m.Committed(1, 0, 12),
    m.ExactlyOnceFailure(0, 0, "barrier 12: Redis down"),
    m.RunFailed(0, 0, "$coordinator", 1, "batch 4 failed 10 times"),
    m.Peers({"0": "tcp://a:1", "1": "tcp://b:2"}),
    m.Probe(9),
    m.Drain(),
    m.Pause(),
    m.Resume(),
    m.Stop(),
    m.FinalCheckpoint(),
    m.EndOfInput(["win"]),
    m.Barrier(12),
    m.Commit(12),
    m.Inspect({"logger": "app", "level": "DEBUG", "until": 1.5}, {"component": "split", "percent": 10.0, "until": 2.5}),
]


def test_every_kind_has_a_sample_and_a_distinct_name():
    assert {type(x) for x in SAMPLES} == set(m.KINDS.values())
    assert len(m.KINDS) == len({cls.KIND for cls in m.KINDS.values()})


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda x: x.KIND)
def test_round_trip_through_msgpack(msg):
    wire = msgpack.unpackb(msgpack.packb(msg.to_wire()), strict_map_key=False)
    assert wire["t"] == msg.KIND
    assert m.parse(wire) == msg


def test_optional_probe_fields_default():
    wire = m.ProbeReply(0, 0, 1, idle=True, finished=True, input_done=True, pending=0, counters=[0, 0, 0, 0]).to_wire()
    for k in ("held", "at_cap", "cp_final_done"):
        del wire[k]
    assert m.parse(wire).held == {} and m.parse(wire).cp_final_done is None


@pytest.mark.parametrize("wire,match", [
    ([1, 2], "is a map"),
    ({"t": "hullo"}, r"unknown control message kind 'hullo' \(known: barrier, "),
    ({"w": 0}, "unknown control message kind None"),
    ({"t": "hello", "w": 0, "inc": 0, "addr": "x", "pid": 1, "python": "p"}, r"'hello': no field 'host'"),
    ({"t": "probe", "seq": "7"}, r"'probe': field 'seq' is str, not int"),
    ({"t": "commit", "txid": True}, r"'commit': field 'txid' is bool, not int"),
    ({"t": "end_of_input", "components": "win"}, r"'end_of_input': field 'components' is str, not list"),
])
def test_malformed_maps_are_refused_naming_kind_and_field(wire, match):
    with pytest.raises(m.ControlMessageError, match=match):
        m.parse(wire)


def test_messages_are_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.Probe(1).seq = 2  # type: ignore[misc]
