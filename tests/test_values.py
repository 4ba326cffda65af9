"""TransactionalValue / OpaqueValue rules (Trident's StateTest) and their Redis map."""

from __future__ import annotations

import pytest
import redis

from state.serializer import StateSerializationError
from state.values import OpaqueValue, TransactionalValue, ValueMap


def test_opaque_value_get_and_update():
    v = OpaqueValue(2, "curr", "prev")
    assert v.get(None) == "curr" and v.get(3) == "curr" and v.get(2) == "prev"
    with pytest.raises(ValueError, match="behind"):
        v.get(1)
    assert v.update(3, lambda x: x + "+") == OpaqueValue(3, "curr+", "curr")  # newer: curr -> prev
    assert v.update(2, lambda x: x + "+") == OpaqueValue(2, "prev+", "prev")  # replay: from prev
    with pytest.raises(ValueError, match="older"):
        v.update(1, lambda x: x)


def test_transactional_value_skips_a_replayed_txid():
    v = TransactionalValue(1, 10)
    assert v.update(1, lambda x: x + 5) is v
    assert v.update(2, lambda x: x + 5) == TransactionalValue(2, 15)


@pytest.mark.parametrize("opaque", [False, True])
def test_value_map_counts_exactly_under_replays(redis_url, opaque):
    m = ValueMap(redis.Redis.from_url(redis_url), "counts", opaque=opaque)
    add = lambda n: lambda x: (x or 0) + n  # noqa: E731
    m.multi_update(1, {"a": add(2), "b": add(1)})
    m.multi_update(1, {"a": add(2), "b": add(1)})  # batch 1 replayed (identical)
    m.multi_update(2, {"a": add(3)})
    if opaque:
        m.multi_update(2, {"a": add(4)})  # opaque replay of batch 2 with different content
        assert m.get(["a"])["a"] == OpaqueValue(2, 6, 2)
    else:
        assert m.get(["a", "b"]) == {"a": TransactionalValue(2, 5), "b": TransactionalValue(1, 1)}


def test_opaque_writer_resets_keys_an_earlier_attempt_of_the_txid_wrote(redis_url):
    """An opaque replay of txid 2 without "b": the first attempt's count of "b" is undone, so
    when b's entry is counted in a later batch it is counted once."""
    m = ValueMap(redis.Redis.from_url(redis_url), "counts", opaque=True)
    add = lambda n: lambda x: (x or 0) + n  # noqa: E731
    m.multi_update(1, {"a": add(1), "b": add(1)}, writer="w0")
    m.multi_update(2, {"a": add(1), "b": add(5)}, writer="w0")  # attempt 1 of txid 2, not committed
    m.multi_update(2, {"a": add(2)}, writer="w0")  # the replay no longer holds b's entries
    m.multi_update(2, {}, writer="w1")  # another writer's empty batch changes nothing of w0's
    assert m.get(["a", "b"]) == {"a": OpaqueValue(2, 3, 1), "b": OpaqueValue(2, 1, 1)}
    m.multi_update(3, {"b": add(5)}, writer="w0")
    assert m.get(["b"])["b"] == OpaqueValue(3, 6, 1)


def test_multi_add_counts_once_per_txid_and_matches_multi_update(redis_url):
    client = redis.Redis.from_url(redis_url)
    m = ValueMap(client, "added")
    client.delete("added")
    assert m.multi_add(1, {"a": 2, "b": 1, ("k", 1): 5}) == 3
    assert m.multi_add(1, {"a": 2, "b": 1, ("k", 1): 5}) == 0  # batch 1 replayed: skipped
    assert m.multi_add(2, {"a": 3, "c": 0.5}) == 2
    m.multi_update(3, {"a": lambda v: v + 10})  # both paths share one stored format
    assert m.get(["a", "b", ("k", 1), "c"]) == {
        "a": TransactionalValue(3, 15), "b": TransactionalValue(1, 1),
        ("k", 1): TransactionalValue(1, 5), "c": TransactionalValue(2, 0.5)}
    assert type(m.get(["a"])["a"].value) is int  # integral counts stay ints
    assert m.multi_add(4, {}) == 0


class Opaque:
    """A key type the wire cannot carry."""


def test_multi_add_rejects_bad_input_naming_the_key_and_writes_nothing(redis_url):
    client = redis.Redis.from_url(redis_url)
    m = ValueMap(client, "added-bad")
    client.delete("added-bad")
    m.multi_update(1, {"text": lambda v: "not a number"})
    with pytest.raises(ValueError, match="'n'.*int or float"):
        m.multi_add(2, {"a": 1, "n": "1"})
    with pytest.raises(ValueError, match="'text'.*non-numeric"):
        m.multi_add(2, {"a": 1, "text": 1})
    assert m.get(["a"])["a"] is None  # nothing of the failed batch was written
    with pytest.raises(ValueError, match="2\\*\\*53"):
        m.multi_add(2, {"a": 2**60})
    with pytest.raises(StateSerializationError, match="key.*Opaque.*cannot be serialized"):  # a key msgpack cannot carry
        m.multi_add(2, {"a": 1, Opaque(): 1})
    assert m.get(["a"])["a"] is None


def test_multi_add_on_an_opaque_map_follows_the_opaque_rule(redis_url):
    client = redis.Redis.from_url(redis_url)
    m = ValueMap(client, "added-opaque", opaque=True)
    client.delete("added-opaque")
    m.multi_add(1, {"a": 1})
    m.multi_add(2, {"a": 5})
    m.multi_add(2, {"a": 7})  # an opaque replay of txid 2 recomputes from prev
    assert m.get(["a"])["a"] == OpaqueValue(2, 8, 1)


def test_multi_add_of_thousands_of_keys_spans_chunks_and_stays_all_or_nothing(redis_url):
    """More keys than one Lua unpack() takes (2,000): every chunk is read and written, a replay
    of the txid is skipped as a whole, and a bad value in the last chunk writes nothing."""
    client = redis.Redis.from_url(redis_url)
    m = ValueMap(client, "added-many")
    client.delete("added-many")
    keys = [f"w{i}" for i in range(4500)]
    assert m.multi_add(1, {k: i for i, k in enumerate(keys)}) == 4500
    assert m.multi_add(1, {k: 1 for k in keys}) == 0  # a replay of txid 1
    assert m.multi_add(2, {k: 1 for k in keys[::2]}) == 2250
    got = m.get(keys)
    assert all(got[k] == TransactionalValue(2 if i % 2 == 0 else 1, i + (1 if i % 2 == 0 else 0))
               for i, k in enumerate(keys))
    m2 = ValueMap(client, "added-many")
    m2.multi_update(3, {"late": lambda v: "text"})
    with pytest.raises(ValueError, match="'late'.*non-numeric"):
        m2.multi_add(4, {**{k: 1 for k in keys}, "late": 1})
    assert m.get(keys[:1])[keys[0]] == TransactionalValue(2, 1)  # the first chunk was not written


@pytest.mark.parametrize("bad", [True, float("nan"), float("inf"), None])
def test_multi_add_rejects_bools_nan_inf_and_none(redis_url, bad):
    m = ValueMap(redis.Redis.from_url(redis_url), "added-odd")
    with pytest.raises(ValueError, match="'b'.*int or float"):
        m.multi_add(1, {"a": 1, "b": bad})
