"""TransactionalState (state/transactional.py) against a real Redis: every accessor, the
start-up cleanup, the opaque commit's atomicity, and that every record shares the {TX:ctl} tag."""

from __future__ import annotations

import threading
import uuid

import pytest
import redis

from state.layout import tx_key
from state.transactional import TransactionalState, current_key, current_txid, parse_txid


@pytest.fixture
def tx(redis_url):
    state = TransactionalState.from_url(redis_url, f"txs-{uuid.uuid4().hex[:8]}")
    yield state
    state.client.close()


def _keys(state: TransactionalState) -> set[str]:
    return set(state.client.scan_iter(match=f"topology:{{{state.tx_id}:ctl}}:*"))


def test_current_txid_defaults_to_none_and_is_set(tx):
    assert tx.current_txid() is None
    assert current_txid(tx.client, tx.tx_id) is None
    tx.set_current_txid(7)
    assert tx.current_txid() == 7
    assert current_txid(tx.client, tx.tx_id) == 7
    assert current_key(tx.tx_id) == tx_key(tx.tx_id, "current") == f"topology:{{{tx.tx_id}:ctl}}:tx:current"
    assert parse_txid(b"12") == 12 and parse_txid(None) is None


def test_read_batch_new_then_recorded(tx):
    assert tx.read_batch(1, []) == (None, [])  # no partitions: only the current txid is read
    assert tx.read_batch(1, [0, 2]) == (None, [(False, None), (False, None)])
    tx.record_batch(1, {0: [0, 3], 2: [0, 5]})
    cur, parts = tx.read_batch(1, [0, 2])
    assert cur is None and parts == [(True, [0, 3]), (True, [0, 5])]  # a replay: exactly that batch
    # txid 2 is new: each partition starts after the newest batch (last-meta)
    assert tx.read_batch(2, [2, 0]) == (None, [(False, [0, 5]), (False, [0, 3])])
    assert tx.last_metas() == {0: [0, 3], 2: [0, 5]}


def test_recorded_null_meta_is_still_a_replay(tx):
    tx.record_batch(1, {0: None})
    assert tx.read_batch(1, [0]) == (None, [(True, None)])


def test_record_batch_deletes_metadata_before_the_committed_txid(tx):
    tx.record_batch(1, {0: [0, 1]})
    tx.record_batch(2, {0: [1, 1]})
    tx.record_batch(3, {0: [2, 1]}, committed=2)  # batch tuple of txid 3 says 2 is committed
    assert not tx.client.exists(tx.meta_key(1))
    assert tx.client.exists(tx.meta_key(2)) and tx.client.exists(tx.meta_key(3))
    assert tx.last_metas() == {0: [2, 1]}
    tx.record_batch(4, {}, committed=1)  # nothing new, nothing before txid 1: no writes
    assert not tx.client.exists(tx.meta_key(4))


def test_commit_moves_current_and_drops_the_batch(tx):
    tx.record_batch(1, {0: [0, 1]})
    tx.commit(1, 2)
    assert tx.current_txid() == 2
    assert not tx.client.exists(tx.meta_key(1))
    assert tx.last_metas() == {0: [0, 1]}  # where the next batch starts stays


def test_leftovers_scan_and_cleanup(tx):
    for t in (1, 2, 3, 5, 6):
        tx.record_batch(t, {0: [t, 1]})
    for t in (2, 4):
        tx.record_opaque_batch(t, {0: [9, [t], None]})
    tx.client.set(tx_key(tx.tx_id, "meta:notanumber"), "x")  # not a per-txid record: ignored
    found = sorted((kind, t) for kind, t, _ in tx.scan_metas())
    assert found == [("meta", 1), ("meta", 2), ("meta", 3), ("meta", 5), ("meta", 6), ("ometa", 2), ("ometa", 4)]
    # current 4: before 3 goes; 3 (the committed one) stays; the partitioned txids >= 4 recorded
    assert tx.cleanup(4) == [5, 6]
    left = sorted((kind, t) for kind, t, _ in tx.scan_metas())
    assert left == [("meta", 3), ("meta", 5), ("meta", 6), ("ometa", 4)]
    assert tx.cleanup(1) == [3, 5, 6]  # nothing before 0 to delete


def test_opaque_records(tx):
    assert tx.read_opaque_batch(1, [0, 1]) == (1, [None, None], [None, None])
    tx.record_opaque_batch(1, {0: [11, [0, 4], None], 1: [11, [0, 2], None]})
    cur, committed, prev = tx.read_opaque_batch(2, [1, 0])
    assert cur == 1 and committed == [None, None] and prev == [[11, [0, 2], None], [11, [0, 4], None]]
    tx.record_opaque_batch(2, {0: [12, [4, 1], [1, 11]]})
    assert tx.opaque_metas([1, 2]) == ({}, [{0: [11, [0, 4], None], 1: [11, [0, 2], None]},
                                           {0: [12, [4, 1], [1, 11]]}])


def test_opaque_commit_moves_current_and_committed_meta_together(tx):
    tx.set_current_txid(1)
    tx.record_opaque_batch(1, {0: [11, [0, 4], None], 1: [11, [0, 2], None]})
    seen = []

    def decide(entries, committed):
        seen.append((entries, committed))
        return {p: [1, e[0], e[1]] for p, e in entries.items()}

    assert tx.commit_opaque(1, decide) is True
    assert seen == [({0: [11, [0, 4], None], 1: [11, [0, 2], None]}, {})]
    assert tx.current_txid() == 2
    assert not tx.client.exists(tx.ometa_key(1))
    assert tx.opaque_metas([]) == ({0: [1, 11, [0, 4]], 1: [1, 11, [0, 2]]}, [])
    assert tx.read_opaque_batch(2, [0]) == (2, [[1, 11, [0, 4]]], [None])


def test_opaque_commit_refused_writes_nothing(tx):
    tx.set_current_txid(3)
    tx.record_opaque_batch(3, {0: [5, [0, 1], None]})
    assert tx.commit_opaque(3, lambda entries, committed: None) is False
    assert tx.current_txid() == 3
    assert tx.client.exists(tx.ometa_key(3))
    assert tx.opaque_metas([]) == ({}, [])


def test_opaque_commit_with_no_entries_still_moves_current(tx):
    assert tx.commit_opaque(1, lambda entries, committed: {}) is True
    assert tx.current_txid() == 2 and tx.opaque_metas([]) == ({}, [])


def test_opaque_commit_decides_again_when_a_record_changes(tx, redis_url):
    """A write to a watched record between the reads and the MULTI: the transaction is retried
    with the new contents, never applied on the stale ones."""
    tx.record_opaque_batch(1, {0: [1, [0, 1], None]})
    other = redis.Redis.from_url(redis_url, decode_responses=True)
    calls = []

    def decide(entries, committed):
        calls.append(entries)
        if len(calls) == 1:  # another client rewrites the attempt's record meanwhile
            other.hset(tx.ometa_key(1), "0", '[2, [0, 9], null]')
        return {p: [1, e[0], e[1]] for p, e in entries.items()}

    try:
        assert tx.commit_opaque(1, decide) is True
    finally:
        other.close()
    assert calls == [{0: [1, [0, 1], None]}, {0: [2, [0, 9], None]}]
    assert tx.opaque_metas([]) == ({0: [1, 2, [0, 9]]}, [])
    assert tx.current_txid() == 2


def test_opaque_commit_is_atomic_for_concurrent_readers(tx, redis_url):
    """A reader's snapshot (read_opaque_batch: one MULTI) never sees current moved without the
    committed metadata, or the other way round."""
    tx.set_current_txid(1)
    other = TransactionalState.from_url(redis_url, tx.tx_id)
    stop = threading.Event()
    torn = []

    def read():
        while not stop.is_set():
            cur, committed, _ = other.read_opaque_batch(1, [0])
            c = committed[0]
            if (c is None) != (cur == 1) or (c is not None and c[0] != cur - 1):
                torn.append((cur, c))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for t in range(1, 200):
            tx.record_opaque_batch(t, {0: [t, [t], None]})
            assert tx.commit_opaque(t, lambda entries, committed, t=t: {p: [t, e[0], e[1]]
                                                                          for p, e in entries.items()})
    finally:
        stop.set()
        reader.join()
        other.client.close()
    assert torn == []
    assert tx.current_txid() == 200


def test_every_record_shares_the_tx_hash_tag(tx):
    tx.set_current_txid(2)
    tx.record_batch(2, {0: [0, 1]})
    tx.record_opaque_batch(2, {0: [1, [0], None]})
    tx.commit_opaque(2, lambda entries, committed: {0: [2, 1, [0]]})
    keys = _keys(tx) | {tx.meta_key(9), tx.ometa_key(9), current_key(tx.tx_id)}
    names = {k.split("}:", 1)[1] for k in keys}
    assert {"tx:current", "tx:meta:2", "tx:last-meta", "tx:committed-meta"} <= names
    for k in keys:
        assert k.startswith(f"topology:{{{tx.tx_id}:ctl}}:tx:"), k
    # one Cluster slot: Redis Cluster hashes only the first {...} of a key
    assert {k[k.index("{") + 1:k.index("}")] for k in keys} == {f"{tx.tx_id}:ctl"}
