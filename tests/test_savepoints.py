"""Savepoints: taken from a stopped or a live exactly-once run, listed, deleted, kept by
``topology reset``; an upgrade to new code with an extra component from a savepoint, then a
rollback of the old code to it, with exact counts."""

from __future__ import annotations

import re

import pytest
import redis
from runtime_components import StreamFeeder
from spark_topologies import SlowSplit

from examples.stateful_wordcount import StatefulWordCount, counts_in_state
from examples.wordcount import STREAM, load_sentences, true_counts
from state import savepoints
from state.recovery import reset
from state.refusal import StateSettingsChanged
from topology_runtime import LocalCluster, TopologyBuilder, TopologyError
from topology_runtime.cli.main import main as cli
from topology_runtime.connectors import RedisStreamReplaySpout
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow

CONF = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
        "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
        "topology.max.spout.pending": 100}


def wordcount(bounded: bool, extra: bool = False, count: int = 2):
    """v1: sentences -> split -> count; v2 (``extra``) adds a second stateful counter."""
    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamReplaySpout(STREAM, fields=["sentence"], bounded=bounded, batch_size=50), 2)
    b.set_bolt("split", SlowSplit(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulWordCount(), count).fields_grouping("split", ["word"])
    if extra:
        b.set_bolt("count2", StatefulWordCount(), 1).fields_grouping("split", ["word"])
    return b.create_topology()


def _drained_v1(redis_url, name, truth):
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit(name, wordcount(bounded=False), {"redis.url": redis_url, **CONF})
        assert wait_for(lambda: counts_in_state(redis_url, name) == truth, 120)
        status = run.kill(drain=True, timeout=60)
    assert status.state in ("killed", "completed"), status.error


def test_upgrade_and_rollback(redis_url, redis_client, capsys):
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    first = load_sentences(r, 400)
    _drained_v1(redis_url, "wc-v1", true_counts(first))
    assert cli(["savepoint", "wc-v1", "--name", "before-upgrade", "--redis", redis_url]) == 0
    assert cli(["savepoint", "wc-v1", "--name", "before-upgrade", "--redis", redis_url]) == 8  # taken
    second = load_sentences(r, 300, seed=11)
    everything = true_counts(first + second)
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        # The new code without its old component is refused, then allowed.
        with pytest.raises(StateSettingsChanged, match="count"):
            b = TopologyBuilder()
            b.set_spout("sentences", RedisStreamReplaySpout(STREAM, fields=["sentence"], bounded=True), 2)
            cluster.submit("wc-dropped", b.create_topology(), {"redis.url": redis_url, **CONF},
                           from_savepoint="wc-v1/before-upgrade")
        assert not redis_client.exists("topology:{wc-dropped:ctl}:checkpoint")  # nothing written
        with pytest.raises(TopologyError, match="no savepoint"):
            cluster.submit("wc-v2", wordcount(True, extra=True), {"redis.url": redis_url, **CONF},
                           from_savepoint="wc-v1/nope")
        status = cluster.run("wc-v2", wordcount(True, extra=True), {"redis.url": redis_url, **CONF}, timeout=240,
                             from_savepoint="wc-v1/before-upgrade")
    assert status.state == "completed", status.error
    assert counts_in_state(redis_url, "wc-v2") == everything  # nothing lost, nothing counted twice
    assert counts_in_state(redis_url, "wc-v2", "count2") == true_counts(second)  # the new one started empty
    # wc-v2 holds state: the savepoint goes into it only after a reset.
    with LocalCluster(workers=2, redis_url=redis_url) as cluster, pytest.raises(StateSettingsChanged, match="holds"):
        cluster.submit("wc-v2", wordcount(True), {"redis.url": redis_url, **CONF}, from_savepoint="wc-v1/before-upgrade")
    # Roll back: the old code, its own id, from the savepoint (its state is replaced).
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        status = cluster.run("wc-v1", wordcount(True), {"redis.url": redis_url, **CONF}, timeout=240,
                             from_savepoint="wc-v1/before-upgrade")
    assert status.state == "completed", status.error
    assert counts_in_state(redis_url, "wc-v1") == everything
    # Listed (by `topology savepoints` too: name, txid, time, components); kept by reset; deleted.
    assert [m.name for m in savepoints.list_savepoints(redis_client, "wc-v1")] == ["before-upgrade"]
    m = savepoints.get(redis_client, "wc-v1", "before-upgrade")
    capsys.readouterr()
    assert cli(["savepoints", "wc-v1", "--redis", redis_url]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"before-upgrade  txid {m.txid}  {m.time}  count=2, sentences=2  ({len(m.parts)} task state(s))"]
    assert m.txid >= 0 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", m.time), m
    reset("wc-v1", redis_url)
    assert savepoints.get(redis_client, "wc-v1", "before-upgrade").components == {"count": 2, "sentences": 2}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        status = cluster.run("wc-v1", wordcount(True), {"redis.url": redis_url, **CONF}, timeout=240,
                             from_savepoint="wc-v1/before-upgrade")
    assert counts_in_state(redis_url, "wc-v1") == everything
    assert cli(["savepoint-delete", "wc-v1", "before-upgrade", "--redis", redis_url]) == 0
    assert cli(["savepoint-delete", "wc-v1", "before-upgrade", "--redis", redis_url]) == 6
    assert savepoints.list_savepoints(redis_client, "wc-v1") == []
    capsys.readouterr()
    assert cli(["savepoints", "wc-v1", "--redis", redis_url]) == 0
    assert capsys.readouterr().out.splitlines() == ["wc-v1: no savepoints"]
    assert not [k for k in redis_client.scan_iter("topology:*:sp:*")]


def test_savepoint_of_a_live_run(redis_url, redis_client):
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    sentences = load_sentences(r, 1500)
    truth = true_counts(sentences)
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("wc-live", wordcount(bounded=False), {"redis.url": redis_url, **CONF})
        assert wait_for(lambda: run.status().components["split"].executed > 200, 60)
        name = run.savepoint("mid")
        assert name == "mid"
        assert cli(["savepoint", "wc-live", "--name", "mid2", "--redis", redis_url]) == 0
        assert wait_for(lambda: counts_in_state(redis_url, "wc-live") == truth, 180)  # the run went on
        run.kill(drain=True, timeout=60)
    m = savepoints.get(redis_client, "wc-live", "mid")
    assert 0 <= m.txid and sum(counts_in_state(redis_url, "wc-live").values()) == sum(truth.values())
    # The savepoint is a consistent cut: resumed from its positions, the counts come out exact,
    # also with the keyed count on 3 tasks instead of 2 (its state handed over by key group).
    assert m.key_groups == {"count": 128}
    for sp, count in (("mid", 2), ("mid2", 3)):
        with LocalCluster(workers=2, redis_url=redis_url) as cluster:
            status = cluster.run(f"wc-from-{sp}", wordcount(True, count=count), {"redis.url": redis_url, **CONF},
                                 timeout=240, from_savepoint=f"wc-live/{sp}")
        assert status.state == "completed", status.error
        assert counts_in_state(redis_url, f"wc-from-{sp}") == truth


def test_stopped_savepoint_refusals(redis_url, redis_client):
    assert cli(["savepoint", "never-ran", "--redis", redis_url]) == 6
    redis_client.hset("topology:{half:ctl}:checkpoint", mapping={"txid": 3, "state": "PREPARING"})
    assert cli(["savepoint", "half", "--redis", redis_url]) == 8
    assert cli(["savepoint-delete", "half", "nope", "--redis", redis_url]) == 6


@pytest.mark.spark
def test_topology_submit_starts_a_spark_run_from_a_savepoint(redis_url):
    """A savepoint of a run on local workers starts a run on Spark local[2] (topology submit
    --from-savepoint): the saved counts go on, the new input is added once."""
    import subprocess
    import sys
    from pathlib import Path

    from topology_runtime.launchers.spark import spark_env

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    first = load_sentences(r, 300)
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        status = cluster.run("sp-local", "tests.spark_topologies:exactly_once_wordcount",
                             {"redis.url": redis_url, **CONF}, timeout=240)
    assert status.state == "completed", status.error
    assert cli(["savepoint", "sp-local", "--name", "to-spark", "--redis", redis_url]) == 0
    second = load_sentences(r, 200, seed=5)
    cmd = [sys.executable, "-m", "topology_runtime.cli", "submit", "tests.spark_topologies:exactly_once_wordcount",
           "--name", "sp-spark", "--master", "local[2]", "--workers", "2", "--redis", redis_url,
           "--from-savepoint", "sp-local/to-spark", "--progress-interval", "0"]
    cmd += [x for k, v in CONF.items() for x in ("--conf", f"{k}={str(v).lower() if isinstance(v, bool) else v}")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=spark_env(), cwd=Path(__file__).resolve().parent.parent,
                         timeout=300)
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    assert counts_in_state(redis_url, "sp-spark") == true_counts(first + second)
    # An unknown savepoint: invalid input, nothing shipped or started.
    bad = subprocess.run(cmd[:cmd.index("--from-savepoint") + 1] + ["sp-local/nope"] + cmd[cmd.index("--from-savepoint") + 2:],
                         capture_output=True, text=True, env=spark_env(), cwd=Path(__file__).resolve().parent.parent,
                         timeout=120)
    assert bad.returncode == 4 and "no savepoint" in bad.stderr, bad.stderr[-2000:]


def test_a_live_savepoint_of_a_run_on_storms_protocol(redis_url, redis_client):
    """At-least-once checkpointing (the checkpoint spout drives it): the savepoint is copied
    between two checkpoints, at a committed txid; the run goes on untouched."""
    from state.keyed_state import component_state
    from topology_runtime.connectors import RedisStreamSpout

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    first = load_sentences(r, 3000)
    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamSpout(STREAM, fields=["sentence"], bounded=True, batch_size=50), 1)
    b.set_bolt("split", SlowSplit(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulWordCount(), 2).fields_grouping("split", ["word"])
    conf = {"redis.url": redis_url, "topology.state.provider": "redis", "topology.state.checkpoint.interval.ms": 100}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("wc-storm", b.create_topology(), conf)
        # Input keeps arriving until the savepoint is taken: the run cannot finish before it.
        with StreamFeeder(redis_url, STREAM) as feeder:
            assert wait_for(lambda: sum(counts_in_state(redis_url, "wc-storm").values()) > 0, 60)
            assert cli(["savepoint", "wc-storm", "--name", "live", "--redis", redis_url]) == 0
            assert run.status().state == "running"  # taken from the live run
        truth = true_counts(first + feeder.sentences)
        status = run.wait(120)
    assert status.state == "completed", status.error
    assert counts_in_state(redis_url, "wc-storm") == truth
    m = savepoints.get(redis_client, "wc-storm", "live")
    assert m.txid >= 0 and m.components == {"count": 2} and m.key_groups == {"count": 128}
    saved = savepoints.restore(redis_client, "wc-storm", "live", "wc-storm-copy")
    assert saved.txid == m.txid
    copy = dict(component_state(redis_client, "wc-storm-copy", "count"))
    assert 0 < sum(copy.values()) <= sum(truth.values()) and all(copy[w] <= truth[w] for w in copy)
