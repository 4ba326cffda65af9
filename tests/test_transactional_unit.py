"""The transactional coordinator against transactional_test.clj's test-coordinator scenarios."""

from __future__ import annotations

import random

from topology_runtime.reliability.transactional import BATCH, COMMIT, TransactionalCoordinator


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


def test_failed_commit_replays_from_that_txid():
    c = make(max_active=2)
    first = {e[1].txid: e[1] for e in c.sync()}
    c.ack(first[1])
    c.ack(first[2])
    out = c.fail(first[1])  # the commit of 1 failed
    assert sorted(t for t, _ in batches(out)) == [1, 2] and commits(out) == []
    assert c.current_txid == 1
