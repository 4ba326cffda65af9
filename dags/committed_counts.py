"""DAGs scheduled on committed data (event-driven scheduling with an Airflow 3 AssetWatcher).

``transactional_wordcount`` fills three Redis streams and runs the transactional word count
(examples/redis_streams_count.py, transactional id ``streams-wc``) with
``topology.airflow.asset`` set: every transactional commit adds an entry to the topology's
commits stream in Redis, in the commit's own script. ``committed_counts_report`` is scheduled
on ``topology_asset("streams-wc-committed", "streams-wc")``, whose watcher turns each entry into
an asset event, so it runs after commits and reads the counts committed so far."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task
from topology_airflow import SubmitTopologyOperator, topology_asset

ASSET = "streams-wc-committed"
committed = topology_asset(ASSET, topology_id="streams-wc")

with DAG(dag_id="transactional_wordcount", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, tags=["topology"]):

    @task
    def fill_streams() -> int:
        from examples.redis_streams_count import EXAMPLE_STREAMS, fill
        from state.connection import connect
        from state.layout import same_slot
        from topology_runtime.control.redis_server import resolve_redis_url

        client = connect(resolve_redis_url(None)[0])
        client.delete(*EXAMPLE_STREAMS, "word-counts", same_slot("word-counts", ":writers"))
        return sum(fill(client, EXAMPLE_STREAMS, 200).values())

    count = SubmitTopologyOperator(
        task_id="count", topology="examples.redis_streams_count:example_topology", name="streams-wc", workers=2,
        conf={"topology.max.spout.pending": 3, "topology.airflow.asset": ASSET}, progress_interval=2)
    fill_streams() >> count


with DAG(dag_id="committed_counts_report", schedule=[committed], start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, tags=["topology"]):

    @task
    def report(triggering_asset_events=None) -> dict:
        from state.connection import connect
        from state.values import ValueMap
        from topology_runtime.control.redis_server import resolve_redis_url

        # An event from a watcher carries the trigger's payload: {topology, kind, txid, asset}.
        txids = [(e.extra.get("payload") or {}).get("txid") for e in (triggering_asset_events or {}).get(committed, [])]
        client = connect(resolve_redis_url(None)[0])
        words = ["apple", "banana", "cat", "dog", "egg", "fig", "grape"]
        counts = {w: v.value for w, v in ValueMap(client, "word-counts").get(words).items() if v is not None}
        print(f"commits {txids}: {sum(counts.values())} words counted so far: {counts}")
        return {"txids": txids, "words": sum(counts.values())}

    report()
