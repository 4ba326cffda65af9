"""CoordinatedBolt (topology_runtime.drpc) without processes: wrappers driven by a small in-memory
router, against Storm's checkFinishId rules and Storm's DRPCIntegrationTest scenarios."""

from __future__ import annotations

import copy
import random
import zlib

import pytest
from drpc_topologies import CountBatch, CreateTuples, PassOn

from topology_runtime import BasicBolt, Bolt, FailedException, TopologyBuilder
from topology_runtime.api.components import TICK_INFO, StreamInfo, TopologyContext, Tuple, declared_streams
from topology_runtime.coordination import ALL, SINGLE
from topology_runtime.drpc import COORD_STREAM, CoordinatedBolt, LinearDRPCTopologyBuilder, coordinate

REQ = "req"  # the component the request and id tuples come from


class Sim:
    """Tasks of coordinated components; emits routed by ``subs[(src, stream)] = [(dst, kind)]``
    (kind shuffle | fields (on field 0) | all | direct), delivered in a seeded random order."""

    def __init__(self, comps: dict[str, tuple[CoordinatedBolt, int]], subs: dict, seed: int = 0,
                 conf: dict | None = None) -> None:
        self.comps, self.subs, self.rng = comps, subs, random.Random(seed)
        self.queue: list[tuple[int, Tuple]] = []
        self.acked: list[Tuple] = []
        self.failed: list[Tuple] = []
        self.tasks: dict[int, tuple[str, CoordinatedBolt]] = {}
        ctasks, n = {REQ: [0]}, 1
        for cid, (_, par) in comps.items():
            ctasks[cid] = list(range(n, n + par))
            n += par
        self.ctasks = ctasks
        for cid, (template, _) in comps.items():
            for i, task in enumerate(ctasks[cid]):
                inst = copy.deepcopy(template)
                self._bind(inst, cid, task)
                inst.prepare(conf or {"topology.message.timeout.secs": 30}, TopologyContext(task, cid, i, ctasks))
                inst.rotate_secs, inst._next_rotate = 0.0, 0.0  # every tick rotates
                self.tasks[task] = (cid, inst)
        self.rr = 0

    def _bind(self, inst, cid: str, task: int) -> None:
        streams = declared_streams(inst, cid)

        def deliver(targets, values, stream):
            info = StreamInfo(0, cid, stream, streams[stream].fields)
            for t in targets:
                self.queue.append((t, Tuple(list(values), info, task, None)))
            return targets

        def emit(values, anchors=None, stream="default"):
            targets = []
            for dst, kind in self.subs.get((cid, stream), []):
                tasks = self.ctasks[dst]
                if kind == "all":
                    targets += tasks
                elif kind == "fields":
                    targets.append(tasks[zlib.crc32(str(values[0]).encode()) % len(tasks)])
                else:
                    self.rr += 1
                    targets.append(tasks[self.rr % len(tasks)])
            return deliver(targets, values, stream)

        def emit_direct(target, values, anchors=None, stream="default"):
            return deliver([target], values, stream)

        inst.emit, inst.emit_direct = emit, emit_direct
        inst.ack, inst.fail = self.acked.append, self.failed.append
        inst.reset_timeout = lambda t: None

    def inject(self, cid: str, values: list, stream: str = "default", task_index: int = 0) -> Tuple:
        tup = Tuple(values, StreamInfo(0, REQ, stream, ["request", "args"][:len(values)]), 0, None)
        self.queue.append((self.ctasks[cid][task_index], tup))
        return tup

    def run(self) -> None:
        while self.queue:
            task, tup = self.queue.pop(self.rng.randrange(len(self.queue)))
            self.tasks[task][1].execute(tup)

    def tick(self) -> None:
        for _, inst in self.tasks.values():
            inst.execute(Tuple([1], TICK_INFO, -1, None))

    def instances(self, cid: str) -> list:
        return [self.tasks[t][1] for t in self.ctasks[cid]]


# --- delegates --------------------------------------------------------------------------------------
class Finisher(Bolt):
    """finished_id / timeout_id callbacks (FinishedCallback, TimeoutCallback)."""

    outputs = ["id", "n"]
    log: list = []

    def __init__(self, fail_finish: bool = False) -> None:
        self.fail_finish = fail_finish

    def execute(self, tup):
        self.ack(tup)

    def finished_id(self, id_):
        if self.fail_finish:
            raise FailedException("no")
        self.log.append(("finished", id_))
        self.emit([id_, "done"])

    def timeout_id(self, id_):
        self.log.append(("timeout", id_))


def _three_stages(seed: int, last=None):
    """A (2 tasks, first stage) -> B (3, shuffle) -> C (2, fields on id, id stream from REQ)."""
    comps = {
        "A": (CoordinatedBolt(CreateTuples(), sources={}, downstream=["B"]), 2),
        "B": (CoordinatedBolt(PassOn(), sources={"A": SINGLE}, downstream=["C"]), 3),
        "C": (CoordinatedBolt(last or CountBatch(), sources={"B": ALL}, downstream=[], id_stream=(REQ, "id")), 2),
        "OUT": (CoordinatedBolt(PassOn(), sources={}, downstream=[]), 1),
    }
    subs = {("A", "default"): [("B", "shuffle")], ("A", COORD_STREAM): [("B", "direct")],
            ("B", "default"): [("C", "fields")], ("B", COORD_STREAM): [("C", "direct")],
            ("C", "default"): [("OUT", "all")]}
    return Sim(comps, subs, seed)


def _request(sim: Sim, rid: str, n: int) -> tuple[Tuple, Tuple]:
    req = sim.inject("A", [rid, str(n)], task_index=zlib.crc32(rid.encode()) % 2)
    c_tasks = sim.ctasks["C"]
    idt = Tuple([rid], StreamInfo(0, REQ, "id", ["request"]), 0, None)
    sim.queue.append((c_tasks[zlib.crc32(rid.encode()) % len(c_tasks)], idt))  # fields grouping on the id
    return req, idt


@pytest.mark.parametrize("seed", range(5))
def test_counts_across_three_stages_including_a_request_that_emits_nothing(seed):
    """Each request's count arrives exactly once, correct, whatever the delivery order, also for a
    request whose first stage emits 0 tuples; the request and id tuples are acked, none failed."""
    sim = _three_stages(seed)
    sizes = {"r0": 0, "r1": 1, "r2": 7, "r3": 30}
    held = [t for rid, n in sizes.items() for t in _request(sim, rid, n)]
    sim.run()
    results = sorted(tuple(t.values) for t in sim.acked if t.info.component == "C" and t.info.stream == "default")
    assert results == sorted((rid, n) for rid, n in sizes.items())
    assert all(any(a is t for a in sim.acked) for t in held) and not sim.failed
    assert not any(len(i.tracker.tracked) for i in sim.instances("A") + sim.instances("B"))  # all finished


def test_last_stage_waits_for_the_id_tuple():
    """Counts complete before the id tuple: nothing is finished until it arrives (the tricky
    pass-through case: a first stage that passes the request on, an id-stream finisher)."""
    Finisher.log = []
    comps = {"P": (CoordinatedBolt(PassOn(), sources={}, downstream=["F"]), 1),
             "F": (CoordinatedBolt(Finisher(), sources={"P": SINGLE}, downstream=[], id_stream=(REQ, "id")), 1)}
    subs = {("P", "default"): [("F", "shuffle")], ("P", COORD_STREAM): [("F", "direct")]}
    sim = Sim(comps, subs)
    sim.inject("P", ["x", "a"])
    sim.run()
    assert Finisher.log == []  # counts matched, but no id tuple yet
    idt = Tuple(["x"], StreamInfo(0, REQ, "id", ["request"]), 0, None)
    sim.queue.append((sim.ctasks["F"][0], idt))
    sim.run()
    assert Finisher.log == [("finished", "x")]
    assert any(a is idt for a in sim.acked) and not sim.failed  # the held id tuple acked at finish


def test_middle_stage_waits_for_every_report_and_a_late_tuple():
    """B (all, 2 upstream tasks) finishes only when both A tasks reported and the tuple one of
    them announced arrived, even when it arrives after the reports."""
    Finisher.log = []
    cb = CoordinatedBolt(Finisher(), sources={"A": ALL}, downstream=[])
    sim = Sim({"A": (CoordinatedBolt(PassOn(), sources={}, downstream=[]), 2), "B": (cb, 1)}, {})
    b = sim.instances("B")[0]
    a1, a2 = sim.ctasks["A"]
    coord = StreamInfo(0, "A", COORD_STREAM, ["id", "count"])
    b.execute(Tuple(["r", 1], coord, a1, None))
    b.execute(Tuple(["r", 0], coord, a2, None))
    assert Finisher.log == []
    b.execute(Tuple(["r", 0], StreamInfo(0, "A", "default", ["id", "n"]), a1, None))
    assert Finisher.log == [("finished", "r")]
    assert len(sim.acked) == 3 and not sim.failed  # both coord tuples (held) and the data tuple


def test_failed_exception_in_finished_id_fails_the_request():
    """finished_id raises FailedException: the held id tuple fails (so does the request's tree),
    no counts go downstream."""
    sim = _three_stages(0, last=Finisher(fail_finish=True))
    req, idt = _request(sim, "r", 3)
    sim.run()
    assert any(f is idt for f in sim.failed)
    assert not any(t.info.component == "C" and t.info.stream == COORD_STREAM for _, t in sim.queue)


def test_first_stage_finishes_when_the_request_tuple_fails():
    """A first-stage delegate failing the request tuple: the id is done (failed) there, no counts
    are reported, and the request tuple fails."""
    class Fails(BasicBolt):
        outputs = ["id", "n"]

        def execute(self, tup):
            raise FailedException("bad request")

    sim = Sim({"A": (CoordinatedBolt(Fails(), sources={}, downstream=[]), 1)}, {})
    req = sim.inject("A", ["r", "1"])
    sim.run()
    assert sim.failed == [req] and not sim.acked and len(sim.instances("A")[0].tracker.tracked) == 0


def test_timeout_calls_timeout_id_and_fails_the_id():
    """An id whose counts never complete: after the timeout (ticks rotating the tracker)
    timeout_id runs once and the held tuples fail."""
    Finisher.log = []
    sim = Sim({"A": (CoordinatedBolt(PassOn(), sources={}, downstream=[]), 2),
               "B": (CoordinatedBolt(Finisher(), sources={"A": ALL}, downstream=[]), 1)}, {})
    b = sim.instances("B")[0]
    held = Tuple(["r", 0], StreamInfo(0, "A", COORD_STREAM, ["id", "count"]), sim.ctasks["A"][0], None)
    b.execute(held)  # one of two reports: never finished
    for _ in range(3):
        sim.tick()
    assert Finisher.log == [("timeout", "r")]
    assert sim.failed == [held]
    sim.tick()
    assert Finisher.log == [("timeout", "r")]  # once


def test_coordinate_wires_an_ordinary_topology():
    """coordinate(builder): sources (single after a first stage, all later), downstream, the direct
    $coord subscriptions and the tick, then the topology validates."""
    from topology_runtime.testing import FixedTupleSpout

    b = TopologyBuilder()
    b.set_spout("requests", FixedTupleSpout([["r1", "3"]], fields=["id", "n"]))
    first = CoordinatedBolt(CreateTuples())
    middle = CoordinatedBolt(PassOn())
    last = CoordinatedBolt(CountBatch())
    b.set_bolt("first", first, 2).fields_grouping("requests", ["id"])
    b.set_bolt("middle", middle, 3).shuffle_grouping("first")
    b.set_bolt("last", last, 2).fields_grouping("middle", ["id"])
    coordinate(b)
    topo = b.create_topology()
    assert (first.sources, middle.sources, last.sources) == ({}, {"first": SINGLE}, {"middle": ALL})
    assert (first.downstream, middle.downstream, last.downstream) == (["middle"], ["last"], [])
    inputs = {(g.source, g.stream, g.kind) for g in topo.components["last"].inputs}
    assert ("middle", COORD_STREAM, "direct") in inputs
    assert topo.components["middle"].conf["topology.tick.tuple.freq.secs"] > 0


def test_linear_builder_wiring_and_bad_names():
    b = LinearDRPCTopologyBuilder("probe")
    b.add_bolt(CreateTuples(), 2)
    b.add_bolt(PassOn(), 3).shuffle_grouping()
    b.add_bolt(CountBatch(), 2).fields_grouping(["id"])
    topo = b.create_topology()
    assert list(topo.components) == ["spout", "prepare-request", "bolt0", "bolt1", "bolt2", "join-result",
                                     "return-results"]
    last = topo.components["bolt2"]
    assert last.template.id_stream == ("prepare-request", "id")  # a BatchBolt finisher gets the id stream
    assert last.template.sources == {"bolt1": ALL} and topo.components["bolt1"].template.sources == {"bolt0": SINGLE}
    one = LinearDRPCTopologyBuilder("one")
    one.add_bolt(CountBatch(), 3)  # a lone finisher stage: request and id tuple to the same task
    kinds = {(g.stream, g.kind) for g in one.create_topology().components["bolt0"].inputs}
    assert kinds == {("args", "fields"), ("id", "fields")}
    with pytest.raises(ValueError, match="function: invalid DRPC function name 'a b'"):
        LinearDRPCTopologyBuilder("a b")
    with pytest.raises(ValueError, match="DRPC function name"):
        from topology_runtime.drpc import DRPCClient

        DRPCClient("redis://127.0.0.1:1/0").execute("bad:name", "x")
