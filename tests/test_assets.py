"""Commits announced for Airflow assets: with ``topology.airflow.asset`` set,
each committed checkpoint and each transactional commit adds one entry to
``topology:{ID:ctl}:commits`` in the commit's own script, and ``TopologyCommitTrigger`` (the
asset's watcher) turns each entry into one event. Real Redis, real LocalCluster runs; the
scheduled-DAG path through a live Airflow is in tests/test_airflow_e2e.py."""

from __future__ import annotations

import asyncio

import redis

from examples.redis_streams_count import fill, streams_word_count
from examples.stateful_wordcount import counts_in_state
from examples.wordcount import load_sentences, true_counts
from state.checkpoint import COMMITTED, COMMITTING, PREPARING, CheckPointState, save_checkpoint
from state.layout import ctl_key, same_slot
from state.transactional import TransactionalState
from topology_runtime import LocalCluster


def _entries(client: redis.Redis, topology_id: str) -> list[dict]:
    return [f for _, f in client.xrange(ctl_key(topology_id, "commits"))]


def test_a_commit_announces_itself_in_its_own_script_and_nothing_else_does(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    save_checkpoint(client, "ann-cp", CheckPointState(4, PREPARING), announce=None)
    save_checkpoint(client, "ann-cp", CheckPointState(4, COMMITTING), announce=None)
    save_checkpoint(client, "ann-cp", CheckPointState(4, COMMITTED), announce="counts")
    assert _entries(client, "ann-cp") == [{"topology": "ann-cp", "kind": "checkpoint", "txid": "4", "asset": "counts"}]
    tx = TransactionalState(client, "ann-tx", announce="counts")
    tx.record_batch(1, {0: [0, 5]})
    tx.commit(1, 2)
    assert tx.commit_opaque(2, lambda entries, committed: {0: [5, 9]})
    assert [(e["kind"], e["txid"]) for e in _entries(client, "ann-tx")] == [("transactional", "1"),
                                                                           ("transactional", "2")]
    TransactionalState(client, "ann-quiet").commit(1, 2)  # not announced unless asked
    assert _entries(client, "ann-quiet") == []


def test_the_watcher_trigger_yields_one_event_per_commit_and_resumes_without_replays(redis_url):
    from topology_airflow.assets import TopologyCommitTrigger, topology_asset

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    asset = topology_asset("trig-counts", "ann-trig", redis_url=redis_url)
    assert asset.uri == "topology://ann-trig/trig-counts" and asset.watchers[0].name == "ann-trig-commits"
    _, kwargs = asset.watchers[0].trigger.serialize()

    async def take(n: int, commits: list[int]) -> list[dict]:
        trigger = TopologyCommitTrigger(**{**kwargs, "block_ms": 200})  # as the triggerer re-creates it
        gen = trigger.run()
        first = asyncio.ensure_future(gen.__anext__())  # the group exists once it reads
        await asyncio.sleep(0.5)
        for t in commits:
            save_checkpoint(client, "ann-trig", CheckPointState(t, COMMITTED), announce="trig-counts")
        out = [(await first).payload]
        while len(out) < n:
            out.append((await asyncio.wait_for(gen.__anext__(), 10)).payload)
        await gen.aclose()
        return out

    got = asyncio.run(take(2, [1, 2]))
    assert [(e["kind"], e["txid"], e["topology"]) for e in got] == [("checkpoint", 1, "ann-trig"),
                                                                    ("checkpoint", 2, "ann-trig")]
    got = asyncio.run(take(1, [3]))  # a restarted triggerer: the next commit only, no replay
    assert [e["txid"] for e in got] == [3]


def test_a_transactional_run_announces_each_commit_once(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    streams = [f"ann:words:{p}" for p in range(2)]
    client.delete(*streams, "word-counts", same_slot("word-counts", ":writers"))
    fill(client, streams, 120)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("ann-tx-run", streams_word_count(streams, opaque=False, max_entries=20, name="ann-txrun"),
                             {"redis.url": redis_url, "topology.max.spout.pending": 3,
                              "topology.airflow.asset": "counts"}, timeout=120)
    assert status.state == "completed"
    txids = [int(e["txid"]) for e in _entries(client, "ann-txrun")]
    committed = int(client.get(ctl_key("ann-txrun", "tx:current"))) - 1
    assert txids == list(range(1, committed + 1))  # every commit, once, in order


def test_an_exactly_once_run_announces_each_checkpoint_commit_once(redis_url):
    from tests.spark_topologies import exactly_once_wordcount

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = true_counts(load_sentences(client, 600))
    conf = {"redis.url": redis_url, "topology.state.provider": "redis", "topology.state.exactly.once": True,
            "topology.state.checkpoint.interval.ms": 200, "topology.airflow.asset": "wc"}
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("ann-eo", exactly_once_wordcount(slow=False), conf, timeout=120)
    assert status.state == "completed"
    txids = [int(e["txid"]) for e in _entries(client, "ann-eo")]
    assert txids and txids == sorted(set(txids)), txids  # each checkpoint once, in order
    assert counts_in_state(redis_url, "ann-eo", "count") == truth


def test_a_stateful_run_announces_checkpoint_commits_not_rollbacks(redis_url):
    """At-least-once checkpointing (the checkpoint spout's record): COMMITTING(t) -> COMMITTED(t) is
    announced; a recovering PREPARING(t) -> COMMITTED(t-1) is not."""
    from tests.spark_topologies import slow_stateful_wordcount

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    load_sentences(client, 400)
    save_checkpoint(client, "ann-st", CheckPointState(3, PREPARING))  # a crashed run's checkpoint in flight
    conf = {"redis.url": redis_url, "topology.state.provider": "redis",
            "topology.state.checkpoint.interval.ms": 200, "topology.airflow.asset": "wc"}
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("ann-st", slow_stateful_wordcount(), conf, timeout=120)
    assert status.state == "completed"
    txids = [int(e["txid"]) for e in _entries(client, "ann-st")]
    assert txids and txids == sorted(set(txids)) and txids[0] >= 3, txids  # no event for the rollback to 2
