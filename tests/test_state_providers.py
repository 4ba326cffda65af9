"""Pluggable state providers (Storm's StateProvider): the provider
config checked at submit (unknown keys and bad class paths named), Storm's Redis keys making
the same connection as a URL, key/value serializers (plain strings readable with HGETALL), and
the stateful word count on a provider written here (tests/sqlite_state.py) through worker
SIGKILLs, with Storm's at-least-once result."""

from __future__ import annotations

import os
import signal
import sqlite3

import pytest
import redis
import sqlite_state
from spark_topologies import slow_stateful_wordcount

from examples.wordcount import load_sentences, true_counts
from state import JsonSerializer, MsgpackSerializer, RedisStateProvider, StateSerializationError, StringSerializer
from state.checkpoint_state import COMMITTED, COMMITTING, INITIAL, PREPARING, CheckPointState
from state.connection import connect, redacted
from state.providers import CheckpointRecord, namespace
from topology_runtime import ConfigError, LocalCluster
from topology_runtime.api.config import resolve_config, state_redis_url
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow  # a word count through worker SIGKILLs: not in make test-fast

SQLITE = "sqlite_state:SQLiteStateProvider"
STRINGS = {"keySerializer": "state.serializer:StringSerializer", "valueSerializer": "state.serializer:StringSerializer"}


class RedisBased(RedisStateProvider):
    """A custom provider derived from the Redis one: still Redis-based (exactly-once allowed)."""


def _conf(provider="redis", config=None, **more):
    return {"topology.state.provider": provider, "topology.state.provider.config": config or {}, **more}


# --- config checked at submit --------------------------------------------------------------------------


def test_unknown_provider_config_keys_are_errors_naming_them():
    with pytest.raises(ConfigError) as e:
        resolve_config(_conf(config={"hots": "x", "jedisPoolConfig": {"host": "h", "prot": 1}}))
    assert "'hots'" in str(e.value) and "'jedisPoolConfig.prot'" in str(e.value)
    assert "topology.state.provider.config" in str(e.value)
    # The memory provider's config is the same (its url is the run's fallback Redis).
    with pytest.raises(ConfigError, match="'urls'"):
        resolve_config(_conf("memory", {"urls": "redis://x"}))
    for bad, named in [({"url": "redis://a:1/0", "host": "b"}, "either 'url'"),
                       ({"port": 1, "jedisPoolConfig": {"port": 2}}, "'port' is given both"),
                       ({"port": "6379"}, "topology.state.provider.config.port"),
                       ({"jedisPoolConfig": {"timeout": -5}}, "topology.state.provider.config.timeout"),
                       ({"url": "http://x"}, "topology.state.provider.config.url"),
                       ({"keySerializer": "state.serializer:StringSerializer",
                         "keySerializerClass": "state.serializer:StringSerializer"}, "same setting")]:
        with pytest.raises(ConfigError, match=named):
            resolve_config(_conf(config=bad))


@pytest.mark.parametrize("spec, named", [
    ("nosuch_module_xyz:Provider", "cannot import module 'nosuch_module_xyz'"),
    ("sqlite_state:NoSuchProvider", "has no 'NoSuchProvider'"),
    ("sqlite_state:connect", "not a class"),
    ("state.serializer:StringSerializer", "no new_state"),
    ("postgres", "expected 'memory' or 'redis'"),
    ("sqlite state:X", "expected a class path"),
])
def test_bad_provider_class_path_is_named(spec, named):
    with pytest.raises(ConfigError, match=named) as e:
        resolve_config(_conf(spec, {"path": "/tmp/x.db"}))
    assert "topology.state.provider" in str(e.value) and (spec in str(e.value) or "module" in str(e.value))


def test_bad_serializer_class_path_is_named_and_provider_checks_its_own_config():
    with pytest.raises(ConfigError, match=r"topology\.state\.provider\.config\.valueSerializer.*state\.serializer:Nope"):
        resolve_config(_conf(config={"valueSerializer": "state.serializer:Nope"}))
    with pytest.raises(ConfigError, match="needs serialize"):
        resolve_config(_conf(config={"keySerializerClass": "sqlite_state:SQLiteStateProvider"}))
    with pytest.raises(ConfigError, match=r"SQLite provider takes 'path'"):
        resolve_config(_conf(SQLITE, {"path": "/tmp/x.db", "url": "redis://x"}))
    assert resolve_config(_conf(SQLITE, {"path": "/tmp/x.db"}))["topology.state.provider"] == SQLITE
    storm = "org.apache.storm.redis.state.RedisKeyValueStateProvider"  # Storm's class name: ours
    assert resolve_config(_conf(storm))["topology.state.provider"] == "redis"


def test_exactly_once_needs_a_redis_based_provider():
    with pytest.raises(ConfigError) as e:
        resolve_config(_conf(SQLITE, {"path": "/tmp/x.db"}, **{"topology.state.exactly.once": True}))
    assert "topology.state.exactly.once" in str(e.value) and "topology.state.provider" in str(e.value)
    assert SQLITE in str(e.value)
    conf = resolve_config(_conf(f"{__name__}:RedisBased", **{"topology.state.exactly.once": True}))
    assert conf["topology.state.exactly.once"]


def test_storm_connection_keys_make_the_connection(redis_url, redis_client):
    pool = {"host": "redis.example", "port": 6380, "database": 3, "password": "p@ss:w/rd", "timeout": 1500}
    for config in ({"jedisPoolConfig": pool}, pool):
        url = state_redis_url(resolve_config(_conf(config=config, **{"redis.url": "redis://elsewhere:1/0"})))
        kw = connect(url).connection_pool.connection_kwargs
        assert (kw["host"], kw["port"], kw["db"], kw["password"]) == ("redis.example", 6380, 3, "p@ss:w/rd")
        assert kw["socket_timeout"] == kw["socket_connect_timeout"] == 1.5
        assert "p@ss" not in redacted(url) and "w/rd" not in redacted(url)
    # Against the real server: host and port from the fixture's URL, the state lands there.
    real = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs
    conf = resolve_config(_conf(config={"jedisPoolConfig": {"host": real["host"], "port": real["port"]}}))
    st = RedisStateProvider().new_state(namespace("storm-keys", "count", 0), conf, None)
    st.put("k", 1)
    st.prepare_commit(0)
    st.commit(0)
    assert redis_client.hlen("topology:{storm-keys:count/0}:state") == 1
    # A custom provider's config is its own: it never names the run's Redis.
    assert state_redis_url(_conf(SQLITE, {"path": "/x", "url": "redis://not-redis:1/0"},
                                 **{"redis.url": redis_url})) == redis_url


# --- serializers ------------------------------------------------------------------------------------------


def test_serializers_round_trip_and_refuse_what_they_cannot_carry(redis_url):
    for ser, values in [(MsgpackSerializer(), [None, True, -3, 2.5, "é", b"\x00", [1, "a"], {"a": [1]}]),
                        (StringSerializer(), ["", "word", "é ü 日本"]),
                        (JsonSerializer(), [None, True, 3, 2.5, "é", [1, "a"], {"a": [1]}])]:
        for v in values:
            raw = ser.serialize(v)
            assert isinstance(raw, bytes) and ser.deserialize(raw) == v
    assert StringSerializer().serialize("word") == b"word" and JsonSerializer().serialize(3) == b"3"
    s = RedisStateProvider().new_state(namespace("ser", "count", 0), _conf(config={"url": redis_url, **STRINGS}), None)
    with pytest.raises(StateSerializationError, match=r"key 'n'.*StringSerializer"):
        s.put("n", 3)


def test_string_serialized_state_is_plain_strings_for_hgetall(redis_url, redis_client):
    conf = resolve_config(_conf(config={"url": redis_url, **STRINGS}))
    st = RedisStateProvider().new_state(namespace("plain", "count", 0), conf, None)
    st.put("hello", "world")
    st.put("café", "crème")
    st.prepare_commit(0)
    st.commit(0)
    # What redis-cli's HGETALL shows: the strings themselves, no msgpack framing.
    assert redis_client.hgetall("topology:{plain:count/0}:state") == {b"hello": b"world", "café".encode(): "crème".encode()}
    again = RedisStateProvider().new_state(namespace("plain", "count", 0), conf, None)
    assert dict(again) == {"hello": "world", "café": "crème"}
    # Strings for words, JSON for counts: a word count any tool can read.
    conf = resolve_config(_conf(config={"url": redis_url, "keySerializer": "state.serializer:StringSerializer",
                                        "valueSerializer": "state.serializer:JsonSerializer"}))
    st = RedisStateProvider().new_state(namespace("plain", "count", 1), conf, None)
    st.put("the", 12)
    st.prepare_commit(0)
    st.commit(0)
    assert redis.Redis.from_url(redis_url, decode_responses=True).hgetall("topology:{plain:count/1}:state") == {"the": "12"}


def test_sqlite_provider_keeps_storms_contract(tmp_path):
    conf = resolve_config(_conf(SQLITE, {"path": str(tmp_path / "s.db")}))
    s = sqlite_state.SQLiteStateProvider().new_state("t:1", conf, None)
    s.put("a", 1)
    s.prepare_commit(1)
    s.put("b", 2)
    s.rollback()
    assert dict(s) == {}
    s.put("a", 1)
    s.prepare_commit(1)
    s.commit(1)
    s.delete("a")
    s.put("c", 3)
    s.prepare_commit(2)  # prepared, never committed: a new state sees it until recovery decides
    assert dict(sqlite_state.SQLiteStateProvider().new_state("t:1", conf, None)) == {"c": 3}
    s.rollback()
    assert dict(sqlite_state.SQLiteStateProvider().new_state("t:1", conf, None)) == {"a": 1}
    # The checkpoint spout's record in such a state (Storm's CheckpointSpout): each save commits.
    rec = CheckpointRecord(sqlite_state.SQLiteStateProvider().new_state("t:9", conf, None))
    assert rec.load() == INITIAL
    rec.save(CheckPointState(0, PREPARING))
    rec.save(CheckPointState(0, COMMITTING))
    again = CheckpointRecord(sqlite_state.SQLiteStateProvider().new_state("t:9", conf, None))
    assert again.load() == CheckPointState(0, COMMITTING)
    again.save(CheckPointState(0, COMMITTED))  # txids keep growing across incarnations
    assert CheckpointRecord(sqlite_state.SQLiteStateProvider().new_state("t:9", conf, None)).load().state == COMMITTED


# --- a real run on the custom provider ------------------------------------------------------------------


def test_custom_provider_wordcount_survives_worker_sigkills(redis_url, redis_client, tmp_path, monkeypatch):
    """The stateful word count with its state in SQLite. A worker SIGKILLs itself between
    PREPARE and COMMIT (its prepared rows must survive); then the worker hosting
    $checkpointspout is SIGKILLed (its record must come back from the provider). Both are
    restarted, and every word ends counted at least its true count, nothing left prepared,
    nothing in Redis' state: it all went through the provider."""
    db = str(tmp_path / "state.db")
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 2000))
    marker = tmp_path / "fired"
    monkeypatch.setenv("TOPOLOGY_FAULT", "between:2")
    monkeypatch.setenv("TOPOLOGY_FAULT_ONCE", str(marker))
    conf = {"redis.url": redis_url, **_conf(SQLITE, {"path": db}), "topology.state.checkpoint.interval.ms": 200,
            "topology.message.timeout.secs": 3, "topology.max.spout.pending": 200}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("sqlite-wc", slow_stateful_wordcount(), conf)
        cp_task = run.plan.component_tasks["$checkpointspout"][0]
        cp_ns = namespace("sqlite-wc", "$checkpointspout", 0)

        def record_txid() -> int:
            return sqlite_state.committed(db, "sqlite-wc").get(cp_ns, {}).get("__state", [0, -1, ""])[1]

        assert wait_for(lambda: run.status().restarts >= 1, 60) and marker.exists()
        txid = record_txid()
        assert wait_for(lambda: record_txid() >= txid + 2, 60)  # checkpoints go on after the restart
        assert run.status().state == "running", "the run ended before the second kill"
        os.kill(run.pids[run.plan.task_worker[cp_task]], signal.SIGKILL)
        status = run.wait(120)
    assert status.state == "completed", status.error
    assert status.restarts >= 2
    assert not status.errors, status.errors  # e.g. a checkpoint record that went back: its txids refused
    state = sqlite_state.committed(db, "sqlite-wc")
    counts: dict[str, int] = {}
    for index in range(len(run.plan.component_tasks["count"])):
        for w, n in state.get(namespace("sqlite-wc", "count", index), {}).items():
            counts[w] = counts.get(w, 0) + n
    short = {w: (counts.get(w, 0), n) for w, n in truth.items() if counts.get(w, 0) < n}
    assert not short, f"under-counted: {list(short.items())[:5]}"
    assert sqlite_state.prepared_rows(db) == 0
    seq, final_txid, cp_state = state[cp_ns]["__state"]
    assert cp_state == "COMMITTED" and final_txid > txid + 2  # resumed from the record, not from scratch
    assert redis_client.keys("topology:{sqlite-wc:*}:state") == []  # the state went through the provider
    with sqlite3.connect(db) as conn:  # one txid row per stateful task and the checkpoint spout
        assert conn.execute("SELECT COUNT(*) FROM txids WHERE ns LIKE 'sqlite-wc:%'").fetchone()[0] == 3
