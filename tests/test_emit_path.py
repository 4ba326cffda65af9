"""A bolt's emit, whose common cases run in one frame (worker/bolt_executor.py): in exactly-once
mode an output carries its inputs' spout roots, acked it gets a new edge in each input's tree;
either way it goes where the grouping says, tuple sampling sees it, and a bad emit raises in the
caller naming the component, stream and field, sending nothing."""

from __future__ import annotations

import time

import pytest

from topology_runtime import BasicBolt, Bolt, Spout, Stream, TopologyBuilder, TopologyContext
from topology_runtime.api.components import Tuple
from topology_runtime.plan.planner import build_plan
from topology_runtime.transport.wire import WireTypeError
from topology_runtime.worker import routing
from topology_runtime.worker.bolt_executor import BoltExecutor
from topology_runtime.worker.executor_base import EmitError
from topology_runtime.worker.inspection import Inspection
from topology_runtime.worker.port import WorkerPort


class Src(Spout):
    outputs = ["line"]


class Split(BasicBolt):
    outputs = {"default": ["word", "n"], "targeted": Stream(["word"], direct=True)}


class Sink(Bolt):
    outputs = {}


@pytest.fixture
def split():
    b = TopologyBuilder()
    b.set_spout("src", Src())
    b.set_bolt("split", Split()).shuffle_grouping("src")
    b.set_bolt("count", Sink(), 3).fields_grouping("split", ["word"])
    b.set_bolt("direct", Sink()).direct_grouping("split", "targeted")
    plan = build_plan(b.create_topology(), {"topology.acker.executors": 1}, workers=1)
    (task,) = plan.component_tasks["split"]
    ctx = TopologyContext(task, "split", 0, plan.component_tasks, topology=plan.topology)
    routes = routing.build_routes(plan, "split", task, set(plan.task_component), ctx)
    delivered: list = []
    port = WorkerPort(deliver=lambda *m: delivered.append(m), enqueue=None, record_error=None, run_off_loop=None,
                      barrier_done=None, exactly_once_failure=None, preferred_acker_slot=lambda: 0, n_ackers=1,
                      streams=plan.streams, exactly_once=True)
    bolt = Split()
    ex = BoltExecutor(port, task, "split", bolt, routes, basic=True)
    return bolt, ex, delivered, plan


def test_an_output_carries_its_inputs_spout_roots_and_goes_where_the_grouping_says(split):
    bolt, ex, delivered, plan = split
    info = plan.streams[0]
    one, two = Tuple(["a b"], info, 1, {101: 0}), Tuple(["c"], info, 1, {202: 0})
    ex.current = one  # as while a BasicBolt's execute runs
    targets = bolt.emit(["w1", 3])
    assert len(targets) == 1 and targets[0] in plan.component_tasks["count"]
    assert [(m[0], m[1], m[4]) for m in delivered] == [(targets[0], ["w1", 3], {101: 0})]
    assert bolt.emit(["w1", 4]) == targets  # the same word, the same task
    ex.current = None
    delivered.clear()
    bolt.emit(("w2", 1), anchors=[one, two])  # a tuple is taken as a list; several inputs' roots
    assert delivered[0][1] == ["w2", 1] and delivered[0][4] == {101: 0, 202: 0}
    bolt.emit(["w3", 1])  # unanchored
    assert delivered[1][4] is None
    assert ex.stats.emitted == 4


@pytest.mark.parametrize("emit, error, names", [
    (lambda b: b.emit(["w"]), ValueError, ["'split'", "'default'", "'word'", "'n'"]),
    (lambda b: b.emit(["w", object()]), WireTypeError, ["'split'", "'default'", "field 'n'", "object"]),
    (lambda b: b.emit(["w", 2**70]), WireTypeError, ["'split'", "field 'n'"]),
    (lambda b: b.emit(["w", {1: object()}]), WireTypeError, ["'split'", "field 'n'"]),
    (lambda b: b.emit(["w"], stream="nope"), EmitError, ["'split'", "'nope'"]),
    (lambda b: b.emit(["w"], stream="targeted"), EmitError, ["'split'", "'targeted'", "emit_direct"]),
])
def test_a_bad_emit_raises_naming_the_fault_and_sends_nothing(split, emit, error, names):
    bolt, ex, delivered, _ = split
    with pytest.raises(error) as e:
        emit(bolt)
    assert all(n in str(e.value) for n in names), str(e.value)
    assert delivered == [] and ex.stats.emitted == 0


def test_tuple_sampling_sees_an_exactly_once_bolts_emits_and_lets_go_at_the_expiry(split):
    bolt, ex, delivered, _ = split
    insp = Inspection([ex])
    insp.apply({}, {"component": "split", "percent": 100, "until": time.time() + 60})
    bolt.emit(["sampled", 1])
    assert [s["values"] for s in insp.take_samples()] == [repr(["sampled", 1])]
    insp.tick(time.time() + 61)
    bolt.emit(["after", 2])
    assert insp.take_samples() == []
    assert [m[1] for m in delivered] == [["sampled", 1], ["after", 2]] and ex.stats.emitted == 2


@pytest.fixture
def acked_split(split):
    """The same bolt with acking on (acker trees: each output gets a fresh edge id)."""
    _, ex, _, plan = split
    delivered: list = []
    port = WorkerPort(deliver=lambda *m: delivered.append(m), enqueue=None, record_error=None, run_off_loop=None,
                      barrier_done=None, exactly_once_failure=None, preferred_acker_slot=lambda: 0, n_ackers=1,
                      streams=plan.streams, exactly_once=False)
    bolt = Split()
    acked = BoltExecutor(port, ex.task, "split", bolt, ex.routes, basic=True)
    return bolt, acked, delivered, plan


def test_acked_an_output_gets_a_new_edge_in_each_input_tree_and_the_input_records_it(acked_split):
    bolt, ex, delivered, plan = acked_split
    info = plan.streams[0]
    one, two = Tuple(["a b"], info, 1, {101: 7}), Tuple(["c"], info, 1, {202: 9})
    ex.current = one  # a BasicBolt's input: the default anchor
    bolt.emit(["w1", 3])
    bolt.emit(["w2", 4])
    (root, e1), (_, e2) = (next(iter(m[4].items())) for m in delivered)
    assert root == 101 and e1 != e2 and one.out_ack_val == e1 ^ e2  # XOR of its children's edges
    ex.current = None
    bolt.emit(["w3", 1], anchors=[one, two])  # several inputs: a new edge in each one's tree
    edges = delivered[2][4]
    assert set(edges) == {101, 202} and one.out_ack_val == e1 ^ e2 ^ edges[101] and two.out_ack_val == edges[202]
    bolt.emit(["w4", 1])  # unanchored: no tree
    bolt.emit(["w5", 1], anchors=Tuple(["x"], info, 1, None))  # an input in no tree
    assert delivered[3][4] is None and delivered[4][4] is None and ex.stats.emitted == 5


def test_acked_tuple_sampling_sees_the_emits(acked_split):
    bolt, ex, delivered, plan = acked_split
    insp = Inspection([ex])
    insp.apply({}, {"component": "split", "percent": 100, "until": time.time() + 60})
    ex.current = Tuple(["a b"], plan.streams[0], 1, {101: 7})
    bolt.emit(["sampled", 1])
    assert [s["values"] for s in insp.take_samples()] == [repr(["sampled", 1])]
    insp.tick(time.time() + 61)
    bolt.emit(["after", 2])
    assert insp.take_samples() == [] and len(delivered) == 2 and all(m[4] for m in delivered)
