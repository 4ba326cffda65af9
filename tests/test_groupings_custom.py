"""Custom and partial key groupings, and what TopologyContext says about the wiring (Storm's
getThisSources / getThisTargets / getComponentOutputFields): pure routing units, builder
errors, and one real run on two workers with acking."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from topologies import NumberSpout, TaskRecorder, conf_for, contexts, got

from topology_runtime import (
    BasicBolt,
    Bolt,
    CustomStreamGrouping,
    Spout,
    Stream,
    TopologyBuilder,
    TopologyContext,
    TopologyError,
)
from topology_runtime.api.builder import CUSTOM, DIRECT, FIELDS, PARTIAL_KEY, SHUFFLE, Grouping
from topology_runtime.plan.planner import build_plan
from topology_runtime.worker import routing
from topology_runtime.worker.bolt_executor import BoltExecutor
from topology_runtime.worker.port import WorkerPort

ROOT = Path(__file__).resolve().parent.parent
PREPARED: list[tuple[int, int, tuple[str, str], list[int]]] = []  # (id(copy), task, stream, targets)


class ByNumber(CustomStreamGrouping):
    """targets[len(word) % len(targets)]; records every prepare (in this process)."""

    def __init__(self) -> None:
        self.targets: list[int] = []

    def prepare(self, context, stream, targets):
        PREPARED.append((id(self), context.task_id, stream, targets))
        self.targets = targets

    def choose_tasks(self, task, values):
        return [self.targets[len(values[0]) % len(self.targets)]]


class Rogue(CustomStreamGrouping):
    def choose_tasks(self, task, values):
        return (999,)


class Src(Spout):
    outputs = {"default": ["word", "n"], "side": ["x"], "targeted": Stream(["word"], direct=True)}


class Pass(BasicBolt):
    outputs = ["word"]


class Sink(Bolt):
    outputs = {}


def _topology():
    b = TopologyBuilder()
    b.set_spout("src", Src(), 2)
    (b.set_bolt("a", Pass(), 3).partial_key_grouping("src", ["word"])
        .shuffle_grouping("src", stream="side"))
    b.set_bolt("d", Sink()).direct_grouping("src", "targeted")
    b.set_bolt("c", Sink(), 2).custom_grouping("a", ByNumber()).fields_grouping("src", ["n"])
    return b.create_topology()


def _context(plan, task: int) -> TopologyContext:
    return TopologyContext(task, plan.task_component[task], plan.task_index(task), plan.component_tasks,
                           topology=plan.topology)


# --- partial key grouping: pure routing ----------------------------------------------------------------
def _skewed(n: int) -> list[str]:
    # Zipf-like: "k0" is about a third of the stream, then a long tail.
    rng = random.Random(7)
    return rng.choices([f"k{i}" for i in range(500)], weights=[1 / (i + 1) ** 1.2 for i in range(500)], k=n)


def test_partial_key_spreads_a_skewed_stream_far_better_than_fields():
    tasks = list(range(10, 18))
    keys = _skewed(20_000)
    pk, fields = routing.make_picker(PARTIAL_KEY, tasks, (0,), set(), 0), routing.make_picker(FIELDS, tasks, (0,), set(), 0)
    pk_load, fields_load = collections.Counter(), collections.Counter()
    key_tasks = collections.defaultdict(set)
    for k in keys:
        (t,) = pk([k, 1])
        pk_load[t] += 1
        key_tasks[k].add(t)
        fields_load[fields([k, 1])[0]] += 1
    assert max(fields_load.values()) > len(keys) / 4  # the hot key pins one task
    assert max(pk_load.values()) < 0.6 * max(fields_load.values()), (pk_load, fields_load)
    for k, ts in key_tasks.items():  # a key only ever reaches its two candidates
        a, b = routing.partial_key_candidates([k], (0,), len(tasks))
        assert a != b and ts <= {tasks[a], tasks[b]}, k
    assert key_tasks["k0"] == {tasks[i] for i in routing.partial_key_candidates(["k0"], (0,), len(tasks))}
    # the first candidate is fields grouping's task; non-str and multi-field keys work too
    assert all(tasks[routing.partial_key_candidates([k], (0,), 8)[0]] == fields([k])[0] for k in set(keys))
    pk2 = routing.make_picker(PARTIAL_KEY, tasks, (0, 1), set(), 0)
    assert {pk2([i % 5, "x"])[0] for i in range(100)} <= set(tasks)
    assert routing.make_picker(PARTIAL_KEY, [4], (0,), set(), 0)([3.5]) == [4]


_CHOICES = """
import json, sys
from topology_runtime.api.builder import PARTIAL_KEY
from topology_runtime.worker import routing
keys = json.loads(sys.argv[1])
pick = routing.make_picker(PARTIAL_KEY, [3, 4, 5, 6, 7], (0,), set(), 0)
print(json.dumps([[routing.partial_key_candidates([k], (0,), 5) for k in keys], [pick([k])[0] for k in keys]]))
"""


def test_partial_key_choices_are_the_same_in_another_process():
    keys = [f"user-{i}" for i in range(50)] + list(range(30)) + [[1, "a"], None, 2.5]
    pick = routing.make_picker(PARTIAL_KEY, [3, 4, 5, 6, 7], (0,), set(), 0)
    here = [[list(routing.partial_key_candidates([k], (0,), 5)) for k in keys], [pick([k])[0] for k in keys]]
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _CHOICES, json.dumps(keys)], capture_output=True, text=True,
                         check=True, env=env, cwd=ROOT)
    assert json.loads(out.stdout) == here


# --- custom grouping: pure routing ---------------------------------------------------------------------
def test_custom_grouping_is_copied_and_prepared_once_per_emitting_task():
    plan = build_plan(_topology(), {"topology.acker.executors": 1}, workers=1)
    a_tasks, c_tasks = plan.component_tasks["a"], plan.component_tasks["c"]
    template = plan.spec("c").inputs[0].custom
    PREPARED.clear()
    routes = {t: routing.build_routes(plan, "a", t, set(plan.task_component), _context(plan, t)) for t in a_tasks}
    assert sorted(task for _, task, *_ in PREPARED) == a_tasks  # once per emitting task
    assert len({copy_id for copy_id, *_ in PREPARED}) == len(a_tasks) and id(template) not in {p[0] for p in PREPARED}
    assert {(s, tuple(ts)) for _, _, s, ts in PREPARED} == {(("a", "default"), tuple(c_tasks))}
    assert template.targets == []  # the template itself is never prepared
    for t in a_tasks:
        assert [routes[t]["default"].targets(["w" * n]) for n in range(4)] == [[c_tasks[n % 2]] for n in range(4)]
    # the context given to prepare is the emitting task's, with the wiring in it
    ctx = _context(plan, a_tasks[0])
    assert ctx.get_this_targets()["default"]["c"].kind == CUSTOM


def test_custom_grouping_choosing_a_task_that_is_not_a_target_fails_the_emit():
    b = TopologyBuilder()
    b.set_spout("src", Src())
    b.set_bolt("a", Pass()).shuffle_grouping("src")
    b.set_bolt("c", Sink(), 2).custom_grouping("a", Rogue())
    plan = build_plan(b.create_topology(), {"topology.acker.executors": 0}, workers=1)
    (a,) = plan.component_tasks["a"]
    routes = routing.build_routes(plan, "a", a, set(plan.task_component), _context(plan, a))
    delivered = []
    port = WorkerPort(deliver=lambda *m: delivered.append(m), enqueue=None, record_error=None, run_off_loop=None,
                      barrier_done=None, exactly_once_failure=None, preferred_acker_slot=lambda: 0, n_ackers=0,
                      streams=plan.streams, exactly_once=False)
    bolt = Pass()
    BoltExecutor(port, a, "a", bolt, routes, basic=True)
    with pytest.raises(routing.GroupingError) as e:
        bolt.emit(["w"])  # raises in the emitting component's own call
    msg = str(e.value)
    assert "custom grouping Rogue" in msg and "component 'a'" in msg and f"(task {a})" in msg
    assert "chose task 999" in msg and str(plan.component_tasks["c"]) in msg and "bolt 'c'" in msg
    assert delivered == []


# --- TopologyContext: the wiring ------------------------------------------------------------------------
def test_context_answers_sources_targets_streams_and_fields():
    plan = build_plan(_topology(), {"topology.acker.executors": 1}, workers=2)
    src = _context(plan, plan.component_tasks["src"][1])
    a = _context(plan, plan.component_tasks["a"][0])
    pk = Grouping("src", "default", PARTIAL_KEY, ("word",))
    side = Grouping("src", "side", SHUFFLE)
    direct = Grouping("src", "targeted", DIRECT)
    assert src.get_this_sources() == {}
    assert src.get_this_targets() == {"default": {"a": pk, "c": Grouping("src", "default", FIELDS, ("n",))},
                                      "side": {"a": side}, "targeted": {"d": direct}}
    assert a.get_this_sources() == {("src", "default"): pk, ("src", "side"): side}
    assert a.get_this_targets() == {"default": {"c": Grouping("a", "default", CUSTOM)}}
    assert isinstance(a.get_this_targets()["default"]["c"].custom, ByNumber)
    assert a.get_sources("d") == {("src", "targeted"): direct} and a.get_targets("d") == {}
    assert a.get_targets("c") == {}  # declares no streams
    assert src.get_this_streams() == {"default", "side", "targeted"} and a.get_component_streams("c") == set()
    assert src.get_this_output_fields() == ["word", "n"] and src.get_component_output_fields("src", "targeted") == ["word"]
    assert a.get_this_output_fields("default") == ["word"] == a.get_component_output_fields("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        pk.kind = "x"
    with pytest.raises(KeyError, match="no component 'ghost'"):
        a.get_sources("ghost")
    with pytest.raises(KeyError, match="'src' declares no stream 'nope'"):
        a.get_component_output_fields("src", "nope")
    with pytest.raises(RuntimeError, match="without the topology"):
        TopologyContext(1, "src", 0, {"src": [1]}).get_this_targets()


# --- create_topology ------------------------------------------------------------------------------------
def _rejected(b: TopologyBuilder) -> str:
    with pytest.raises(TopologyError) as e:
        b.create_topology()
    return str(e.value)


def test_create_topology_rejects_bad_partial_key_and_custom_groupings():
    b = TopologyBuilder()
    b.set_spout("src", Src())
    b.set_bolt("p1", Pass()).partial_key_grouping("src", ["wrod"])
    b.set_bolt("p2", Pass()).partial_key_grouping("src", [], stream="side")
    b.set_bolt("p3", Pass()).partial_key_grouping("src", ["word"], stream="targeted")
    b.set_bolt("c1", Pass()).custom_grouping("src", object(), stream="side")
    b.set_bolt("c2", Pass()).custom_grouping("src", ByNumber)
    b.set_bolt("c3", Pass()).custom_grouping("src", ByNumber(), stream="targeted")
    msg = _rejected(b)
    assert "bolt 'p1': partial_key grouping on 'src' stream 'default': field 'wrod' is not declared" in msg
    assert "bolt 'p2': partial_key grouping on 'src' stream 'side': partial_key grouping needs at least one field" in msg
    assert "bolt 'p3': partial_key grouping on 'src' stream 'targeted': stream 'targeted' is direct" in msg
    assert "bolt 'c1': custom grouping on 'src' stream 'side': object is not a CustomStreamGrouping" in msg
    assert "bolt 'c2': custom grouping on 'src' stream 'default': ByNumber is not a CustomStreamGrouping " \
           "(pass an instance, not the class)" in msg
    assert "bolt 'c3': custom grouping on 'src' stream 'targeted': stream 'targeted' is direct" in msg
    # and the valid forms chain like every grouping
    b = TopologyBuilder()
    b.set_spout("src", Src())
    b.set_bolt("ok", Pass()).partial_key_grouping("src", ["word"]).custom_grouping("src", ByNumber(), "side")
    assert [(g.kind, g.stream, g.fields) for g in b.create_topology().components["ok"].inputs] == \
        [(PARTIAL_KEY, "default", ("word",)), (CUSTOM, "side", ())]


# --- one real run ---------------------------------------------------------------------------------------
class ModGrouping(CustomStreamGrouping):
    """Sends n to targets[n % len]; prepare fails the run unless it got what the contract says."""

    def prepare(self, context, stream, targets):
        ok = (stream == ("nums", "default") and targets == context.component_tasks("custom")
              and context.component_id == "nums" and context.get_this_targets()["default"]["custom"].kind == CUSTOM)
        if not ok:
            raise AssertionError(f"prepare got {stream}, {targets} in {context.component_id}")
        self.targets = targets

    def choose_tasks(self, task, values):
        return [self.targets[values[0] % len(self.targets)]]


N = 300


def test_partial_key_and_custom_groupings_on_two_workers(redis_url, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(N), 2)  # [n, "k<n % 7>"], acked
    b.set_bolt("pk", TaskRecorder(), 3).partial_key_grouping("nums", ["key"])
    b.set_bolt("custom", TaskRecorder(), 2).custom_grouping("nums", ModGrouping())
    with cluster_factory(2) as cluster:
        status = cluster.run("groupings-custom", b.create_topology(), conf_for(redis_url), timeout=60)
    assert status.state == "completed"
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    tasks: dict[str, set] = collections.defaultdict(set)
    for c in contexts(r):
        tasks[c["component"]].add(c["task"])
    pk_tasks, custom_tasks = sorted(tasks["pk"]), sorted(tasks["custom"])
    returned = {int(v): set(map(int, ts.split(","))) for v, ts in (x.split(":") for x in r.lrange("t:targets", 0, -1))}
    assert sorted(returned) == list(range(N))
    pk_rows, custom_rows = got(r, "pk"), got(r, "custom")
    assert sorted(v for v, *_ in pk_rows) == list(range(N)) == sorted(v for v, *_ in custom_rows)  # each once
    for v, t, *_ in pk_rows:  # where emit said, and one of the key's two candidates
        a, c = routing.partial_key_candidates([f"k{v % 7}"], (0,), 3)
        assert returned[v] & set(pk_tasks) == {t} and t in {pk_tasks[a], pk_tasks[c]}, v
    for v, t, *_ in custom_rows:
        assert returned[v] & set(custom_tasks) == {t} == {custom_tasks[v % 2]}, v
    assert len({t for _, t, *_ in pk_rows}) == 3  # 7 keys over 3 tasks, two candidates each
    r.close()
