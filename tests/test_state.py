"""State backends and the recovery protocol against a real Redis."""

from __future__ import annotations

import pytest
import redis

from state import (
    InMemoryKeyValueState,
    RecoveryRefused,
    RedisKeyValueState,
    StateError,
    StateSerializationError,
    recover,
    reset,
)
from state.checkpoint import (
    COMMITTED,
    COMMITTING,
    INITIAL,
    PREPARING,
    CheckPointState,
    load_checkpoint,
    save_checkpoint,
)
from state.layout import ctl_key, state_key


@pytest.fixture(params=["memory", "redis"])
def make_state(request, redis_url):
    client = redis.Redis.from_url(redis_url)

    def make(index: int = 0):
        return InMemoryKeyValueState() if request.param == "memory" else RedisKeyValueState(client, "topo", "c", index)

    return make


def test_storm_prepare_commit_rollback_script(make_state):
    """Storm's InMemoryKeyValueStateTest / RedisKeyValueStateTest.testPrepareCommitRollback."""
    s = make_state()
    s.put("a", "1")
    s.put("b", "2")
    s.prepare_commit(1)
    s.put("c", "3")
    s.rollback()
    assert (s.get("a"), s.get("b"), s.get("c")) == (None, None, None)
    s.put("a", "1")
    s.put("b", "2")
    s.prepare_commit(1)
    s.commit(1)
    s.put("c", "3")
    s.rollback()
    assert (s.get("a"), s.get("b"), s.get("c")) == ("1", "2", None)
    s.delete("b")
    s.put("c", "3")
    s.prepare_commit(2)
    s.commit(2)
    assert (s.get("a"), s.get("b"), s.get("c")) == ("1", None, "3")
    s.put("d", "4")
    s.delete("a")
    s.prepare_commit(3)
    s.rollback()
    assert (s.get("a"), s.get("b"), s.get("c"), s.get("d")) == ("1", None, "3", None)
    assert sorted(s) == [("a", "1"), ("c", "3")]


def test_put_get_delete_and_iterate_skip_deletes(make_state):
    s = make_state()
    s.put("k", {"n": [1, 2]})
    s.put(7, 1.5)
    s.delete("k")
    assert s.get("k") is None and s.get("k", "dflt") == "dflt"
    assert list(s) == [(7, 1.5)]


def test_unserializable_value_names_the_key(make_state):
    s = make_state()
    with pytest.raises(StateSerializationError, match="key 'bad'"):
        s.put("bad", object())
    assert s.get("bad") is None


def test_commit_without_matching_prepare_is_an_error(make_state):
    s = make_state()
    s.put("a", 1)
    with pytest.raises(StateError):
        s.commit(5)


def test_redis_reads_from_the_view_and_one_round_trip_per_prepare_and_commit(redis_url):
    client = redis.Redis.from_url(redis_url)
    seed = RedisKeyValueState(client, "topo", "c", 3)
    for i in range(100):
        seed.put(f"k{i}", i)
    seed.prepare_commit(0)
    seed.commit(0)

    def calls():
        stats = client.info("commandstats")
        return {k: v["calls"] for k, v in stats.items()}

    s = RedisKeyValueState(client, "topo", "c", 3)
    before = calls()
    total = sum(s.get(f"k{i}") for i in range(100))  # loads the view once
    for i in range(100):
        s.put(f"k{i}", i + 1)
    after_gets = calls()
    assert total == sum(range(100))
    assert after_gets.get("cmdstat_hget", 0) == before.get("cmdstat_hget", 0)
    assert after_gets.get("cmdstat_hgetall", 0) - before.get("cmdstat_hgetall", 0) == 2  # state + prepare, once
    s.prepare_commit(1)
    after_prepare = calls()
    scripts = sum(after_prepare.get(k, 0) - after_gets.get(k, 0) for k in ("cmdstat_evalsha", "cmdstat_eval"))
    assert scripts == 1  # one fenced script (state/fencing.py) in place of a MULTI
    assert after_prepare.get("cmdstat_hset", 0) - after_gets.get("cmdstat_hset", 0) == 2  # data + txid
    s.commit(1)
    after_commit = calls()
    evals = sum(after_commit.get(k, 0) - after_prepare.get(k, 0) for k in ("cmdstat_evalsha", "cmdstat_eval"))
    assert evals == 1
    assert RedisKeyValueState(client, "topo", "c", 3).get("k99") == 100


def test_redis_layout_and_prepared_data_survive_a_crash(redis_url):
    client = redis.Redis.from_url(redis_url)
    s = RedisKeyValueState(client, "wc", "count", 4)
    s.put("x", 1)
    s.prepare_commit(0)
    s.commit(0)
    s.put("x", 2)
    s.delete("gone")
    s.prepare_commit(1)
    # The process dies here. A new instance (a restarted task) sees the prepared txid and data.
    assert client.exists(state_key("wc", "count", 4, "prepare"))
    assert client.hget(state_key("wc", "count", 4, "txid"), "prepare") == b"1"
    s2 = RedisKeyValueState(client, "wc", "count", 4)
    assert s2.prepared_txid == 1 and s2.committed_txid == 0 and s2.get("x") == 2
    s2.commit(1)  # recovery decided to roll forward
    assert RedisKeyValueState(client, "wc", "count", 4).get("x") == 2
    assert not client.exists(state_key("wc", "count", 4, "prepare"))
    # The same hash tag for all of a task's keys, its component and index: one Cluster slot, so
    # the commit script is legal there.
    assert {k.decode().split("}")[0] for k in client.keys("topology:{wc:count/4}*")} == {"topology:{wc:count/4"}


def _prepared_topology(client, t: int, prepared_tasks, committed_tasks=()):
    for task in (1, 2, 3):  # indexes 0, 1, 2 of component "count"
        s = RedisKeyValueState(client, "rec", "count", task - 1)
        s.put("v", f"task{task}-t{t - 1}")
        s.prepare_commit(t - 1)
        s.commit(t - 1)
        s.put("v", f"task{task}-t{t}")
        if task in prepared_tasks or task in committed_tasks:
            s.prepare_commit(t)
        if task in committed_tasks:
            s.commit(t)


def _values(client):
    return [RedisKeyValueState(client, "rec", "count", index).get("v") for index in range(3)]


def test_recover_preparing_rolls_back(redis_url):
    client = redis.Redis.from_url(redis_url)
    _prepared_topology(client, 5, prepared_tasks=(1, 2))
    save_checkpoint(client, "rec", CheckPointState(5, PREPARING))
    dry = recover("rec", redis_url, dry_run=True)
    assert dry.decision == "rollback" and client.exists(state_key("rec", "count", 0, "prepare"))
    report = recover("rec", redis_url)
    assert report.decision == "rollback" and report.checkpoint_after == "COMMITTED(4)"
    assert _values(client) == ["task1-t4", "task2-t4", "task3-t4"]
    assert not any(client.exists(state_key("rec", "count", i, "prepare")) for i in range(3))
    assert load_checkpoint(client, "rec") == CheckPointState(4, COMMITTED)
    assert "roll back prepared txid 5" in report.text()


def test_recover_committing_commits(redis_url):
    client = redis.Redis.from_url(redis_url)
    _prepared_topology(client, 5, prepared_tasks=(2, 3), committed_tasks=(1,))
    save_checkpoint(client, "rec", CheckPointState(5, COMMITTING))
    report = recover("rec", redis_url)
    assert report.decision == "commit" and report.checkpoint_after == "COMMITTED(5)"
    assert _values(client) == ["task1-t5", "task2-t5", "task3-t5"]
    assert [t.committed_after for t in report.tasks] == [5, 5, 5]


def test_recover_committed_does_nothing(redis_url):
    client = redis.Redis.from_url(redis_url)
    _prepared_topology(client, 5, prepared_tasks=(), committed_tasks=(1, 2, 3))
    save_checkpoint(client, "rec", CheckPointState(5, COMMITTED))
    report = recover("rec", redis_url)
    assert report.decision == "nothing" and report.checkpoint_after == "COMMITTED(5)"
    assert _values(client) == ["task1-t5", "task2-t5", "task3-t5"]


def test_forced_actions_that_split_txids_are_refused(redis_url):
    client = redis.Redis.from_url(redis_url)
    _prepared_topology(client, 5, prepared_tasks=(1, 2))
    save_checkpoint(client, "rec", CheckPointState(5, PREPARING))
    with pytest.raises(RecoveryRefused, match="task\\(s\\) count/2 never prepared it"):
        recover("rec", redis_url, action="commit")
    client.flushall()
    _prepared_topology(client, 5, prepared_tasks=(2, 3), committed_tasks=(1,))
    save_checkpoint(client, "rec", CheckPointState(5, COMMITTING))
    with pytest.raises(RecoveryRefused, match="task\\(s\\) count/0 already committed it"):
        recover("rec", redis_url, action="rollback")
    assert _values(client) == ["task1-t5", "task2-t5", "task3-t5"]  # refused: nothing changed
    assert client.exists(state_key("rec", "count", 1, "prepare"))


def test_recover_and_reset_refuse_while_live_and_reset_deletes(redis_url):
    client = redis.Redis.from_url(redis_url)
    _prepared_topology(client, 1, prepared_tasks=(1,))
    save_checkpoint(client, "rec", CheckPointState(1, PREPARING))
    client.set(ctl_key("rec", "lease"), 1)
    with pytest.raises(RecoveryRefused, match="live"):
        recover("rec", redis_url)
    with pytest.raises(RecoveryRefused, match="live"):
        reset("rec", redis_url)
    client.delete(ctl_key("rec", "lease"))
    assert reset("rec", redis_url) > 0
    assert client.keys("topology:{rec:*") == []
    assert load_checkpoint(client, "rec") == INITIAL


def test_checkpoint_state_transitions_table():
    t = CheckPointState(7, PREPARING)
    assert (t.next_state(False), t.next_action(False)) == (CheckPointState(7, COMMITTING), "PREPARE")
    assert (t.next_state(True), t.next_action(True)) == (CheckPointState(6, COMMITTED), "ROLLBACK")
    c = CheckPointState(7, COMMITTING)
    assert (c.next_state(False), c.next_action(False)) == (CheckPointState(7, COMMITTED), "COMMIT")
    assert (c.next_state(True), c.next_action(True)) == (CheckPointState(7, COMMITTED), "COMMIT")
    d = CheckPointState(7, COMMITTED)
    assert (d.next_state(False), d.next_action(False)) == (CheckPointState(8, PREPARING), "PREPARE")
    assert d.next_state(True) is d and d.next_action(True) == "INITSTATE"
