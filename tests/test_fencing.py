"""Fencing: a run whose lease expired while it was paused (SIGSTOP) and a second
run of the same id started must not write anything when it resumes: not its run record, not a
state commit or checkpoint record, not a transactional commit. First each writer against a real
Redis with two tokens, then whole runs paused with SIGSTOP while a second run takes over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from examples.redis_streams_count import fill
from examples.stateful_wordcount import counts_in_state
from examples.transactional_count import KeyedCount
from examples.wordcount import load_sentences, true_counts
from state import RedisKeyValueState
from state.checkpoint import COMMITTED, PREPARING, CheckPointState, load_checkpoint, save_checkpoint
from state.fencing import Fenced
from state.layout import ctl_key, same_slot
from state.recovery import reset
from state.transactional import TransactionalState
from state.values import ValueMap
from topology_runtime.api.status import RunStatus
from topology_runtime.control.control_plane import ControlPlane, LeaseLost
from topology_runtime.testing import wait_for

ROOT = Path(__file__).resolve().parent.parent
LEASE_MS = 1500


def _take_over(client: redis.Redis, control: ControlPlane, name: str) -> int:
    """The first run's lease expires (as when it is paused past it) and a second run starts."""
    client.delete(ctl_key(name, "lease"))
    return control.register(name, "local", 1)


# --- each writer, two tokens --------------------------------------------------------------------
def test_a_stale_run_cannot_touch_the_new_runs_record(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    control = ControlPlane(redis_url)
    old = control.register("fence-rec", "local", 1)
    control.publish("fence-rec", old, RunStatus("fence-rec", "running"))
    new = _take_over(client, control, "fence-rec")
    assert new > old
    control.publish("fence-rec", new, RunStatus("fence-rec", "running"))
    before = client.hgetall(ctl_key("fence-rec", "run"))
    with pytest.raises(LeaseLost):
        control.publish("fence-rec", old, RunStatus("fence-rec", "failed"))
    with pytest.raises(LeaseLost):
        control.finish("fence-rec", old, RunStatus("fence-rec", "completed"))
    with pytest.raises(LeaseLost):
        control.renew("fence-rec", old)
    assert client.hgetall(ctl_key("fence-rec", "run")) == before and "ended" not in before
    assert client.ttl(ctl_key("fence-rec", "run")) == -1  # no week-long expiry written by the stale run
    assert control.get("fence-rec").state == "running" and control.is_live("fence-rec")
    # the new run ends and gives the lease back: the stale one still may not take it again
    control.finish("fence-rec", new, RunStatus("fence-rec", "completed"))
    with pytest.raises(LeaseLost):
        control.renew("fence-rec", old)
    assert not control.is_live("fence-rec") and control.get("fence-rec").state == "completed"


def test_tokens_keep_growing_across_a_reset(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    control = ControlPlane(redis_url)
    old = control.register("fence-reset", "local", 1)
    RedisKeyValueState(client, "fence-reset", "count", 0, token=old).prepare_commit(1)
    client.delete(ctl_key("fence-reset", "lease"))  # paused past its lease
    assert reset("fence-reset", redis_url) > 0  # deletes the token counter and the fences too
    new = control.register("fence-reset", "local", 1)
    assert new > old  # from Redis' clock: the paused run stays older than any later run
    RedisKeyValueState(client, "fence-reset", "count", 0, token=new)
    with pytest.raises(LeaseLost):
        control.publish("fence-reset", old, RunStatus("fence-reset", "running"))


def test_a_stale_run_cannot_prepare_commit_or_roll_back_state(redis_url):
    client = redis.Redis.from_url(redis_url)
    old = RedisKeyValueState(client, "fence-kv", "count", 0, token=100)
    old.put("n", 1)
    old.prepare_commit(1)
    old.commit(1)
    old.put("n", 2)
    old.prepare_commit(2)
    new = RedisKeyValueState(client, "fence-kv", "count", 0, token=200)  # claims the task's slot before reading
    assert new.get("n") == 2 and new.prepared_txid == 2
    with pytest.raises(Fenced, match="newer run"):
        old.commit(2)
    with pytest.raises(Fenced):
        old.rollback()
    old.put("n", 99)
    with pytest.raises(Fenced):
        old.prepare_commit(3)
    new.rollback()  # the new run decides: back to txid 1
    new.put("n", 5)
    new.prepare_commit(2)
    new.commit(2)
    assert RedisKeyValueState(client, "fence-kv", "count", 0).get("n") == 5  # nothing of the stale run's


def test_a_stale_run_cannot_write_the_checkpoint_record(redis_url):
    client = redis.Redis.from_url(redis_url)
    save_checkpoint(client, "fence-cp", CheckPointState(3, COMMITTED), token=100)
    save_checkpoint(client, "fence-cp", CheckPointState(4, PREPARING), token=200)
    with pytest.raises(Fenced):
        save_checkpoint(client, "fence-cp", CheckPointState(4, COMMITTED), token=100)
    assert load_checkpoint(client, "fence-cp") == CheckPointState(4, PREPARING)


def test_a_stale_run_cannot_commit_a_transaction_or_record_a_batch(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    old = TransactionalState(client, "fence-tx", token=100)
    old.record_batch(1, {0: [0, 10]})
    old.commit(1, 2)
    old.record_batch(2, {0: [10, 20]})
    new = TransactionalState(client, "fence-tx", token=200)
    with pytest.raises(Fenced):
        old.commit(2, 3)
    with pytest.raises(Fenced):
        old.record_batch(3, {0: [20, 30]})
    with pytest.raises(Fenced):
        old.commit_opaque(2, lambda entries, committed: entries)
    assert new.current_txid() == 2
    new.commit(2, 3)
    assert new.current_txid() == 3


def test_a_transactional_value_refuses_an_older_txid(redis_url):
    client = redis.Redis.from_url(redis_url)
    values = ValueMap(client, "fence-values")
    values.multi_add(7, {"a": 1, "b": 1})
    with pytest.raises(ValueError, match="at txid 7.*stale run"):
        values.multi_add(5, {"b": 10})  # a stale run's older batch would count twice
    assert {k: v.value for k, v in values.get(["a", "b"]).items()} == {"a": 1, "b": 1}


# --- whole runs, paused with SIGSTOP -------------------------------------------------------------
def _run(topology: str, name: str, redis_url: str, conf: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "topology_runtime.cli", "run", topology, "--name", name, "--workers", "2",
           "--redis", redis_url, "--progress-interval", "0"]
    for c in conf:
        cmd += ["--conf", c]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, "TOPOLOGY_LEASE_TTL_MS": str(LEASE_MS)}, start_new_session=True)


def _pause_and_replace(topology: str, name: str, redis_url: str, conf: list[str], progressed) -> tuple:
    """Run A until ``progressed()``; SIGSTOP its whole process group (driver and workers) past the
    lease; run B of the same id; resume A while B runs. Returns (A's output, B's output, B's pid)."""
    control = ControlPlane(redis_url)
    a = _run(topology, name, redis_url, conf)
    b = None
    try:
        assert wait_for(lambda: progressed() or a.poll() is not None, 60), "run A made no progress"
        assert a.poll() is None, a.communicate()[0][-3000:]
        os.killpg(a.pid, signal.SIGSTOP)
        assert wait_for(lambda: not control.is_live(name), LEASE_MS / 1000 + 5)
        b = _run(topology, name, redis_url, conf)

        def b_registered() -> bool:
            rec = control.get(name)
            return rec is not None and rec.live and rec.info.get("pid") not in (None, str(a.pid))
        assert wait_for(lambda: b_registered() or b.poll() is not None, 30), "run B did not register"
        b_pid = control.get(name).info["pid"]
        time.sleep(1.0)  # B runs and commits; then A wakes up in the middle of its own work
        os.killpg(a.pid, signal.SIGCONT)
        out_a, _ = a.communicate(timeout=60)
        out_b, _ = b.communicate(timeout=120)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
    assert b.returncode == 0, out_b[-4000:]
    return out_a, out_b, b_pid


def _assert_record_is_bs(redis_url: str, name: str, b_pid: str, out_a: str) -> None:
    rec = ControlPlane(redis_url).get(name)
    assert rec.info["pid"] == b_pid and rec.state == "completed", (rec.info, out_a[-3000:])
    # It tried to write (its final record, or a checkpoint if it woke before its next one) and was refused.
    assert "fenced off" in out_a or "a newer run of this topology owns it" in out_a, out_a[-3000:]


@pytest.mark.slow
def test_a_paused_exactly_once_run_writes_nothing_after_a_second_run_took_over(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = true_counts(load_sentences(client, 2000))
    name = "fence-eo"
    conf = ["topology.state.provider=redis", "topology.state.exactly.once=true",
            "topology.state.checkpoint.interval.ms=200", "topology.max.spout.pending=50"]

    def progressed() -> bool:
        return load_checkpoint(client, name).txid >= 3

    out_a, _, b_pid = _pause_and_replace("tests.spark_topologies:exactly_once_wordcount", name, redis_url, conf,
                                         progressed)
    _assert_record_is_bs(redis_url, name, b_pid, out_a)
    assert counts_in_state(redis_url, name, "count") == truth  # exact: the stale run's commits refused


class SlowKeyedCount(KeyedCount):
    """The example's per-batch word counts, slowly enough to pause the run between commits."""

    def finish_batch(self):
        time.sleep(0.03)
        super().finish_batch()


STREAMS = [f"fence:words:{p}" for p in range(2)]


def fenced_streams_count():
    """The transactional word count (TransactionalValues) over two streams, slowed down."""
    from examples.transactional_count import UpdateWordCounts
    from topology_runtime.transactional import RedisStreamsTransactionalSpout, TransactionalTopologyBuilder

    spout = RedisStreamsTransactionalSpout(STREAMS, ["word"], max_entries=10, stop_when_drained=True)
    b = TransactionalTopologyBuilder("fence-tx-run", "spout", spout, 2)
    b.set_bolt("count", SlowKeyedCount(), 2).fields_grouping("spout", ["word"])
    b.set_committer_bolt("update", UpdateWordCounts(), 2).fields_grouping("count", ["word"])
    return b.create_topology()


@pytest.mark.slow
def test_a_paused_transactional_run_commits_nothing_after_a_second_run_took_over(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.delete(*STREAMS, "word-counts")
    truth = fill(client, STREAMS, 400)
    name = "fence-tx"
    conf = ["topology.max.spout.pending=3", f"redis.url={redis_url}"]
    cur = TransactionalState(client, "fence-tx-run")

    def progressed() -> bool:
        return (cur.current_txid() or 0) >= 8

    out_a, _, b_pid = _pause_and_replace("tests.test_fencing:fenced_streams_count", name, redis_url, conf,
                                         progressed)
    _assert_record_is_bs(redis_url, name, b_pid, out_a)
    got = ValueMap(redis.Redis.from_url(redis_url), "word-counts").get(sorted(truth))
    assert {w: v.value for w, v in got.items()} == truth  # no batch twice, none lost
    client.delete(same_slot("word-counts", ":writers"))
