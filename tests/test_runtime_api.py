"""The public API on real worker processes: groupings, emit checks, ticks, context, config,
bounded runs, status, kill/drain, start-up failures."""

from __future__ import annotations

import collections
import time

import pytest
import redis
from runtime_components import (
    BadEmitter,
    BrokenOpen,
    DirectSender,
    FeedSpout,
    Forever,
    NumberSpout,
    Record,
    TaskRecorder,
)

from topology_runtime import ConfigError, LocalCluster, TopologyBuilder, TopologyFailed
from topology_runtime.local_cluster import wait_for


@pytest.fixture
def r(redis_url):
    return redis.Redis.from_url(redis_url, decode_responses=True)


def _got(r, component):
    rows = [x.split("|") for x in r.lrange(f"t:got:{component}", 0, -1)]
    return [(int(v), int(task), src, stream) for v, task, src, stream in rows]


@pytest.mark.spark_subset
def test_all_groupings_on_two_workers(redis_url, r, make_cluster):
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(300, side=True), 2)
    b.set_bolt("shuffle", TaskRecorder(), 3).shuffle_grouping("nums")
    b.set_bolt("none", TaskRecorder(), 3).none_grouping("nums")
    b.set_bolt("fields", TaskRecorder(), 3).fields_grouping("nums", ["key"])
    b.set_bolt("global", TaskRecorder(), 3).global_grouping("nums")
    b.set_bolt("all", TaskRecorder(), 3).all_grouping("nums", stream="side")
    b.set_bolt("local", TaskRecorder(), 3).local_or_shuffle_grouping("nums")
    b.set_bolt("sender", DirectSender(), 2).shuffle_grouping("nums")
    b.set_bolt("direct", TaskRecorder(), 3).direct_grouping("sender", stream="targeted")
    with make_cluster(2) as cluster:
        run = cluster.submit("groupings", b.create_topology(), {"test.redis.url": redis_url})
        status = run.wait(60)
        plan = run.plan
    assert status.state == "completed"
    tasks = plan.component_tasks
    for comp in ("shuffle", "none", "local", "fields", "global"):
        assert sorted(v for v, *_ in _got(r, comp)) == list(range(300)), comp
    assert len(collections.Counter(t for _, t, *_ in _got(r, "shuffle"))) == 3  # spread over all tasks
    # Fields: each key always reaches one task.
    key_tasks = collections.defaultdict(set)
    for v, t, *_ in _got(r, "fields"):
        key_tasks[v % 7].add(t)
    assert all(len(ts) == 1 for ts in key_tasks.values())
    assert {t for _, t, *_ in _got(r, "global")} == {min(tasks["global"])}
    all_rows = _got(r, "all")
    assert len(all_rows) == 900 and {t for _, t, *_ in all_rows} == set(tasks["all"])
    assert {s for *_, s in all_rows} == {"side"}
    assert {t for _, t, *_ in _got(r, "direct")} == {min(tasks["direct"])}
    # local_or_shuffle: a spout task's tuples stay on its own worker.
    spout_worker = {t: plan.task_worker[t] for t in tasks["nums"]}
    for v, t, _src, _ in _got(r, "local"):
        assert plan.task_worker[t] == spout_worker[tasks["nums"][v % 2]]
    # emit returns the target task ids: one per grouping with one target, plus the all-grouping's 3
    # are on "side", so the default stream's targets are 6 per tuple.
    targets = [x.split(":")[1].split(",") for x in r.lrange("t:targets", 0, -1)]
    assert all(len(t) == 6 for t in targets)
    # Fields grouping hashes agree across processes with an independent computation.
    from topology_runtime.wire import field_hash
    fields_tasks = sorted(tasks["fields"])
    for v, t, *_ in _got(r, "fields"):
        assert fields_tasks[field_hash([v, f"k{v % 7}"], (1,)) % 3] == t


def test_bad_emits_raise_in_the_caller_naming_component_stream_field(redis_url, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("bad", BadEmitter()).shuffle_grouping("s")
    b.set_bolt("sink", Record()).direct_grouping("bad", stream="targeted")
    r.rpush("t:feed", 1, -1)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("bad", b.create_topology(), {"test.redis.url": redis_url}, timeout=60)
    assert status.state == "completed"
    errs = r.lrange("t:errors", 0, -1)
    assert len(errs) == 7 and "NO ERROR" not in errs
    assert "'bad'" in errs[0] and "'default'" in errs[0] and "1 value(s)" in errs[0]
    assert "field 'b'" in errs[1] and "object" in errs[1] and "'bad'" in errs[1]
    assert "field 'b'" in errs[2]
    assert "undeclared stream 'nope'" in errs[3]
    assert "declared direct; use emit_direct" in errs[4]
    assert "task 99999" in errs[5] and "'targeted'" in errs[5]
    assert "not declared direct" in errs[6]


def test_tick_tuples_global_and_per_component(redis_url, r):
    b = TopologyBuilder()
    b.set_spout("s", FeedSpout())
    b.set_bolt("fast", TaskRecorder()).shuffle_grouping("s").add_configuration("topology.tick.tuple.freq.secs", 0.2)
    b.set_bolt("slow", TaskRecorder()).shuffle_grouping("s")
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("ticks", b.create_topology(),
                             {"test.redis.url": redis_url, "topology.tick.tuple.freq.secs": 1})
        assert wait_for(lambda: r.llen("t:ticks:slow") >= 1, 20)
        fast0, slow0 = r.llen("t:ticks:fast"), r.llen("t:ticks:slow")
        time.sleep(3.0)
        fast, slow = r.llen("t:ticks:fast") - fast0, r.llen("t:ticks:slow") - slow0
        run.kill()
    assert 12 <= fast <= 17, fast  # every 0.2 s (per-component setting)
    assert 2 <= slow <= 4, slow  # every 1 s (topology setting)


def test_context_and_user_config_reach_open(redis_url, r):
    b = TopologyBuilder()
    b.set_spout("nums", NumberSpout(10), 3)
    b.set_bolt("sink", TaskRecorder()).shuffle_grouping("nums")
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("ctx", b.create_topology(),
                             {"test.redis.url": redis_url, "my.setting": {"a": [1, 2]}}, timeout=60)
    rows = sorted(x.split("|") for x in r.lrange("t:ctx", 0, -1))
    assert [(c, int(i)) for c, _, i, _, _ in rows] == [("nums", 0), ("nums", 1), ("nums", 2)]
    assert {tasks for *_, tasks, _ in rows} == {"[1, 2, 3]"}
    assert {s for *_, s in rows} == {"{'a': [1, 2]}"}
    assert sorted(int(t) for _, t, *_ in rows) == [1, 2, 3]
    assert status.components["nums"].emitted == 10 and status.components["sink"].executed == 10
    assert status.components["nums"].acked == 10
    assert "__acker" in status.system_components and "__acker" not in status.components


def test_submit_status_kill_and_drain(redis_url, r):
    b = TopologyBuilder()
    b.set_spout("src", Forever())
    b.set_bolt("sink", TaskRecorder(), 2).shuffle_grouping("src")
    conf = {"test.redis.url": redis_url}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("forever", b.create_topology(), conf)
        assert wait_for(lambda: run.status().state == "running", 20)
        with pytest.raises(TimeoutError):
            run.wait(0.5)
        with pytest.raises(RuntimeError, match="already live"):
            cluster.submit("forever", b.create_topology(), conf)
        assert run.kill().state == "killed"
        run2 = cluster.submit("forever", b.create_topology(), conf)
        assert wait_for(lambda: run2.status().components["src"].acked > 100, 20)
        r.delete("t:acked", "t:failed", "t:emitted")
        status = run2.kill(drain=True)
    assert status.state == "completed"
    # Drained: every tuple the spout emitted was acked, none failed or left pending.
    assert status.components["src"].acked == status.components["src"].emitted
    assert status.components["src"].failed == 0


def test_invalid_config_key_is_rejected_at_submit():
    b = TopologyBuilder()
    b.set_spout("src", Forever())
    b.set_bolt("sink", TaskRecorder()).shuffle_grouping("src")
    with LocalCluster(workers=1) as cluster, pytest.raises(ConfigError, match="topology.max.spout.pendng"):
        cluster.submit("x", b.create_topology(), {"topology.max.spout.pendng": 5})


def test_failing_open_fails_the_run_with_component_and_task(redis_url):
    b = TopologyBuilder()
    b.set_spout("source", BrokenOpen())
    b.set_bolt("sink", TaskRecorder()).shuffle_grouping("source")
    with LocalCluster(workers=2) as cluster, pytest.raises(TopologyFailed) as e:
        cluster.run("broken", b.create_topology(), {"test.redis.url": redis_url}, timeout=60)
    status = e.value.status
    assert status.state == "failed"
    assert "source[1]" in status.error and "planted open failure" in status.error
