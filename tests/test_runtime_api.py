"""The public API on real worker processes: groupings, emit results and checks, named streams,
ticks, context and user config, bounded runs and their stats, submit/status/kill/drain, errors at
submit and at start-up. Components report through a real Redis (topologies.py)."""

from __future__ import annotations

import collections
import re
import statistics

import pytest
import redis
from topologies import (
    BadEmitter,
    BasicDouble,
    BrokenOpen,
    DirectSender,
    FeedSpout,
    Forever,
    NumberSpout,
    Record,
    TaskRecorder,
    conf_for,
    contexts,
    feed,
    got,
    pids,
)

from topology_runtime import ConfigError, TopologyBuilder, TopologyFailed
from topology_runtime.testing import wait_for


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def component_tasks(r) -> dict[str, list[int]]:
    out: dict[str, set] = collections.defaultdict(set)
    for c in contexts(r):
        out[c["component"]].add(c["task"])
    return {k: sorted(v) for k, v in out.items()}


N = 300


@pytest.mark.spark_subset
def test_all_groupings_on_two_workers(redis_url, r, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(N, side=True), 2)
    b.set_bolt("shuffle", TaskRecorder(), 3).shuffle_grouping("nums")
    b.set_bolt("none", TaskRecorder(), 3).none_grouping("nums")
    b.set_bolt("fields", TaskRecorder(), 3).fields_grouping("nums", ["key"])
    b.set_bolt("global", TaskRecorder(), 3).global_grouping("nums")
    b.set_bolt("all", TaskRecorder(), 3).all_grouping("nums", stream="side")
    b.set_bolt("local", TaskRecorder(), 3).local_or_shuffle_grouping("nums")
    b.set_bolt("sender", DirectSender(), 2).shuffle_grouping("nums")
    b.set_bolt("direct", TaskRecorder(), 3).direct_grouping("sender", stream="targeted")
    with cluster_factory(2) as cluster:
        status = cluster.run("groupings", b.create_topology(), conf_for(redis_url), timeout=60)
    assert status.state == "completed"
    tasks, pid = component_tasks(r), pids(r)
    assert len(set(pid.values())) == 2  # two worker processes
    assert len({pid[t] for t in tasks["nums"]}) == 2  # one spout task on each worker
    for comp in ("shuffle", "none", "fields", "global", "local", "sender", "direct"):
        rows = got(r, comp)
        assert sorted(v for v, *_ in rows) == list(range(N)), comp  # each tuple exactly once
        assert {s for *_, s in rows} == {"targeted" if comp == "direct" else "default"}, comp

    # shuffle / none: spread over every task.
    for comp in ("shuffle", "none"):
        per_task = collections.Counter(t for _, t, *_ in got(r, comp))
        assert set(per_task) == set(tasks[comp]) and min(per_task.values()) >= N // 5, (comp, per_task)
    # fields: a key always reaches the same task, from both spout tasks (on both workers).
    key_tasks, key_sources = collections.defaultdict(set), collections.defaultdict(set)
    for v, t, _src, src_task, _ in got(r, "fields"):
        key_tasks[v % 7].add(t)
        key_sources[v % 7].add(src_task)
    assert all(len(ts) == 1 for ts in key_tasks.values()), key_tasks
    assert all(s == set(tasks["nums"]) for s in key_sources.values())
    assert len(set().union(*key_tasks.values())) >= 2  # and the keys do spread
    # global: the lowest task id only.
    assert {t for _, t, *_ in got(r, "global")} == {min(tasks["global"])}
    # all (on the named stream "side"): every tuple to every task.
    by_value = collections.defaultdict(list)
    for v, t, *_ in got(r, "all"):
        by_value[v].append(t)
    assert sorted(by_value) == list(range(N)) and all(sorted(ts) == tasks["all"] for ts in by_value.values())
    # direct: exactly the task the sender chose, which emit_direct returned.
    chosen = {}
    for row in r.lrange("t:direct", 0, -1):
        v, target, returned = row.split(":")
        assert returned == target
        chosen[int(v)] = int(target)
    assert chosen == {v: tasks["direct"][v % 3] for v in range(N)}
    assert {(v, t) for v, t, *_ in got(r, "direct")} == set(chosen.items())
    # local_or_shuffle: a tuple stays in its spout task's worker (there is a local task on each).
    for v, t, _src, src_task, _ in got(r, "local"):
        assert pid[t] == pid[src_task], (v, t, src_task)
    # emit returns the target task ids: per value, exactly the tasks that received it on "default".
    received = collections.defaultdict(list)
    for comp in ("shuffle", "none", "fields", "global", "local", "sender"):
        for v, t, *_ in got(r, comp):
            received[v].append(t)
    returned = {}
    for row in r.lrange("t:targets", 0, -1):
        v, ts = row.split(":")
        returned[int(v)] = sorted(map(int, ts.split(",")))
    assert sorted(returned) == list(range(N))
    assert all(returned[v] == sorted(received[v]) for v in range(N))


def test_bad_emits_raise_in_the_caller_naming_component_stream_field(redis_url, r, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("bad", BadEmitter()).shuffle_grouping("s")
    b.set_bolt("sink", Record()).direct_grouping("bad", stream="targeted")
    feed(r, "s", 1, -1)
    with cluster_factory(2) as cluster:
        status = cluster.run("bad", b.create_topology(), conf_for(redis_url), timeout=60)
    assert status.state == "completed"
    bad_task = component_tasks(r)["bad"][0]
    errs = r.lrange("t:errors", 0, -1)
    assert len(errs) == 17 and "NO ERROR" not in errs, errs
    for i, e in enumerate(errs):
        assert "'bad'" in e, (i, e)  # every message names the component
    # wrong number of values: the stream and its declared fields
    assert "'default'" in errs[0] and "'a'" in errs[0] and "'b'" in errs[0]
    # values the wire cannot carry: the stream and the field
    assert "'default'" in errs[1] and "'b'" in errs[1] and "object" in errs[1]
    assert "'default'" in errs[2] and "'b'" in errs[2]
    assert "'nope'" in errs[3]
    assert "'targeted'" in errs[4] and "emit_direct" in errs[4]  # emit on a direct stream
    assert "'targeted'" in errs[5] and "99999" in errs[5]  # emit_direct to a task not subscribed
    assert "'default'" in errs[6] and "direct" in errs[6]  # emit_direct on a non-direct stream
    assert "'targeted'" in errs[7] and str(bad_task) in errs[7]
    # emitter(stream): the same checks as emit, the stream's errors when it is asked for
    assert "'default'" in errs[8] and "'a'" in errs[8] and "'b'" in errs[8]
    assert "'default'" in errs[9] and "'b'" in errs[9] and "object" in errs[9]
    assert "'nope'" in errs[10]
    assert "'targeted'" in errs[11] and "emit_direct" in errs[11]
    # router(stream) and chunk_emitter(stream): the checks of emit and emit_direct, and a chunk
    # stream's shape
    assert "'default'" in errs[12] and "'a'" in errs[12] and "'b'" in errs[12]
    assert "'targeted'" in errs[13] and "emit_direct" in errs[13]
    assert "'default'" in errs[14] and "direct" in errs[14]
    assert "'targeted'" in errs[15] and "not a chunk stream" in errs[15] and "['a']" in errs[15]
    assert "'chunks'" in errs[16] and "99999" in errs[16]
    # Nothing went out, nothing was reported as a task error, the spout tuple was acked.
    assert r.llen("t:seen:sink") == 0
    assert status.errors == []
    assert status.components["s"].acked == 1 and status.components["bad"].emitted == 0


@pytest.mark.slow
def test_tick_tuples_topology_wide_and_per_component(redis_url, r, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("plain", TaskRecorder(), 2).shuffle_grouping("s")
    b.set_bolt("fast", TaskRecorder()).shuffle_grouping("s") \
        .add_configuration("topology.tick.tuple.freq.secs", 0.25)
    with cluster_factory(2) as cluster:
        run = cluster.submit("ticks", b.create_topology(),
                             conf_for(redis_url, **{"topology.tick.tuple.freq.secs": 0.5}))
        assert wait_for(lambda: run.status().state == "running", 60)
        # Wait for enough ticks rather than a fixed time: a worker may start its tasks a second
        # after the run shows running on a loaded machine. The rates are checked below.
        def enough() -> bool:
            tasks = component_tasks(r)
            lens = {c: [r.llen(f"t:ticks:{c}:{t}") for t in tasks.get(c, [])] for c in ("plain", "fast")}
            return len(lens["plain"]) == 2 and min(lens["plain"]) >= 5 and lens["fast"] and lens["fast"][0] >= 10
        assert wait_for(enough, 30), component_tasks(r)
        assert run.kill().state == "killed"
    tasks = component_tasks(r)

    def intervals(comp, task):
        ts = [float(x) for x in r.lrange(f"t:ticks:{comp}:{task}", 0, -1)]
        return [b - a for a, b in zip(ts, ts[1:])]

    for task in tasks["plain"]:  # topology-wide 0.5 s: about twice a second, on every task
        iv = intervals("plain", task)
        assert len(iv) >= 4 and 0.4 <= statistics.median(iv) <= 0.65, (task, iv)
    iv = intervals("fast", tasks["fast"][0])  # the component's own setting wins
    assert len(iv) >= 9 and 0.2 <= statistics.median(iv) <= 0.33, iv
    assert got(r, "plain") == [] and got(r, "fast") == []  # ticks are told apart by is_tick()


USER_CONF = {"my.setting": {"a": [1, 2], "b": {"c": None}}, "my.string": "x y", "my.number": 2.5,
             "my.flag": False, "my.none": None}


def test_context_and_user_config_reach_open_and_prepare(redis_url, r, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(10), 3).add_configuration("my.component.only", "spout")
    b.set_bolt("sink", TaskRecorder(), 2).shuffle_grouping("nums") \
        .add_configuration("my.component.only", "bolt")
    with cluster_factory(2) as cluster:
        status = cluster.run("ctx", b.create_topology(), conf_for(redis_url, **USER_CONF), timeout=60)
    assert status.state == "completed"
    ctxs = contexts(r)
    assert len(ctxs) == 5  # one open/prepare per task
    tasks = component_tasks(r)
    assert len(tasks["nums"]) == 3 and len(tasks["sink"]) == 2
    assert not set(tasks["nums"]) & set(tasks["sink"])
    for c in ctxs:
        assert c["tasks"] == tasks[c["component"]]  # component_tasks: sorted task ids
        assert c["tasks"][c["index"]] == c["task"]  # task_index: position among them
        expected = {"test.key": "t", **USER_CONF, "my.component.only": "bolt" if c["component"] == "sink" else "spout"}
        assert c["conf"] == expected, c  # user keys unchanged; per-component keys to that component
    assert sorted(c["index"] for c in ctxs if c["component"] == "nums") == [0, 1, 2]


def test_bounded_run_completes_with_per_component_stats(redis_url, r, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(10))
    b.set_bolt("double", BasicDouble(), 2).shuffle_grouping("nums")
    b.set_bolt("sink", TaskRecorder(), 2).shuffle_grouping("double")
    with cluster_factory(2) as cluster:
        status = cluster.run("stats", b.create_topology(), conf_for(redis_url), timeout=60)
    assert status.state == "completed" and status.error is None
    assert sorted(v for v, *_ in got(r, "sink")) == sorted(list(range(10)) + list(range(1000, 1010)))
    nums, double, sink = status.components["nums"], status.components["double"], status.components["sink"]
    assert (nums.emitted, nums.acked, nums.failed, nums.replayed) == (10, 10, 0, 0)
    assert nums.complete_latency_ms is not None
    assert (double.executed, double.emitted, double.acked, double.failed) == (10, 20, 10, 0)
    assert (sink.executed, sink.emitted, sink.acked, sink.failed) == (20, 0, 20, 0)
    assert "__acker" in status.system_components and "__acker" not in status.components
    assert set(status.components) == {"nums", "double", "sink"}


def test_submit_status_wait_and_kill(redis_url, r, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("src", Forever())
    b.set_bolt("sink", TaskRecorder(), 2).shuffle_grouping("src")
    topology = b.create_topology()
    with cluster_factory(2) as cluster:
        run = cluster.submit("forever", topology, conf_for(redis_url))
        assert wait_for(lambda: run.status().state == "running", 60), run.status()
        with pytest.raises(TimeoutError):
            run.wait(0.5)  # unbounded: does not end by itself
        assert run.status().state == "running"
        with pytest.raises(Exception, match="forever"):  # same name while live
            cluster.submit("forever", topology, conf_for(redis_url))
        assert run.status().state == "running"  # the refused submit did not disturb it
        killed = run.kill()
        assert killed.state == "killed" and run.status().state == "killed"
        assert run.wait(5).state == "killed"
        run2 = cluster.submit("forever", topology, conf_for(redis_url, key="t2"))  # name free again
        assert wait_for(lambda: run2.status().state == "running", 60)
        assert run2.kill().state == "killed"


def test_kill_with_drain_completes_without_losing_pending_tuples(redis_url, r, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("src", Forever())
    b.set_bolt("slow", Record(delay=0.002), 2).shuffle_grouping("src")  # keeps trees pending
    with cluster_factory(2) as cluster:
        run = cluster.submit("drain", b.create_topology(),
                             conf_for(redis_url, **{"topology.max.spout.pending": 100}))
        assert wait_for(lambda: r.scard("t:acked") > 100, 60)
        status = run.kill(drain=True, timeout=60)
    assert status.state == "completed"
    emitted = int(r.get("t:emitted"))
    assert emitted > 100
    assert {int(x) for x in r.smembers("t:acked")} == set(range(1, emitted + 1))  # every msg id acked
    assert r.scard("t:failed") == 0
    src = status.components["src"]
    assert src.emitted == src.acked == emitted and src.failed == 0


def test_unknown_topology_key_is_rejected_at_submit(redis_url, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("src", Forever())
    b.set_bolt("sink", TaskRecorder()).shuffle_grouping("src")
    with cluster_factory(1) as cluster, pytest.raises(ConfigError, match=r"topology\.foo"):
        cluster.submit("x", b.create_topology(), conf_for(redis_url, **{"topology.foo": 5}))


def test_failing_open_fails_the_run_naming_component_and_task(redis_url, r, cluster_factory):
    b = TopologyBuilder()
    b.set_spout("source", BrokenOpen())
    b.set_bolt("sink", TaskRecorder()).shuffle_grouping("source")
    with cluster_factory(2) as cluster, pytest.raises(TopologyFailed) as e:
        cluster.run("broken", b.create_topology(), conf_for(redis_url), timeout=60)
    status = e.value.status
    assert status.state == "failed"
    task = component_tasks(r)["source"][0]
    assert "planted open failure" in status.error
    assert re.search(rf"source\W*(task\W*)?{task}\b", status.error), status.error
