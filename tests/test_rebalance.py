"""Rebalance a live run onto another number of worker processes (LocalCluster): the spouts
pause while in-flight trees drain, every worker stops, the new number starts with the same
tasks and state. Exactly-once counts stay exact, also with a worker SIGKILLed during the
rebalance; at-least-once loses nothing. Through the CLI and the run handle."""

from __future__ import annotations

import os
import signal

import pytest
import redis
from spark_topologies import exactly_once_wordcount, wordcount

from examples.stateful_wordcount import counts_in_state
from examples.wordcount import COUNTS, load_sentences, true_counts
from topology_runtime import LocalCluster, SparkCluster, TopologyError
from topology_runtime.api.exit_codes import ExitCode
from topology_runtime.cli.main import main as cli
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow

EO = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
      "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
      "topology.max.spout.pending": 100}


def test_exactly_once_counts_stay_exact_across_two_rebalances_and_a_kill(redis_url, capsys):
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 2500))
    name = "rb-eo"
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit(name, exactly_once_wordcount(), {"redis.url": redis_url, **EO})
        assert wait_for(lambda: run.status().components["split"].executed > 200, 60), run.status()
        # 2 -> 3 through the CLI, which waits until the run is on 3 workers.
        assert cli(["rebalance", name, "--workers", "3", "--redis", redis_url]) == ExitCode.COMPLETED
        out = capsys.readouterr().out
        assert f"{name}: running on 3 worker(s) (sentences=2, split=2, count=2)" in out, out
        assert len(run.pids) == 3 and run.status().workers == 3
        executed = run.status().components["split"].executed
        assert wait_for(lambda: run.status().components["split"].executed > executed + 100, 60), run.status()
        # 3 -> 1 through the handle, with a worker SIGKILLed while the spouts drain.
        victim = next(iter(run.pids.values()))
        run.rebalance(workers=1)
        os.kill(victim, signal.SIGKILL)
        status = run.wait(240)
    assert status.state == "completed", status.error
    assert status.workers == 1 and run.plan.workers == 1
    counts = counts_in_state(redis_url, name, "count")
    assert counts == truth  # ==: nothing lost, nothing counted twice


def test_at_least_once_loses_nothing(redis_url):
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = true_counts(load_sentences(r, 3000))
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("rb-alo", wordcount(slow=True), {"redis.url": redis_url})
        assert wait_for(lambda: run.status().components["split"].executed > 300, 60), run.status()
        run.rebalance(workers=3, timeout=10)
        assert wait_for(lambda: run.status().workers == 3 and run.status().state == "running", 60), run.status()
        status = run.wait(240)
    assert status.state == "completed", status.error
    counts = {w: int(n) for w, n in r.hgetall(COUNTS).items()}
    assert all(counts.get(w, 0) >= n for w, n in truth.items())  # at least once: every word counted


def test_what_rebalance_refuses(redis_url, capsys):
    assert cli(["rebalance", "nobody", "--workers", "2", "--redis", redis_url]) == ExitCode.NO_SUCH_RUN
    load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 5000)  # the run outlasts the test
    with LocalCluster(workers=1, redis_url=redis_url) as cluster:
        run = cluster.submit("rb-refuse", wordcount(slow=True), {"redis.url": redis_url})
        try:
            assert cli(["rebalance", "rb-refuse", "--parallelism", "splt=3", "--redis", redis_url]) == ExitCode.REFUSED
            assert "no component 'splt'" in capsys.readouterr().err
            assert cli(["rebalance", "rb-refuse", "--parallelism", "split=0", "--redis", redis_url]) == ExitCode.INVALID
            assert cli(["rebalance", "rb-refuse", "--redis", redis_url]) == ExitCode.INVALID
            with pytest.raises(TopologyError, match="parallelism must be an integer >= 1"):
                run.rebalance(parallelism={"split": 0})
            with pytest.raises(ValueError, match="workers must be an integer >= 1, got 0"):
                run.rebalance(workers=0)
        finally:
            run.kill()


@pytest.mark.spark
def test_on_spark_the_barrier_stage_is_relaunched_with_the_new_number(redis_url, tmp_path, capsys):
    """Spark local[3]: 4 workers are refused before anything changes (the cluster has 3 slots);
    2 -> 3 relaunches the barrier stage with 3 tasks; the keyed count rescales 2 -> 3 tasks;
    exactly-once counts stay exact."""
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 12000))
    name = "rb-spark"
    with SparkCluster("local[3]", workers=2, redis_url=redis_url, log_dir=str(tmp_path), progress_interval=1) as c:
        run = c.submit(name, "tests.spark_topologies:exactly_once_wordcount", {"redis.url": redis_url, **EO})
        assert wait_for(lambda: (run.status().components.get("split") or 0) and
                        run.status().components["split"].executed > 200, 120), run.log()[-3000:]
        assert cli(["rebalance", name, "--workers", "4", "--redis", redis_url]) == ExitCode.REFUSED
        assert "the cluster offers 3 task slot(s)" in capsys.readouterr().err
        assert run.status().workers == 2 and run.status().state == "running"  # nothing changed
        assert cli(["rebalance", name, "--workers", "3", "--redis", redis_url]) == ExitCode.COMPLETED
        assert f"{name}: running on 3 worker(s)" in capsys.readouterr().out
        assert run.savepoint("on-spark") == "on-spark"  # the Spark handle's live savepoint, after the rebalance
        # Rescale the keyed count 2 -> 3 tasks: the stage relaunches with the new plan.
        assert cli(["rebalance", name, "--parallelism", "count=3", "--redis", redis_url]) == ExitCode.COMPLETED
        assert f"{name}: running on 3 worker(s) (sentences=2, split=2, count=3)" in capsys.readouterr().out
        status = run.wait(300)
    assert status.state == "completed", (status.error, run.log()[-3000:])
    assert status.workers == 3 and status.parallelism["count"] == 3
    assert "launching 3 worker(s) as a barrier stage" in run.log()
    from state import savepoints

    saved = savepoints.get(redis.Redis.from_url(redis_url), name, "on-spark")
    assert saved.txid > 0 and saved.components.get("count") == 2
    counts = counts_in_state(redis_url, name, "count")
    assert counts == truth


def _committed_txid(client: redis.Redis, name: str) -> int:
    from state.transactional import current_txid

    return (current_txid(client, name) or 1) - 1


def test_a_transactional_topology_counts_exactly_across_a_rebalance(redis_url):
    """Batches in flight when the workers stop replay identically on the new number;
    TransactionalValue skips what was committed: exact counts."""
    import random

    from examples.transactional_count import word_count
    from state.values import ValueMap

    rng = random.Random(5)
    words = ["apple", "banana", "cat", "dog", "egg", "fig"]
    data = {p: [[rng.choice(words)] for _ in range(2000)] for p in range(3)}
    truth: dict[str, int] = {}
    for rows in data.values():
        for (w,) in rows:
            truth[w] = truth.get(w, 0) + 1
    client = redis.Redis.from_url(redis_url)
    conf = {"redis.url": redis_url, "topology.max.spout.pending": 3, "topology.message.timeout.secs": 2}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("rb-tx", word_count(data, take=10, name="rb-tx"), conf)
        assert wait_for(lambda: client.exists("word-counts") and client.hlen("word-counts") > 0, 60)
        before = _committed_txid(client, "rb-tx")
        run.rebalance(workers=3, timeout=2)
        # Not "running on 3": the rest of this run takes well under a second on 3 workers.
        assert wait_for(lambda: run.status().workers == 3, 60), run.status()
        status = run.wait(240)
    assert status.state == "completed", status.error
    assert status.workers == 3
    assert before < _committed_txid(client, "rb-tx")  # batches were left to run on 3 workers
    got = ValueMap(client, "word-counts").get(list(truth))
    assert {w: v.value for w, v in got.items()} == truth
