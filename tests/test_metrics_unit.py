"""The figures behind the metrics, in process: what a worker measures (capacity and execute
latency per stats interval, backpressure time, tuple sampling, log levels), how the supervisor
sums it per component (system components apart) and per worker across restarts, the topology
page's drawing, and how `topology status` and the Prometheus exposition show them."""

from __future__ import annotations

import logging
import random
import re
import time
from types import SimpleNamespace

import pytest
from runtime_components import PlanSplit, PlanWords, plan_wordcount

from topology_runtime import TopologyBuilder
from topology_runtime.api.config import resolve_config
from topology_runtime.api.status import LatencyHistogram, RunStatus
from topology_runtime.plan import build_plan
from topology_runtime.supervisor.stats import component_stats
from topology_runtime.worker.executor_base import TaskStats
from topology_runtime.worker.figures import Backpressure, CapacityMeter, stats_snapshot
from topology_runtime.worker.inspection import MAX_BUFFERED, Inspection


def _stateful_plan(workers: int = 2):
    return build_plan(plan_wordcount(), resolve_config({}), workers)


def _every_task(plan, **figures) -> dict:
    return {t: dict(figures) for tasks in plan.component_tasks.values() for t in tasks}


# --- system components apart ---------------------------------------------------------------------
def test_acker_and_checkpoint_spout_are_system_components_not_users():
    plan = _stateful_plan()
    assert {"$checkpointspout", "__acker"} <= set(plan.component_tasks)  # what the planner adds
    components, system = component_stats(plan, [_every_task(plan, emitted=5)], [])
    assert set(components) == {"words", "split", "count"}
    assert set(system) == {"$checkpointspout", "__acker"}
    assert system["$checkpointspout"].emitted == 5 * len(plan.component_tasks["$checkpointspout"])


def test_the_exposition_has_no_system_component(redis_url):
    from topology_runtime.control.control_plane import ControlPlane
    from topology_runtime.control.metrics import exposition

    plan = _stateful_plan()
    components, system = component_stats(plan, [_every_task(plan, emitted=5, executed=1)], [])
    control = ControlPlane(redis_url)
    token = control.register("stateful-metrics", "local", 2)
    control.finish("stateful-metrics", token, RunStatus("stateful-metrics", "completed", components=components,
                                                        system_components=system), {})
    text = exposition(control).decode()
    assert 'topology_component_emitted_total{component="count",topology="stateful-metrics"} 10.0' in text
    assert "checkpointspout" not in text and "__acker" not in text


# --- capacity and execute latency per interval ------------------------------------------------------
def _timed(stats: TaskStats, executes: int, timed_ms: list[float]) -> None:
    stats.executed += executes
    for ms in timed_ms:
        stats.execute.record(ms)


def test_capacity_meter_measures_each_interval_on_its_own():
    meter, stats = CapacityMeter(), TaskStats()
    _timed(stats, 1000, [100.0] * 4)  # a slow start: the run's mean stays high
    assert meter.interval(7, stats, 10.0) == {}  # the first snapshot has no interval
    _timed(stats, 100, [4.0, 6.0])  # 100 executes of 5 ms in 1 s: half of it spent executing
    assert meter.interval(7, stats, 11.0) == {"capacity": 0.5, "execute_interval": [2, 10.0]}
    _timed(stats, 10, [])  # none timed: the run's mean (110/6 ms) stands in
    got = meter.interval(7, stats, 12.0)
    assert got["execute_interval"] == [0, 0.0] and got["capacity"] == pytest.approx(10 * 410 / 6 / 1000, abs=0.001)
    _timed(stats, 10_000, [50.0])  # busier than the interval is long: capped at 1
    assert meter.interval(7, stats, 12.5)["capacity"] == 1.0
    assert meter.interval(7, stats, 12.5) == {}  # no time went by: no interval
    assert meter.interval(8, TaskStats(), 12.5) == {}  # tasks are measured apart


def test_execute_latency_is_the_mean_of_the_last_interval_not_of_the_run():
    """From a worker's stats snapshots (its CapacityMeter) through the supervisor's sum over the
    component's tasks: a bolt that was slow at first and is fast now shows now's latency."""
    plan = _stateful_plan(1)
    split = plan.component_tasks["split"]
    executors = {t: SimpleNamespace(stats=TaskStats(), instance=object(), task=t) for t in split}
    meter = CapacityMeter()
    for ex in executors.values():
        _timed(ex.stats, 1000, [200.0] * 10)  # 200 ms each at first
    stats_snapshot([executors], executors, [], {}, meter)
    _timed(executors[split[0]].stats, 64, [1.0, 3.0])
    _timed(executors[split[1]].stats, 32, [2.0])
    time.sleep(0.01)
    snapshot = stats_snapshot([executors], executors, [], {}, meter)["tasks"]
    assert snapshot[split[0]]["execute_interval"] == [2, 4.0] and "capacity" in snapshot[split[0]]
    components, _ = component_stats(plan, [], [snapshot])
    assert components["split"].execute_latency_ms == 2.0  # (1 + 3 + 2) / 3, the run's mean is ~154
    # A component none of whose executes was timed in the interval: the run's mean
    for t in split:
        snapshot[t]["execute_interval"] = [0, 0.0]
    components, _ = component_stats(plan, [], [snapshot])
    assert components["split"].execute_latency_ms == round((20 * 200.0 + 6.0) / 23, 3)
    # A finished run's record has no live figures: the run's mean too
    assert component_stats(plan, [snapshot], [])[0]["split"].execute_latency_ms == round((20 * 200 + 6) / 23, 3)


# --- backpressure -------------------------------------------------------------------------------------
def test_backpressure_sums_the_time_held_and_says_whether_it_is_now():
    bp = Backpressure()
    assert bp.figures(5.0) == {"backpressure": False, "backpressure_secs": 0.0}
    bp.held(True, 10.0)
    assert bp.figures(12.0) == {"backpressure": True, "backpressure_secs": 2.0}  # counting while on
    bp.held(True, 12.5)  # still on: the episode goes on from 10
    bp.held(False, 13.0)
    bp.held(False, 14.0)
    assert bp.figures(20.0) == {"backpressure": False, "backpressure_secs": 3.0}
    bp.held(True, 30.0)
    assert bp.figures(30.5) == {"backpressure": True, "backpressure_secs": 3.5}


def test_a_workers_backpressure_seconds_carry_over_its_restarts():
    from topology_runtime.supervisor.run_supervisor import RunSupervisor
    from topology_runtime.transport import messages as cm

    b = TopologyBuilder()
    b.set_spout("words", PlanWords(), 1)
    b.set_bolt("split", PlanSplit(), 1).shuffle_grouping("words")
    sup = RunSupervisor("held", build_plan(b.create_topology(), resolve_config({}), 1))
    try:
        def report(inc: int, on: bool, secs: float) -> None:
            with sup.lock:
                sup._on_message(b"w", cm.Stats(0, inc, {"tasks": {}, "backpressure": on, "backpressure_secs": secs},
                                               []))

        with sup.lock:
            sup._on_message(b"w", cm.Hello(0, 0, "tcp://127.0.0.1:1", 1, "python", "localhost"))
        report(0, True, 2.5)
        assert sup.workers_info()["0"]["backpressure_secs"] == 2.5
        assert sup.worker_exited(0, -9)  # SIGKILLed while held back: relaunched
        assert sup.workers_info()["0"]["backpressure"] is False  # a dead worker holds nothing back
        with sup.lock:
            sup._on_message(b"w", cm.Hello(0, 1, "tcp://127.0.0.1:2", 2, "python", "localhost"))
        assert sup.workers_info()["0"]["backpressure_secs"] == 2.5
        report(1, True, 0.75)  # the new incarnation counts from 0
        info = sup.workers_info()["0"]
        assert info["backpressure"] is True and info["backpressure_secs"] == 3.25
    finally:
        sup.close()


def test_topology_status_prints_each_workers_backpressure_seconds(redis_url, capsys):
    from topology_runtime.cli.main import main
    from topology_runtime.control.control_plane import ControlPlane

    control = ControlPlane(redis_url)
    token = control.register("held-back", "local", 3)  # live: its lease held
    workers = {str(i): {"pid": 100 + i, "incarnation": 0, "heartbeat_age_secs": 0.2, "queue": 0, "pending": 1,
                        "backpressure": on, "backpressure_secs": secs}
               for i, (on, secs) in enumerate([(True, 2.5), (False, 1.25), (False, 0.0)])}
    control.publish("held-back", token, RunStatus("held-back", "running", workers=3), workers)
    assert main(["status", "held-back", "--redis", redis_url]) == 0
    lines = {m.group(1): m.group(2) for m in re.finditer(r"worker (\d+): .*?, (backpressure .*)", capsys.readouterr().out)}
    assert lines == {"0": "backpressure on, 2.5s in all", "1": "backpressure off, 1.25s in all",
                     "2": "backpressure off, 0s in all"}
    control.finish("held-back", token, RunStatus("held-back", "killed", workers=3), workers)
    assert main(["status", "held-back", "--redis", redis_url]) == 0
    out = capsys.readouterr().out
    assert "heartbeat" not in out  # ended: the seconds held back stay, the workers' heartbeats do not
    assert "backpressure: worker 0 2.5s, worker 1 1.25s" in out


# --- the topology page's drawing ----------------------------------------------------------------------
def test_svg_graph_colours_bolts_by_capacity_and_labels_groupings():
    from topology_airflow.graph import UNMEASURED, capacity_colour, svg_graph

    graph = [{"id": "words", "spout": True, "parallelism": 2, "inputs": []},
             {"id": "split", "spout": False, "parallelism": 3,
              "inputs": [{"source": "words", "stream": "default", "grouping": "shuffle", "fields": []},
                         {"source": "$checkpointspout", "stream": "$checkpoint", "grouping": "all", "fields": []}]},
             {"id": "<count>", "spout": False, "parallelism": 4,
              "inputs": [{"source": "split", "stream": "default", "grouping": "fields", "fields": ["word"]}]},
             {"id": "idle", "spout": False, "parallelism": 1,
              "inputs": [{"source": "split", "stream": "other", "grouping": "global", "fields": []}]}]
    components = {"words": {"emitted": 12345}, "split": {"executed": 7, "capacity": 0.93},
                  "<count>": {"executed": 3, "capacity": 0.1}, "idle": {"executed": 0}}
    svg = svg_graph(graph, components, {"split": 2})

    def box(cid: str) -> str:
        return re.search(rf'<g data-component="{re.escape(cid)}".*?</g>', svg).group(0)
    assert 'fill="#fed7d7"' in box("split") and "capacity 0.93" in box("split")  # the bottleneck: red
    assert 'fill="#c6f6d5"' in box("&lt;count&gt;") and "capacity 0.10" in box("&lt;count&gt;")  # escaped, green
    assert f'fill="{UNMEASURED}"' in box("idle") and "· capacity" not in box("idle")  # not measured: grey
    assert f'fill="{UNMEASURED}"' in box("words") and "emitted 12,345" in box("words")  # spouts: no capacity
    assert "spout × 2" in box("words") and "bolt × 2" in box("split")  # the run's parallelism wins
    assert 'data-edge="split->&lt;count&gt;"' in svg and "fields(word)" in svg
    assert "other: global" in svg and "$checkpoint" not in svg  # system streams are not drawn
    assert [capacity_colour(c) for c in (None, 0.0, 0.49, 0.5, 0.79, 0.8, 1.0)] == [
        UNMEASURED, "#c6f6d5", "#c6f6d5", "#fefcbf", "#fefcbf", "#fed7d7", "#fed7d7"]
    assert 'data-testid="graph-none"' in svg_graph([], {}, {})


# --- inspection in a worker ----------------------------------------------------------------------------
class _Executor:
    def __init__(self, component: str, sent: list) -> None:
        self.component, self.task, self.sent = component, 3, sent

    def _send(self, route, values, targets, anchors) -> None:
        self.sent.append(values)


def test_sampling_records_the_share_asked_and_only_while_on():
    sent: list = []
    talk, sink = _Executor("talk", sent), _Executor("sink", sent)
    insp = Inspection([talk, sink])
    default = SimpleNamespace(info=SimpleNamespace(stream="default"))
    system = SimpleNamespace(info=SimpleNamespace(stream="$checkpoint"))
    random.seed(7)
    insp.apply({}, {"component": "talk", "percent": 50, "until": time.time() + 60})
    assert "_send" in vars(talk) and "_send" not in vars(sink)  # only the component asked is wrapped
    taken = []
    for n in range(4000):
        talk._send(default, [n], [1], None)
        if n % 100 == 99:  # as the stats reports take them, before the buffer's cap
            taken += insp.take_samples()
    for n in range(100):
        talk._send(system, [n], [1], None)
        sink._send(default, [n], [1], None)
    assert len(sent) == 4200  # every tuple still goes out
    assert 1800 <= len(taken) <= 2200 and insp.dropped == 0  # 50% of 4000
    assert {s["component"] for s in taken} == {"talk"} and {s["stream"] for s in taken} == {"default"}
    assert insp.take_samples() == []  # system streams and other components are not sampled
    insp.apply({}, {"component": "talk", "percent": 100, "until": time.time() + 60})
    for n in range(MAX_BUFFERED + 50):
        talk._send(default, [n], [1], None)
    assert len(insp.take_samples()) == MAX_BUFFERED and insp.dropped == 50  # bounded between two reports
    insp.tick(time.time() + 61)  # expired: the executor's own send again
    assert insp.sample == {} and "_send" not in vars(talk)


def test_sampling_gives_an_executor_back_the_send_it_set_itself():
    # An exactly-once bolt sends through its own instance-level send (spout roots, no edges):
    # after a sample it must get that one back, not the class's tracked send.
    sent: list = []
    own: list = []
    talk = _Executor("talk", sent)
    talk._send = lambda route, values, targets, anchors: own.append(values)
    mine = talk._send
    insp = Inspection([talk])
    insp.apply({}, {"component": "talk", "percent": 100, "until": time.time() + 60})
    assert talk._send is not mine
    talk._send(SimpleNamespace(info=SimpleNamespace(stream="default")), [1], [1], None)
    insp.tick(time.time() + 61)
    assert talk._send is mine and own == [[1]] and sent == []


def test_log_level_is_set_then_back_at_the_expiry():
    insp = Inspection([])
    until = time.time() + 60
    insp.apply({"logger": "metrics_unit", "level": "debug", "until": until}, {})
    assert logging.getLogger("metrics_unit").level == logging.DEBUG
    insp.tick(until - 1)
    assert logging.getLogger("metrics_unit").level == logging.DEBUG
    insp.tick(until + 1)
    assert logging.getLogger("metrics_unit").level == logging.NOTSET and insp.log_level == {}
    insp.apply({"logger": "metrics_unit", "level": "DEBUG", "until": time.time() - 1}, {})  # already expired
    assert logging.getLogger("metrics_unit").level == logging.NOTSET


def test_histogram_mean_is_over_what_was_recorded():
    h = LatencyHistogram()
    assert h.mean is None
    for ms in (1.0, 2.0, 3.0):
        h.record(ms)
    assert h.mean == 2.0 and h.count == 3
