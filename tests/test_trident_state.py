"""Trident map state: the rules of Storm's StateTest and the state doc, over memory and Redis."""

from __future__ import annotations

import pickle

import pytest
from redis.crc import key_slot

from state.connection import connect
from state.map_state import (
    BackingMap,
    MemoryBackingMap,
    MemoryMap,
    MemoryMapState,
    NonTransactionalMap,
    OpaqueMap,
    SnapshottableMap,
    StateFactory,
    StateType,
    TransactionalMap,
)
from state.redis_map_state import RedisMapState, partition_key
from state.values import OpaqueValue, TransactionalValue


def count(n):
    """Storm's CombinerValueUpdater(Count, n): ``stored == null ? n : stored + n``."""
    return lambda stored: n if stored is None else stored + n


def u(m, key, n):
    return m.multi_update([[key]], [count(n)])[0]


def get(m, key):
    return m.multi_get([[key]])[0]


class CountingBacking:
    """A memory backing that records every call it gets."""

    def __init__(self):
        self.inner = MemoryBackingMap()
        self.calls = []

    def multi_get(self, keys):
        self.calls.append(("get", [list(k) for k in keys]))
        return self.inner.multi_get(keys)

    def multi_put(self, keys, values):
        self.calls.append(("put", [list(k) for k in keys]))
        self.inner.multi_put(keys, values)


# --- T11: StateTest ---------------------------------------------------------------------------

def test_opaque_value():
    v = OpaqueValue(8, "v1", "v0")
    assert v.get(None) == "v1" and v.get(100) == "v1" and v.get(9) == "v1"
    assert v.get(8) == "v0"
    with pytest.raises(ValueError):
        v.get(7)
    assert v.update(8, lambda _: "v2")[1:] == ("v2", "v0")
    assert v.update(9, lambda _: "v2")[1:] == ("v2", "v1")


def test_opaque_map():
    m = OpaqueMap(MemoryBackingMap())
    m.begin_commit(1)
    assert get(m, "a") is None
    assert u(m, "a", 1) == 1
    assert get(m, "a") == 1
    assert u(m, "a", 2) == 3
    assert get(m, "a") == 3
    m.commit(1)

    m.begin_commit(1)  # replay: the earlier attempt's contribution is discarded
    assert get(m, "a") is None
    assert u(m, "a", 2) == 2
    m.commit(1)

    m.begin_commit(2)
    assert get(m, "a") == 2
    assert u(m, "a", 3) == 5
    assert u(m, "a", 1) == 6
    m.commit(2)


def test_transactional_map():
    m = TransactionalMap(MemoryBackingMap())
    m.begin_commit(1)
    assert get(m, "a") is None
    assert u(m, "a", 1) == 1
    assert u(m, "a", 2) == 3
    m.commit(1)

    m.begin_commit(1)  # replay of the identical batch: already in the state
    assert get(m, "a") == 3
    assert u(m, "a", 1) == 3
    assert u(m, "a", 2) == 3
    m.commit(1)

    m.begin_commit(2)
    assert get(m, "a") == 3
    assert u(m, "a", 3) == 6
    assert u(m, "a", 1) == 7
    m.commit(2)


def test_memory_map_state_remove():
    state = MemoryMapState().make_state({}, 0, 1)
    state.begin_commit(1)
    state.multi_put([["a"], ["b"]], [1, 2])
    state.commit(1)

    state.begin_commit(2)
    state.multi_remove([["a"]])
    assert get(state, "a") is None
    assert get(state, "b") == 2
    state.commit(2)

    state.begin_commit(2)  # replay: the opaque prev is visible again
    assert get(state, "a") == 1
    assert get(state, "b") == 2
    state.multi_remove([["a"]])
    state.commit(2)

    state.begin_commit(3)  # a new txid: the removal is real now
    assert get(state, "a") is None
    assert get(state, "b") == 2
    state.commit(3)
    assert sorted(state.get_tuples()) == [["b", 2]]


# --- T16: the state doc's examples ------------------------------------------------------------

def test_doc_transactional_example():
    backing = MemoryBackingMap()
    backing.multi_put([["man"], ["dog"], ["apple"]],
                      [TransactionalValue(1, 3), TransactionalValue(3, 4), TransactionalValue(2, 10)])
    m = TransactionalMap(backing)
    m.begin_commit(3)
    # batch [man, man, dog], pre-aggregated to man+2, dog+1
    assert m.multi_update([["man"], ["dog"]], [count(2), count(1)]) == [5, 4]
    m.commit(3)
    assert backing.multi_get([["man"], ["dog"], ["apple"]]) == [
        TransactionalValue(3, 5), TransactionalValue(3, 4), TransactionalValue(2, 10)]


@pytest.mark.parametrize(("txid", "expected"), [(3, OpaqueValue(3, 6, 4)), (2, OpaqueValue(2, 3, 1))])
def test_doc_opaque_example(txid, expected):
    backing = MemoryBackingMap()
    backing.multi_put([["k"]], [OpaqueValue(2, 4, 1)])
    m = OpaqueMap(backing)
    m.begin_commit(txid)
    m.multi_update([["k"]], [count(2)])
    m.commit(txid)
    assert backing.multi_get([["k"]]) == [expected]


# --- the rest of the rules --------------------------------------------------------------------

@pytest.mark.parametrize("kind", [OpaqueMap, TransactionalMap, NonTransactionalMap])
def test_one_backing_read_and_write_per_call(kind):
    backing = CountingBacking()
    m = kind(backing)
    keys = [["a"], ["b"], ["c"]]
    m.begin_commit(1)
    assert m.multi_update(keys, [count(1), count(2), count(3)]) == [1, 2, 3]
    assert backing.calls == [("get", keys), ("put", keys)]
    backing.calls.clear()
    assert m.multi_get(keys) == [1, 2, 3]
    assert backing.calls == [("get", keys)]
    backing.calls.clear()
    m.multi_put(keys, [7, 8, 9])
    assert [c[0] for c in backing.calls] == (["get", "put"] if kind is OpaqueMap else ["put"])
    m.commit(1)


def test_transactional_map_writes_only_changed_keys():
    backing = CountingBacking()
    m = TransactionalMap(backing)
    m.begin_commit(1)
    m.multi_update([["a"]], [count(1)])
    m.commit(1)
    backing.calls.clear()
    m.begin_commit(1)  # a replays, b is new
    assert m.multi_update([["a"], ["b"]], [count(1), count(5)]) == [1, 5]
    assert backing.calls == [("get", [["a"], ["b"]]), ("put", [["b"]])]
    backing.calls.clear()
    assert m.multi_update([["a"]], [count(1)]) == [1]  # all skipped: no write at all
    assert backing.calls == [("get", [["a"]])]
    m.commit(1)


def test_non_transactional_map_double_applies_a_replay():
    m = NonTransactionalMap(MemoryBackingMap())
    for _ in range(2):
        m.begin_commit(1)
        u(m, "a", 3)
        m.commit(1)
    assert get(m, "a") == 6


def test_opaque_replay_with_different_content_and_behind_batch():
    m = OpaqueMap(MemoryBackingMap())
    m.begin_commit(1)
    m.multi_update([["a"], ["b"]], [count(1), count(1)])
    m.commit(1)
    m.begin_commit(2)
    m.multi_update([["a"], ["b"]], [count(10), count(10)])
    m.commit(2)
    m.begin_commit(2)  # the opaque replay of 2 holds only a
    m.multi_update([["a"]], [count(5)])
    m.commit(2)
    # b, which only the abandoned attempt wrote, goes back to its value before txid 2 (Storm's
    # map kept 11: the attempt's count, whose tuples come again in a later batch)
    assert m.multi_get([["a"], ["b"]]) == [6, 1]
    m.begin_commit(1)
    with pytest.raises(ValueError, match="behind"):
        m.multi_get([["a"]])


def test_txid_none_is_a_batch_without_transaction():
    backing = MemoryBackingMap()
    om = OpaqueMap(backing)
    om.begin_commit(5)
    u(om, "a", 1)
    om.commit(5)
    om.begin_commit(None)
    assert get(om, "a") == 1
    assert u(om, "a", 2) == 3
    om.commit(None)
    assert backing.multi_get([["a"]]) == [OpaqueValue(None, 3, 1)]
    om.begin_commit(6)  # a value written without a txid counts as older than any batch
    assert u(om, "a", 1) == 4
    om.commit(6)

    tm = TransactionalMap(MemoryBackingMap())
    for _ in range(2):  # never skipped
        tm.begin_commit(None)
        u(tm, "a", 1)
        tm.commit(None)
    assert get(tm, "a") == 2


def test_snapshottable_map():
    backing = MemoryBackingMap()
    s = SnapshottableMap(OpaqueMap(backing))
    s.begin_commit(1)
    assert s.get() is None
    assert s.update(count(4)) == 4
    s.commit(1)
    s.begin_commit(2)
    s.set(10)
    assert s.get() == 10
    s.commit(2)
    assert backing.multi_get([["$GLOBAL"]]) == [OpaqueValue(2, 10, 4)]
    assert SnapshottableMap(OpaqueMap(backing), ["other"]).get() is None


def test_memory_map_state_factory():
    factory = MemoryMapState()
    assert factory.state_type == StateType.OPAQUE and isinstance(factory, StateFactory)
    copy = pickle.loads(pickle.dumps(factory))
    s0 = factory.make_state({}, 0, 2)
    s0.begin_commit(1)
    s0.multi_update([["the"], ["man"]], [count(2), count(1)])
    s0.update(count(3))
    s0.commit(1)
    again = copy.make_state({}, 0, 2)  # same factory id, same partition: same map
    assert again.multi_get([["the"], ["man"]]) == [2, 1] and again.get() == 3
    assert sorted(map(tuple, again.get_tuples())) == [("$GLOBAL", 3), ("man", 1), ("the", 2)]
    assert factory.make_state({}, 1, 2).multi_get([["the"]]) == [None]  # partitions are apart
    assert MemoryMapState().make_state({}, 0, 2).multi_get([["the"]]) == [None]  # factories too


def test_keys_with_several_fields_and_unhashable_values():
    m = OpaqueMap(MemoryBackingMap())
    m.begin_commit(1)
    m.multi_update([["a", 1], ["a", [1, 2]]], [count(1), count(2)])
    assert m.multi_get([("a", 1), ["a", [1, 2]], ["a", 2]]) == [1, 2, None]
    m.commit(1)


def test_mismatched_lengths_are_refused():
    m = OpaqueMap(MemoryBackingMap())
    with pytest.raises(ValueError, match="2 keys but 1"):
        m.multi_update([["a"], ["b"]], [count(1)])
    assert isinstance(MemoryBackingMap(), BackingMap)


# --- RedisMapState ----------------------------------------------------------------------------

KINDS = [StateType.TRANSACTIONAL, StateType.OPAQUE, StateType.NON_TRANSACTIONAL]


def factory_for(kind, **kw):
    return {StateType.TRANSACTIONAL: RedisMapState.transactional, StateType.OPAQUE: RedisMapState.opaque,
            StateType.NON_TRANSACTIONAL: RedisMapState.non_transactional}[kind](**kw)


def counted(monkeypatch, state):
    """Names of the Redis commands ``state`` sends from now on."""
    client = state.backing.client
    sent = []
    real = client.execute_command

    def execute_command(*args, **options):
        sent.append(str(args[0]).upper())
        return real(*args, **options)

    monkeypatch.setattr(client, "execute_command", execute_command)
    return sent


@pytest.mark.parametrize("kind", KINDS)
def test_redis_round_trip_and_replay(redis_url, monkeypatch, kind):
    factory = factory_for(kind, key_prefix="wc")
    assert factory.state_type == kind
    factory = pickle.loads(pickle.dumps(factory))  # shipped to the workers
    state = factory.make_state({"redis.url": redis_url}, 0, 2)
    sent = counted(monkeypatch, state)
    state.begin_commit(1)
    assert state.multi_update([["the"], ["man"], [7]], [count(2), count(1), count(1)]) == [2, 1, 1]
    assert sent == ["HMGET", "HSET"]
    state.commit(1)

    state.begin_commit(2)
    assert state.multi_update([["the"], ["moon"]], [count(2), count(1)]) == [4, 1]
    state.commit(2)
    sent.clear()
    state.begin_commit(2)  # batch 2 replayed, with a different content for "the"
    replayed = state.multi_update([["the"], ["moon"]], [count(5), count(1)])
    state.commit(2)
    # transactional: nothing changed, no write; opaque: txid 2 was written before, so its other
    # entries are looked up (once per replay after a failed commit)
    assert sent == {StateType.TRANSACTIONAL: ["HMGET"], StateType.OPAQUE: ["HMGET", "HSET", "HSCAN"],
                    StateType.NON_TRANSACTIONAL: ["HMGET", "HSET"]}[kind]
    assert replayed == {StateType.TRANSACTIONAL: [4, 1],  # skipped: the batch is in the state
                        StateType.OPAQUE: [7, 1],  # recomputed from prev (2)
                        StateType.NON_TRANSACTIONAL: [9, 2]}[kind]  # applied twice
    sent.clear()
    assert state.multi_get([["the"], ["man"], [7], ["absent"]]) == [replayed[0], 1, 1, None]
    assert sent == ["HMGET"]
    state.close()

    fresh = factory.make_state({"redis.url": redis_url}, 0, 2)  # a new client sees it all
    assert fresh.multi_get([["the"], ["moon"], [7]]) == [replayed[0], replayed[1], 1]
    assert sorted(fresh.get_tuples(), key=repr) == sorted(
        [["the", replayed[0]], ["man", 1], [7, 1], ["moon", replayed[1]]], key=repr)
    assert factory.make_state({"redis.url": redis_url}, 1, 2).multi_get([["the"]]) == [None]
    fresh.close()


def test_redis_stored_format(redis_url, redis_client):
    import msgpack

    for kind in KINDS:
        state = factory_for(kind, url=redis_url, key_prefix=f"fmt-{kind}").make_state(None, 3, 4)
        state.begin_commit(5)
        state.multi_update([["k", 1]], [count(2)])
        state.commit(5)
        state.begin_commit(6)
        state.multi_put([["k", 1], ["s"]], [3, "text"])
        state.commit(6)
        raw = redis_client.hgetall(partition_key(f"fmt-{kind}", 3))
        decoded = {tuple(msgpack.unpackb(f, raw=False)): msgpack.unpackb(v, raw=False) for f, v in raw.items()}
        assert decoded == {StateType.TRANSACTIONAL: {("k", 1): [6, 3], ("s",): [6, "text"]},
                           StateType.OPAQUE: {("k", 1): [6, 3, 2], ("s",): [6, "text", None],
                                              ("$last-txid",): [6, None, None]},
                           StateType.NON_TRANSACTIONAL: {("k", 1): 3, ("s",): "text"}}[kind]
        got = state.multi_get([["k", 1], ["s"]])
        assert got == [3, "text"] and type(got[0]) is int and type(got[1]) is str
        state.close()


def test_redis_global_value_and_empty_calls(redis_url, monkeypatch):
    state = RedisMapState.opaque(redis_url).make_state({}, 0, 1)
    sent = counted(monkeypatch, state)
    state.begin_commit(1)
    assert state.multi_update([], []) == [] and state.multi_get([]) == []
    assert sent == []  # nothing to read or write: no round trip (HMGET takes at least one field)
    assert state.update(count(5)) == 5
    state.commit(1)
    state.begin_commit(2)
    state.set(9)
    state.commit(2)
    assert state.get() == 9
    state.close()


def test_redis_partition_keys_share_one_slot():
    for prefix in ("trident", "wordCounts", "a:b"):
        for index in range(8):
            key = partition_key(prefix, index)
            assert key == f"{{{prefix}:{index}}}:map"
            assert key_slot(key.encode()) == key_slot(f"{{{prefix}:{index}}}:anything-else".encode())
    slots = {key_slot(partition_key("trident", i).encode()) for i in range(8)}
    assert len(slots) > 1  # partitions spread over the cluster


def test_redis_map_state_refusals():
    with pytest.raises(ValueError, match="redis.url"):
        RedisMapState.opaque().make_state({}, 0, 1)
    with pytest.raises(ValueError, match="redis.url"):
        RedisMapState.transactional().make_state(None, 0, 1)
    with pytest.raises(ValueError, match="braces"):
        RedisMapState.opaque(key_prefix="a{b}")
    with pytest.raises(ValueError, match="state_type"):
        RedisMapState("exactly-once")
    assert "secret" not in repr(RedisMapState.opaque("redis://:secret@localhost:6379/0"))


def test_redis_cluster_round_trip(cluster_url, monkeypatch):
    factory = RedisMapState.opaque(key_prefix="counts")
    states = [factory.make_state({"redis.url": cluster_url}, i, 4) for i in range(4)]
    for i, s in enumerate(states):
        sent = counted(monkeypatch, s)
        s.begin_commit(1)
        s.multi_update([["w", i], ["x"]], [count(i + 1), count(10)])
        s.commit(1)
        assert sent == ["HMGET", "HSET"]
        s.begin_commit(1)  # replay
        s.multi_update([["w", i], ["x"]], [count(i + 1), count(10)])
        s.commit(1)
    for i, s in enumerate(states):
        assert s.multi_get([["w", i], ["x"]]) == [i + 1, 10]
        assert sorted(s.get_tuples(), key=repr) == sorted([["w", i, i + 1], ["x", 10]], key=repr)
        s.close()
    client = connect(cluster_url)
    owners = {client.keyslot(partition_key("counts", i)) for i in range(4)}
    assert len(owners) == 4 and all(client.exists(partition_key("counts", i)) for i in range(4))
    client.close()


def test_opaque_replay_undoes_what_the_abandoned_attempt_alone_wrote():
    """A commit-phase failure after this partition wrote txid 2: the replay touches other keys,
    or none at all; entries only the abandoned attempt wrote go back to their value before 2."""
    for replay_keys in ([["a"]], []):
        backing = MemoryBackingMap()
        m = MemoryMap(backing)
        m.begin_commit(1)
        m.multi_update([["a"], ["b"]], [count(1), count(1)])
        m.commit(1)
        m.begin_commit(2)  # the first attempt: written, then the commit fails
        m.multi_update([["a"], ["b"], ["new"]], [count(10), count(10), count(3)])
        m.begin_commit(2)  # the replay
        if replay_keys:
            m.multi_update(replay_keys, [count(5)])
        m.commit(2)
        a = 6 if replay_keys else 1
        assert m.multi_get([["a"], ["b"], ["new"]]) == [a, 1, None]
        assert sorted(m.get_tuples()) == [["a", a], ["b", 1]]  # neither "new" nor the txid record
        m.begin_commit(3)  # and the next batch builds on those values
        assert m.multi_update([["b"], ["new"]], [count(1), count(1)]) == [2, 1]
        m.commit(3)
