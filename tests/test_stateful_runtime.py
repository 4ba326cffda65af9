"""Stateful bolts with checkpoints, on real worker processes and a real Redis."""

from __future__ import annotations

import pytest
import redis
from runtime_components import NumberSpout

from examples.stateful_wordcount import StatefulWordCount, build, counts_in_state
from examples.wordcount import SplitSentence, load_sentences, true_counts
from topology_runtime import ConfigError, LocalCluster, TopologyBuilder


def test_stateful_wordcount_commits_exact_counts(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = true_counts(load_sentences(client, 3000))
    conf = {"redis.url": redis_url, "topology.state.provider": "redis",
            "topology.state.checkpoint.interval.ms": 200}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("swc", build(), conf)
        status = run.wait(120)
    assert status.state == "completed", status.error
    assert status.components["sentences"].acked == 3000
    assert counts_in_state(redis_url, "swc", "count") == truth
    # The components' own figures: the checkpoint tuples every bolt forwards and acks are the
    # system's, not theirs (the run took several checkpoints).
    words = sum(truth.values())
    split, count = status.components["split"], status.components["count"]
    assert (split.executed, split.emitted, split.acked) == (3000, words, 3000), split
    assert (count.executed, count.emitted, count.acked) == (words, words, words), count
    # Committed and nothing left prepared; the checkpoint record says COMMITTED.
    assert client.keys("topology:{swc:*}:prepare") == []
    cp = client.hgetall("topology:{swc:ctl}:checkpoint")
    assert cp["state"] == "COMMITTED" and int(cp["txid"]) >= 0


@pytest.mark.slow
def test_rerun_resumes_state_on_the_same_or_another_parallelism(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = true_counts(load_sentences(client, 500))
    conf = {"redis.url": redis_url, "topology.state.provider": "redis",
            "topology.state.checkpoint.interval.ms": 200}
    with LocalCluster(workers=2) as cluster:
        cluster.run("resume", build(), conf, timeout=120)
        truth2 = true_counts(load_sentences(client, 500, seed=8))
        run = cluster.submit("resume", build(), conf)
        run.wait(120)
    both = {w: truth.get(w, 0) + truth2.get(w, 0) for w in set(truth) | set(truth2)}
    assert counts_in_state(redis_url, "resume", "count") == both
    # The count is keyed (fields-grouped on the word): 3 tasks find every count by key group.
    with LocalCluster(workers=2) as cluster:
        assert cluster.run("resume", build(parallelism=3), conf, timeout=120).state == "completed"
    assert counts_in_state(redis_url, "resume", "count") == both


def test_checkpoint_interval_must_be_below_message_timeout():
    b = TopologyBuilder()
    b.set_spout("s", NumberSpout(1))
    b.set_bolt("count", StatefulWordCount()).shuffle_grouping("s")
    with LocalCluster(workers=1) as cluster, pytest.raises(ConfigError, match="must be below"):
        cluster.submit("x", b.create_topology(), {"topology.state.checkpoint.interval.ms": 5000,
                                                  "topology.message.timeout.secs": 5})


def test_stateful_topology_wiring():
    """TopologyBuilderTest.testStatefulTopology: $checkpointspout added; checkpoint inputs."""
    from topology_runtime.api.config import resolve_config
    from topology_runtime.plan.planner import build_plan

    b = TopologyBuilder()
    b.set_spout("s1", NumberSpout(1))
    b.set_spout("s2", NumberSpout(1))
    b.set_bolt("split", SplitSentence(), 2).shuffle_grouping("s1").shuffle_grouping("s2")
    b.set_bolt("count", StatefulWordCount(), 3).fields_grouping("split", ["word"])
    plan = build_plan(b.create_topology(), resolve_config({}), 2)
    assert plan.stateful and plan.component_tasks["$checkpointspout"]
    # Two spouts feed "split": ONE checkpoint input ($checkpointspout, 1 task); count hears split's 2 tasks.
    assert plan.checkpoint_inputs == {"split": 1, "count": 2}
    subs = {(plan.streams[sid].component, s.target) for sid, ss in plan.subscriptions.items() for s in ss
            if plan.streams[sid].stream == "$checkpoint"}
    assert subs == {("$checkpointspout", "split"), ("split", "count")}

