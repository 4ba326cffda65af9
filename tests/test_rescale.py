"""Rescale a live run: `topology rebalance ID --parallelism COMPONENT=N` (and the run handle).

A stateless component takes any number of tasks; a keyed stateful one (its input fields-grouped,
its state keys the grouping values) too, its state handed over by key group in one step with the
checkpoint; other state is refused (exit 8) naming the component and one key, nothing changed.
LocalCluster worker processes, the session's Redis; exactly-once counts compared with the truth.
"""

from __future__ import annotations

import os
import signal

import pytest
import redis
from spark_topologies import STREAM, SlowSplit, exactly_once_wordcount

from examples.stateful_wordcount import StatefulWordCount, counts_in_state
from examples.wordcount import load_sentences, true_counts
from state.namespaces import StateComponentsChanged, recorded
from topology_runtime import LocalCluster, StatefulBolt, TopologyBuilder, TopologyError
from topology_runtime.api.exit_codes import ExitCode
from topology_runtime.cli.main import main as cli
from topology_runtime.connectors import RedisStreamReplaySpout
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow

EO = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
      "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
      "topology.max.spout.pending": 100}


def _progress(run, more: int = 100) -> None:
    done = run.status().components["split"].executed
    assert wait_for(lambda: run.status().components["split"].executed > done + more, 60), run.status()


def test_a_keyed_count_rescales_live_with_exact_counts(redis_url, capsys):
    """count 2 -> 4 through the CLI, then count 4 -> 2 and split 2 -> 3 through the handle with
    a worker SIGKILLed while the spouts drain: every count exact at the end."""
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 3000))
    name = "rs-eo"
    client = redis.Redis.from_url(redis_url)
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit(name, exactly_once_wordcount(), {"redis.url": redis_url, **EO})
        _progress(run, 200)
        assert cli(["rebalance", name, "--parallelism", "count=4", "--redis", redis_url]) == ExitCode.COMPLETED
        out = capsys.readouterr().out
        assert f"{name}: running on 2 worker(s) (sentences=2, split=2, count=4)" in out, out
        assert run.status().parallelism["count"] == 4 and len(run.plan.component_tasks["count"]) == 4
        assert recorded(client, name)["count"] == {"parallelism": 4, "key_groups": 128}
        _progress(run)
        victim = next(iter(run.pids.values()))
        split_before = run.status().components["split"].executed
        run.rebalance(parallelism={"count": 2, "split": 3})
        os.kill(victim, signal.SIGKILL)
        assert wait_for(lambda: run.status().parallelism.get("split") == 3 and run.status().state == "running",
                        120), run.status()
        status = run.wait(240)
    assert status.state == "completed", status.error
    assert status.parallelism == {"sentences": 2, "split": 3, "count": 2}
    assert recorded(client, name)["count"] == {"parallelism": 2, "key_groups": 128}
    assert counts_in_state(redis_url, name, "count") == truth  # ==: nothing lost, nothing counted twice
    # The counts live in key groups; the split's figures carried over the new task ids (what the
    # killed worker had not reported yet is lost with it: at least what was counted before).
    assert not client.keys(f"topology:{{{name}:count/*}}:state")
    assert status.components["split"].executed >= split_before


class TotalingCount(StatefulBolt):
    """Counts words and, beside them, a running total under a key of its own: state that cannot
    follow a word to another task."""

    outputs = ["word", "count"]

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        word = tup["word"]
        self.state.put(word, self.state.get(word, 0) + 1)
        self.state.put(("total",), self.state.get(("total",), 0) + 1)
        self.emit([word, 1], anchors=tup)
        self.ack(tup)


def totaling():
    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamReplaySpout(STREAM, fields=["sentence"], bounded=False, batch_size=50), 1)
    b.set_bolt("split", SlowSplit(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", TotalingCount(), 2).fields_grouping("split", ["word"])
    return b.create_topology()


def test_state_that_cannot_follow_its_keys_is_refused_and_nothing_changes(redis_url, capsys):
    load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 500)
    name = "rs-refused"
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit(name, totaling(), {"redis.url": redis_url, **EO})
        try:
            _progress(run, 50)
            client = redis.Redis.from_url(redis_url)  # a checkpoint committed a task's own total
            assert wait_for(lambda: client.keys(f"topology:{{{name}:count/*}}:state"), 30)
            rc = cli(["rebalance", name, "--parallelism", "count=3", "--redis", redis_url])
            err = capsys.readouterr().err
            assert rc == ExitCode.REFUSED, err
            assert "stateful component 'count'" in err and "['total']" in err and "parallelism 3" in err, err
            with pytest.raises(StateComponentsChanged, match="'count'"):
                run.rebalance(parallelism={"count": 3})
            with pytest.raises(TopologyError, match="no component 'nosuch'"):
                run.rebalance(parallelism={"nosuch": 3})
            assert cli(["rebalance", name, "--parallelism", "count", "--redis", redis_url]) == ExitCode.INVALID
            # Nothing changed: the same tasks, running, its spouts not paused.
            st = run.status()
            assert st.parallelism["count"] == 2 and st.state == "running" and not st.paused
            # ...and it goes on: new input is processed (the first 500 may all be done by now).
            load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 200, seed=9)
            _progress(run, 20)
            # A stateless component in the same run still rescales.
            run.rebalance(parallelism={"split": 1})
            assert wait_for(lambda: run.status().parallelism["split"] == 1 and run.status().state == "running",
                            60), run.status()
        finally:
            run.kill()
    assert recorded(redis.Redis.from_url(redis_url), name)["count"]["parallelism"] == 2


def test_a_rescaled_keyed_count_restarts_exact_after_the_driver_dies(redis_url):
    """The new shape is recorded before its workers start: a later run (here a resubmit of the
    module's shape, count=2, after count went to 3 live) redistributes the same way."""
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 2000))
    name = "rs-resubmit"
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit(name, exactly_once_wordcount(), {"redis.url": redis_url, **EO})
        _progress(run, 200)
        run.rebalance(parallelism={"count": 3})
        assert wait_for(lambda: run.status().parallelism["count"] == 3 and run.status().state == "running", 60)
        _progress(run)
        run.kill()  # stopped mid-stream, as a lost driver would leave it
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        status = cluster.run(name, exactly_once_wordcount(), {"redis.url": redis_url, **EO}, timeout=240)
    assert status.state == "completed", status.error
    assert counts_in_state(redis_url, name, "count") == truth


def _committed_txid(client: redis.Redis, name: str) -> int:
    from state.transactional import current_txid

    return (current_txid(client, name) or 1) - 1


def test_a_transactional_bolt_rescales_between_batches(redis_url):
    """A transactional topology's per-batch bolts take another number of tasks; the batches in
    flight replay on the new numbers and TransactionalValue keeps the counts exact."""
    import random

    from examples.transactional_count import word_count
    from state.values import ValueMap

    rng = random.Random(6)
    words = ["apple", "banana", "cat", "dog", "egg", "fig"]
    data = {p: [[rng.choice(words)] for _ in range(2000)] for p in range(3)}
    truth: dict[str, int] = {}
    for rows in data.values():
        for (w,) in rows:
            truth[w] = truth.get(w, 0) + 1
    client = redis.Redis.from_url(redis_url)
    conf = {"redis.url": redis_url, "topology.max.spout.pending": 3, "topology.message.timeout.secs": 2}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("rs-tx", word_count(data, take=10, name="rs-tx"), conf)
        assert wait_for(lambda: client.exists("word-counts") and client.hlen("word-counts") > 0, 60)
        assert run.status().parallelism["count"] == 2
        before = _committed_txid(client, "rs-tx")
        run.rebalance(parallelism={"count": 3}, timeout=2)
        # Not "running with 3": the rest of the 200 batches takes well under a second.
        assert wait_for(lambda: run.status().parallelism["count"] == 3, 60), run.status()
        status = run.wait(240)
    assert status.state == "completed", status.error
    assert status.parallelism["count"] == 3
    assert before < _committed_txid(client, "rs-tx")  # batches were left to run on 3 count tasks
    got = ValueMap(client, "word-counts").get(list(truth))
    assert {w: v.value for w, v in got.items()} == truth


def test_stateful_count_counts_after_rescale_match_a_count_without_it(redis_url):
    """The same data through a count that rescales 1 -> 3 -> 2 and one that never does:
    the same committed counts (key groups route and store alike)."""
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 1500))
    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamReplaySpout(STREAM, fields=["sentence"], bounded=True, batch_size=50), 1)
    b.set_bolt("split", SlowSplit(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulWordCount(), 1).fields_grouping("split", ["word"])
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("rs-steps", b.create_topology(), {"redis.url": redis_url, **EO})
        for n in (3, 2):
            _progress(run, 50)
            run.rebalance(parallelism={"count": n})
            assert wait_for(lambda n=n: run.status().parallelism["count"] == n and run.status().state == "running",
                            60), run.status()
        status = run.wait(240)
    assert status.state == "completed", status.error
    assert counts_in_state(redis_url, "rs-steps", "count") == truth
