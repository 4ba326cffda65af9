"""The generic TransactionalSpout (Storm's ITransactionalSpout): its coordinator part's
metadata is stored in Redis under the txid (JSON, fenced) and every attempt of that txid gets it
unchanged: after a coordinator restart in-process, and after a SIGKILL of the coordinator's
worker at the commit point, on real workers."""

from __future__ import annotations

import json
import random

import pytest
import redis

from examples.transactional_range import RangeSpout, range_sum
from state.transactional import TransactionalState
from state.values import ValueMap
from topology_runtime import LocalCluster, TopologyContext
from topology_runtime.api.config import resolve_config
from topology_runtime.transactional.coordinator import CoordinatorSpout


class RandomRangeSpout(RangeSpout):
    """Batches of a random size: metadata made twice for one txid would almost surely differ.
    Task 0's emitter logs (txid, attempt, meta) of every attempt it emits to ``gen:emitted``."""

    def initialize_transaction(self, txid, prev_meta, tx_state):
        start = 0 if prev_meta is None else prev_meta[0] + prev_meta[1]
        tx_state.put("initialized", tx_state.get("initialized", 0) + 1)
        return [start, max(0, min(random.randint(1, self.batch_size), self.total - start))]

    def emit_batch(self, tx, meta, emit):
        if self.index == 0:
            redis.Redis.from_url(self.url).rpush("gen:emitted", json.dumps([tx.txid, tx.attempt_id, meta]))
        super().emit_batch(tx, meta, emit)

    def open(self, conf, context):
        super().open(conf, context)
        self.url = conf["redis.url"]


# --- the coordinator in-process, on the session Redis ---------------------------------------------

def _coordinator(url: str, spout, pending: int = 3):
    conf = resolve_config({"redis.url": url, "topology.max.spout.pending": pending})
    c = CoordinatorSpout(spout, "gen")
    out = []
    c.emit = lambda values, msg_id=None, stream="default": out.append((stream, values)) or [1]
    c.finish = lambda: out.append(("finished", None))
    c.fail_run = lambda error: out.append(("fail_run", error))
    c.open(conf, TopologyContext(0, "coord-numbers", 0, {"coord-numbers": [0]}, "gen"))
    return c, out


def _batches(out):
    return {v[0][0]: (v[0], v[2]) for s, v in out if s == "batch"}


def test_restarted_coordinator_replays_the_recorded_metadata(redis_url, redis_client):
    c, out = _coordinator(redis_url, RandomRangeSpout(100, 10))
    c.next_tuple()
    first = _batches(out)
    assert sorted(first) == [1, 2, 3]
    assert first[2][1][0] == sum(first[1][1])  # each batch starts where the previous ended
    c.ack(first[1][0])  # 1 processed -> its commit goes out
    commit = [v for s, v in out if s == "commit"][-1][0]
    c.ack(commit)  # 1 committed; 4 starts
    metas = {t: m for t, (_, m) in _batches(out).items()}
    assert sorted(metas) == [1, 2, 3, 4]
    state = TransactionalState(redis.Redis.from_url(redis_url, decode_responses=True), "gen")
    assert state.generic_metas() == metas  # JSON in Redis: 1 (the last committed) and 2..4
    assert state.spout_state() == {"initialized": 4}
    # a new coordinator (driver or worker restart): 2..4 replay with the same metadata, new attempts
    c2, out2 = _coordinator(redis_url, RandomRangeSpout(100, 10))
    c2.next_tuple()
    again = _batches(out2)
    assert {t: m for t, (_, m) in again.items()} == {t: metas[t] for t in (2, 3, 4)}
    assert all(again[t][0] != _batches(out)[t][0] for t in again)  # new attempt ids
    assert state.spout_state() == {"initialized": 4}  # nothing initialized twice
    # ... and a new txid continues from the stored metadata of the one before
    for t in (2, 3, 4):
        c2.ack(again[t][0])
    for _ in range(3):
        commit = [v for s, v in out2 if s == "commit"][-1][0]
        c2.ack(commit)
    five = _batches(out2)[5][1]
    assert five[0] == metas[4][0] + metas[4][1]
    assert state.spout_state() == {"initialized": 7}  # 5, 6 and 7 (pending 3): each once


def test_metadata_that_is_not_json_is_refused(redis_url):
    class Bad(RangeSpout):
        def initialize_transaction(self, txid, prev_meta, tx_state):
            return {"start": object()}

    c, _ = _coordinator(redis_url, Bad(10, 5))
    with pytest.raises(TypeError, match=r"Bad.initialize_transaction\(1\) returned metadata that cannot be stored"):
        c.next_tuple()


# --- on real workers --------------------------------------------------------------------------------

def test_range_example_sums_exactly(redis_url, redis_client):
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("rsum", range_sum(1000, 50, name="rsum"),
                             {"redis.url": redis_url, "topology.max.spout.pending": 3}, timeout=60)
    assert status.state == "completed", status.error
    got = ValueMap(redis_client, "range-sum").get(["sum"])["sum"]
    assert got.value == sum(n * n for n in range(1000)) and got.txid == 20  # 20 batches, no empty one


def test_replay_after_sigkill_of_the_coordinators_worker_gets_the_same_metadata(redis_url, redis_client,
                                                                                  tmp_path, monkeypatch):
    """The coordinator's worker SIGKILLs itself once, when the commit of txid >= 3 completed and
    before it is recorded (TOPOLOGY_FAULT=tx-commit). The restarted coordinator replays the
    uncommitted txids: every attempt of a txid emitted the same metadata, and the sum is exact."""
    fired = tmp_path / "fired"
    monkeypatch.setenv("TOPOLOGY_FAULT", "tx-commit:3")
    monkeypatch.setenv("TOPOLOGY_FAULT_ONCE", str(fired))
    total = 600
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("gen", range_sum(name="gen", spout=RandomRangeSpout(total, 40)),
                             {"redis.url": redis_url, "topology.max.spout.pending": 3,
                              "topology.message.timeout.secs": 2})
        status = run.wait(60)
    assert status.state == "completed", status.error
    assert fired.exists() and status.restarts == 1
    seen: dict[int, dict] = {}
    for raw in redis_client.lrange("gen:emitted", 0, -1):
        txid, attempt, meta = json.loads(raw)
        seen.setdefault(txid, {})[attempt] = meta
    replayed = {t: a for t, a in seen.items() if len(a) > 1}
    assert replayed, seen  # the kill made txids replay ...
    assert all(len({json.dumps(m) for m in a.values()}) == 1 for a in seen.values()), replayed  # ... identically
    state = TransactionalState(redis.Redis.from_url(redis_url, decode_responses=True), "gen")
    assert state.spout_state() == {"initialized": len(seen)}  # each txid's metadata was made once
    metas = sorted((t, next(iter(a.values()))) for t, a in seen.items())
    assert [m[0] for _, m in metas] == [sum(m[1] for _, m in metas[:i]) for i in range(len(metas))]  # no gap
    got = ValueMap(redis_client, "range-sum").get(["sum"])["sum"]
    assert got.value == sum(n * n for n in range(total))
