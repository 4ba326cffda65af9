"""The end of a bounded run: a worker says when its spouts are done and it is idle, the
supervisor probes at once and then every ENDGAME_PROBE_INTERVAL, and its control loop wakes for
each probe instead of a whole poll later."""

from __future__ import annotations

import time

from topology_runtime import BasicBolt, LocalCluster, TopologyBuilder
from topology_runtime.api.config import resolve_config
from topology_runtime.plan.planner import build_plan
from topology_runtime.supervisor import run_supervisor as rs
from topology_runtime.supervisor.run_supervisor import ENDGAME_PROBE_INTERVAL, PROBE_INTERVAL, RunSupervisor
from topology_runtime.testing.spouts import FixedTupleSpout
from topology_runtime.transport import messages as cm


class Sink(BasicBolt):
    outputs = []

    def execute(self, tup):
        pass


def _topology():
    b = TopologyBuilder()
    b.set_spout("numbers", FixedTupleSpout([[i] for i in range(200)], fields=["n"]), 2)
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("numbers")
    return b.create_topology()


def _running(sup: RunSupervisor) -> None:
    with sup.lock:
        for w in (0, 1):
            sup._on_message(b"w", cm.Hello(w, 0, f"tcp://127.0.0.1:{w + 1}", w + 1, "python", "localhost"))
            sup._on_message(b"w", cm.Ready(w, 0))
    assert sup.state == rs.RUNNING
    sup._probe_at = time.monotonic()  # just probed


def test_input_drained_makes_the_next_step_probe_at_once():
    sup = RunSupervisor("drained", build_plan(_topology(), resolve_config({}), 2))
    try:
        _running(sup)
        seq = sup._probe_seq
        sup.step(0)
        assert sup._probe_seq == seq  # the interval has not gone by
        with sup.lock:
            sup._on_message(b"w", cm.InputDrained(0, 0))
        sup.step(0)
        assert sup._probe_seq == seq + 1
    finally:
        sup.close()


def test_the_control_loop_wakes_for_the_next_probe(monkeypatch):
    sup = RunSupervisor("wakes", build_plan(_topology(), resolve_config({}), 2))
    try:
        timeouts: list[int] = []
        monkeypatch.setattr(sup.control, "poll", lambda ms: timeouts.append(ms) or False)
        _running(sup)
        sup._probe_every = ENDGAME_PROBE_INTERVAL
        sup.step(50)
        assert timeouts[-1] <= ENDGAME_PROBE_INTERVAL * 1000 + 1  # not the whole 50 ms
        sup.state = rs.STARTING
        sup.step(50)
        assert timeouts[-1] == 50  # no probes before the run runs: the caller's poll
    finally:
        sup.close()


def _reply(w: int, seq: int, *, idle: bool, input_done: bool) -> cm.ProbeReply:
    return cm.ProbeReply(w, 0, seq, idle=idle, finished=input_done, input_done=input_done, pending=0,
                         counters=[0, 0, 0, 0])


def test_probes_come_faster_once_every_spout_is_done():
    sup = RunSupervisor("faster", build_plan(_topology(), resolve_config({}), 2))
    try:
        _running(sup)
        for done, every in ((False, PROBE_INTERVAL), (True, ENDGAME_PROBE_INTERVAL)):
            with sup.lock:
                sup._probe()
                for w in (0, 1):  # still busy with what the spouts emitted
                    sup._on_message(b"w", _reply(w, sup._probe_seq, idle=False, input_done=done or w == 0))
            assert sup._probe_every == every
    finally:
        sup.close()


def test_each_worker_says_once_that_its_input_is_drained(monkeypatch):
    seen: list[tuple[int, int]] = []
    on_message = RunSupervisor._on_message

    def record(self, identity, msg):
        if isinstance(msg, cm.InputDrained):
            seen.append((msg.w, msg.inc))
        return on_message(self, identity, msg)

    monkeypatch.setattr(RunSupervisor, "_on_message", record)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("drained-once", _topology(), {}, timeout=60)
    assert status.state == "completed"
    assert sorted(seen) == [(0, 0), (1, 0)]
