"""The transactional coordinator against transactional_test.clj's test-coordinator scenarios."""

from __future__ import annotations

import random

import pytest

from topology_runtime.reliability.transactional import (
    BATCH,
    COMMIT,
    TransactionalCoordinator,
    TransactionAttempt,
    opaque_commit,
    opaque_last_meta,
)


def batches(out):
    return [(e[1].txid, e[2]) for e in out if e[0] == BATCH]


def commits(out):
    return [e[1].txid for e in out if e[0] == COMMIT]


def make(max_active=4, ready=lambda: True):
    return TransactionalCoordinator(max_active, 1, is_ready=ready, initialize=lambda t, prev: f"meta{t}",
                                    rng=random.Random(1))


def test_emits_up_to_max_active_batches_and_commits_in_order():
    c = make()
    out = c.sync()
    assert batches(out) == [(1, "meta1"), (2, "meta2"), (3, "meta3"), (4, "meta4")]
    attempts = {e[1].txid: e[1] for e in out}
    assert c.ack(attempts[2]) == []  # 2 processed, but 1 is not: no commit yet
    out = c.ack(attempts[1])
    assert commits(out) == [1] and batches(out) == []
    out = c.ack(attempts[1])  # commit of 1 acked: commit 2 (already processed) and a new batch 5
    assert commits(out) == [2] and batches(out) == [(5, "meta5")]
    assert c.current_txid == 2


def test_failed_batch_replays_it_and_every_later_one_with_new_attempts():
    c = make()
    first = {e[1].txid: e[1] for e in c.sync()}
    c.ack(first[1])
    out = c.fail(first[2])
    assert sorted(t for t, _ in batches(out)) == [2, 3, 4]
    again = {e[1].txid: e[1] for e in out}
    assert all(again[t].attempt_id != first[t].attempt_id for t in (2, 3, 4))
    assert [m for _, m in batches(out)] == ["meta2", "meta3", "meta4"]  # identical batches on replay
    assert c.ack(first[3]) == []  # a stale attempt's ack is ignored


def test_not_ready_still_reemits_cached_metas():
    ready = {"v": True}
    c = make(ready=lambda: ready["v"])
    first = {e[1].txid: e[1] for e in c.sync()}
    ready["v"] = False
    out = c.fail(first[1])
    assert sorted(t for t, _ in batches(out)) == [1, 2, 3, 4]  # cached metas go out again
    c2 = make(max_active=2, ready=lambda: ready["v"])
    assert batches(c2.sync()) == []


def test_restart_replays_recorded_batches_even_when_not_ready():
    """A restarted coordinator at txid 3 whose emitters had recorded batches 3 and 4: both go out
    though the (drained) spout is not ready, and it may not stop until they commit."""
    c = TransactionalCoordinator(4, 3, is_ready=lambda: False, rng=random.Random(1))
    assert not c.has_replays()
    c.restore_recorded([1, 3, 4])  # 1 committed already: ignored
    assert c.has_replays()
    out = c.sync()
    assert sorted(t for t, _ in batches(out)) == [3, 4]
    a = {e[1].txid: e[1] for e in out}
    c.ack(a[3]), c.ack(a[4])
    c.ack(a[3])  # commit 3
    assert c.has_replays()
    c.ack(a[4])  # commit 4
    assert c.current_txid == 5 and not c.has_replays()


def test_failed_commit_replays_from_that_txid():
    c = make(max_active=2)
    first = {e[1].txid: e[1] for e in c.sync()}
    c.ack(first[1])
    c.ack(first[2])
    out = c.fail(first[1])  # the commit of 1 failed
    assert sorted(t for t, _ in batches(out)) == [1, 2] and commits(out) == []
    assert c.current_txid == 1


# --- opaque partitioned spouts: per-attempt metadata, committed on commit ---------------------------

def test_opaque_batch_continues_after_the_previous_batch_in_flight_else_the_committed_one():
    committed = [4, 77, "m4"]  # [txid, attempt, meta]
    # txid 5 while 4 is committed (current 5): from the committed metadata
    assert opaque_last_meta(5, 5, committed, None) == ("m4", [4, 77])
    # txid 6 while 5 is in flight: after attempt 9 of txid 5
    assert opaque_last_meta(6, 5, committed, [9, "m5", [4, 77]]) == ("m5", [5, 9])
    # txid 5 replayed after its attempt 9 failed: from the committed metadata again, not from 9
    assert opaque_last_meta(5, 5, committed, [3, "old4", None]) == ("m4", [4, 77])
    assert opaque_last_meta(1, 1, None, None) == (None, None)  # the very start


def test_opaque_commit_moves_only_a_consistent_attempt_to_committed():
    a = TransactionAttempt(6, 11)
    committed = {0: [5, 9, "m5-0"], 1: [5, 9, "m5-1"]}
    good = {0: [11, "m6-0", [5, 9]], 1: [11, "m6-1", [5, 9]]}
    assert opaque_commit(a, good, committed, range(2)) == {0: [6, 11, "m6-0"], 1: [6, 11, "m6-1"]}
    assert opaque_commit(a, {0: good[0]}, committed, range(2)) is None  # partition 1 not emitted
    assert opaque_commit(a, {**good, 1: [12, "x", [5, 9]]}, committed, range(2)) is None  # another attempt
    # started from a stale attempt (8) of txid 5, not the committed one (9): must replay
    assert opaque_commit(a, {**good, 1: [11, "m6-1", [5, 8]]}, committed, range(2)) is None
    assert opaque_commit(TransactionAttempt(1, 3), {0: [3, "m", None]}, {}, range(1)) == {0: [1, 3, "m"]}


@pytest.mark.parametrize("seed", range(20))
def test_opaque_bookkeeping_commits_every_entry_exactly_once_under_failures(seed):
    """A model of the runtime (coordinator, emitter records, commit) with reads of random size,
    unreadable partitions and random failures of batches and commits: the committed batches
    cover each partition's entries exactly once, in order."""
    rng = random.Random(seed)
    n_entries, parts = 40, range(2)
    c = TransactionalCoordinator(3, 1, rng=rng)
    current, committed, ometa = 1, {}, {}
    emitted, done = {}, {p: [] for p in parts}
    inflight = []

    def run(out):
        for e in out:
            if e[0] == BATCH:
                a = e[1]
                rows, rec = {}, {}
                for p in parts:
                    last, base = opaque_last_meta(a.txid, current, committed.get(p), ometa.get(a.txid - 1, {}).get(p))
                    start = last or 0
                    end = min(n_entries, start + rng.choice([0, 1, 3, 5]))  # 0: unreadable now
                    rows[p], rec[p] = list(range(start, end)), [a.attempt_id, end, base]
                ometa[a.txid] = rec
                emitted[a] = rows
            inflight.append(e)

    run(c.sync())
    for _ in range(5000):
        if all(committed.get(p, [0, 0, 0])[2] == n_entries for p in parts) and not c.active:
            break
        if not inflight:
            run(c.sync())
            continue
        e = inflight.pop(rng.randrange(len(inflight)))
        a = e[1]
        if rng.random() < 0.15:
            run(c.fail(a))
            continue
        tx = c.active.get(a.txid)
        if e[0] == COMMIT and tx is not None and tx.attempt == a:
            new = opaque_commit(a, ometa.get(a.txid, {}), committed, parts)
            assert new is not None  # in-order delivery never yields a stale base
            committed.update(new)
            current = a.txid + 1
            ometa.pop(a.txid, None)
            for p in parts:
                done[p].extend(emitted[a][p])
        run(c.ack(a))
    assert {p: done[p] for p in parts} == {p: list(range(n_entries)) for p in parts}
