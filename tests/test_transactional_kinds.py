"""The three kinds of bolt of Storm's transactional topologies (BatchBolt, committer BatchBolt,
BasicBolt; and a plain Bolt that acks or fails its tuples itself), the bolts refused by
create_topology, and topology.transactional.max.attempts: a batch that keeps failing ends the
run failed, naming the component, the txid and the exception."""

from __future__ import annotations

import random

import pytest
import redis

from examples.transactional_count import _client
from state.values import ValueMap
from topology_runtime import BasicBolt, Bolt, LocalCluster, Spout, StatefulBolt
from topology_runtime.api.builder import TopologyError
from topology_runtime.reliability.transactional import TransactionalCoordinator, TransactionAttempt, retry_delay
from topology_runtime.transactional import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
)
from topology_runtime.transactional.batch_executor import BASIC, BATCH, PLAIN, bolt_kind

# --- bolts (forked into the workers) -------------------------------------------------------------


class CountWords(BatchBolt):
    """A: per batch, the count of each word."""

    outputs = ["tx", "word", "count"]

    def prepare(self, conf, context, batch_id):
        self.id, self.counts = batch_id, {}

    def execute(self, tup):
        self.counts[tup["word"]] = self.counts.get(tup["word"], 0) + 1

    def finish_batch(self):
        for w, n in self.counts.items():
            self.emit([self.id, w, n])


class StoreCounts(BatchBolt, Committer):
    """A committer: adds the batch's counts to the hash ``key`` once per txid and passes them on."""

    outputs = ["tx", "word", "count"]

    def __init__(self, key: str) -> None:
        self.key = key

    def prepare(self, conf, context, batch_id):
        self.id, self.counts = batch_id, {}
        self.values = ValueMap(_client(conf["redis.url"]), self.key)

    def execute(self, tup):
        self.counts[tup["word"]] = self.counts.get(tup["word"], 0) + tup["count"]

    def finish_batch(self):
        self.values.multi_add(self.id.txid, self.counts)
        for w, n in self.counts.items():
            self.emit([self.id, w, n])


class Upper(BasicBolt):
    """C: per tuple; emits anchored and counted for the batch, acked after execute."""

    outputs = ["tx", "word", "count"]

    def execute(self, tup):
        self.emit([tup[0], tup["word"].upper(), tup["count"]])


class DoubleOrFailOnce(Bolt):
    """A plain Bolt: acks each tuple itself; fails one tuple of txid 2, once in the run."""

    outputs = ["tx", "word", "count"]

    def prepare(self, conf, context):
        self.r = redis.Redis.from_url(conf["redis.url"])

    def execute(self, tup):
        if tup[0].txid == 2 and self.r.set("kinds:failed", 1, nx=True):
            self.fail(tup)  # the whole batch replays
            return
        self.emit([tup[0], tup["word"], 2 * tup["count"]])
        self.ack(tup)


class Boom(BasicBolt):
    outputs = ["tx", "word", "count"]

    def execute(self, tup):
        if tup[0].txid == 3:
            raise ZeroDivisionError("injected: batch 3 always fails")
        self.emit([tup[0], tup["word"], 1])


def _data(seed: int, rows: int = 40) -> dict:
    rng = random.Random(seed)
    return {p: [[rng.choice(["apple", "cat", "dog", "fig"])] for _ in range(rows)] for p in range(3)}


def _truth(data: dict) -> dict:
    truth: dict[str, int] = {}
    for rows in data.values():
        for (w,) in rows:
            truth[w] = truth.get(w, 0) + 1
    return truth


def _values(client, key: str, words) -> dict:
    return {w: v.value for w, v in ValueMap(client, key).get(sorted(words)).items() if v is not None}


# --- pure --------------------------------------------------------------------------------------


def test_memory_spout_tasks_share_its_rows_instead_of_copying_them():
    # Every task gets a deep copy of its component's template: for the in-memory spout that
    # copied every row per emitter and coordinator task (seconds of start-up for a million).
    import copy

    from topology_runtime.transactional import MemoryTransactionalSpout

    rows = {0: [["a"], ["b"]], 1: [["c"]]}
    spout = MemoryTransactionalSpout(rows, ["word"], 1)
    rows[0].append(["late"])  # the constructor's copy: later changes of the caller's lists do not leak in
    task_copy = copy.deepcopy(spout)
    assert task_copy.data is spout.data and task_copy.data == {0: [["a"], ["b"]], 1: [["c"]]}
    assert task_copy.fields == spout.fields and task_copy.fields is not spout.fields
    got: list = []
    assert task_copy.emit_partition_batch_new(None, got.append, 0, [0, 1]) == [1, 1] and got == [["b"]]


def test_bolt_kinds():
    assert bolt_kind(CountWords()) == BATCH and bolt_kind(StoreCounts("k")) == BATCH
    assert bolt_kind(Upper()) == BASIC and bolt_kind(DoubleOrFailOnce()) == PLAIN


@pytest.mark.parametrize("bolt,committer,says", [
    (StatefulBolt(), False, "StatefulBolt cannot be set"),
    (Spout(), False, "a spout cannot be set as a bolt"),
    (object(), False, "object has no execute(tup)"),
    (Upper(), True, "a committer must be a BatchBolt"),
    (DoubleOrFailOnce(), True, "a committer must be a BatchBolt"),
])
def test_unsupported_bolts_are_refused_by_create_topology_naming_the_component(bolt, committer, says):
    b = TransactionalTopologyBuilder("kinds", "spout", MemoryTransactionalSpout({0: [["a"]]}, ["word"], 1))
    b.set_bolt("fine", CountWords()).shuffle_grouping("spout")
    (b.set_committer_bolt if committer else b.set_bolt)("odd-one", bolt).shuffle_grouping("fine")
    with pytest.raises(TopologyError) as e:
        b.create_topology()
    assert "bolt 'odd-one'" in str(e.value) and says in str(e.value), str(e.value)


def test_max_attempts_counts_only_the_failing_txid_and_backs_off():
    now = [0.0]
    m = TransactionalCoordinator(max_active=3, max_attempts=3, clock=lambda: now[0])
    batches = [e[1] for e in m.sync()]
    assert [a.txid for a in batches] == [1, 2, 3]
    assert m.fail(batches[1]) == []  # 2 fails: 2 and 3 are dropped; 2 waits retry_delay(1)
    assert sorted(m.active) == [1] and m.failures == {2: 1}
    assert m.fail(batches[2]) == [] and m.failures == {2: 1}  # 3's dropped attempt: not counted
    for n in (1, 2):
        now[0] += retry_delay(n) - 0.01
        assert m.sync() == []  # still backing off
        now[0] += 0.01
        again = [e[1] for e in m.sync()]
        assert [a.txid for a in again] == [2, 3]
        out = m.fail(again[0])
    assert out == [] and m.gave_up == (2, 3) and m.sync() == [] and not m.active
    assert retry_delay(1) == 0.1 and retry_delay(2) == 0.2 and retry_delay(30) == 5.0


def test_a_commit_clears_the_failure_count():
    m = TransactionalCoordinator(max_active=1, max_attempts=2)
    (_, a, _), = m.sync()
    (_, a2, _), = m.fail(a)
    assert m.failures == {1: 1}
    (kind, c), = m.ack(a2)
    assert kind == "commit"
    m.ack(c)
    assert m.failures == {} and m.current_txid == 2 and m.gave_up is None
    assert TransactionAttempt(1, 1).txid == 1


# --- on real workers -----------------------------------------------------------------------------


def test_seed_chain_with_every_kind_of_bolt_counts_exactly(redis_url, redis_client):
    """The transactional design's picture: A -> B (committer) -> C -> D (committer), with A a BatchBolt, C a
    BasicBolt; beside it A -> P (a plain Bolt failing one tuple of txid 2 once) -> Q (committer).
    C finishes a batch only after B committed it, D only then; the failed batch replays whole."""
    data = _data(11)
    truth = _truth(data)
    b = TransactionalTopologyBuilder("kinds", "spout", MemoryTransactionalSpout(data, ["word"], 5), 2)
    b.set_bolt("A", CountWords(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("B", StoreCounts("kinds:b"), 2).fields_grouping("A", ["word"])
    b.set_bolt("C", Upper(), 2).shuffle_grouping("B")
    b.set_committer_bolt("D", StoreCounts("kinds:d")).global_grouping("C")
    b.set_bolt("P", DoubleOrFailOnce(), 2).shuffle_grouping("A")
    b.set_committer_bolt("Q", StoreCounts("kinds:q")).global_grouping("P")
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("kinds", b.create_topology(),
                             {"redis.url": redis_url, "topology.max.spout.pending": 3}, timeout=60)
    assert status.state == "completed", status.error
    assert redis_client.get("kinds:failed") == b"1"  # P failed a batch, which replayed
    assert _values(redis_client, "kinds:b", truth) == truth
    assert _values(redis_client, "kinds:d", [w.upper() for w in truth]) == {w.upper(): n for w, n in truth.items()}
    assert _values(redis_client, "kinds:q", truth) == {w: 2 * n for w, n in truth.items()}
    assert status.components["C"].executed > 0 and status.components["P"].executed > 0


def test_a_batch_failing_every_time_ends_the_run_failed_after_max_attempts(redis_url, redis_client, capfd):
    data = _data(12, rows=10)
    b = TransactionalTopologyBuilder("boom", "spout", MemoryTransactionalSpout(data, ["word"], 2), 1)
    b.set_bolt("boom", Boom(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("store", StoreCounts("boom:counts")).global_grouping("boom")
    conf = {"redis.url": redis_url, "topology.max.spout.pending": 2, "topology.transactional.max.attempts": 3,
            "topology.transactional.progress.secs": 0.2}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("boom", b.create_topology(), conf)
        status = run.wait(60)
    assert status.state == "failed"
    err = status.error
    assert "batch txid 3 failed 3 time(s)" in err and "topology.transactional.max.attempts=3" in err, err
    assert "component 'boom'" in err and "ZeroDivisionError: injected: batch 3 always fails" in err, err
    # txids 1 and 2 committed, nothing after: the run stopped at the batch that cannot commit
    assert int(redis_client.get("topology:{boom:ctl}:tx:current")) == 3
    log = capfd.readouterr().err
    assert "batch txid 3 failed (attempt 1 of 3): component 'boom'" in log, log[-3000:]
    assert "batch txid 3 failed (attempt 2 of 3)" in log
    assert "batch txid 3 failed 3 time(s), last: component 'boom'" in log  # the final progress line
