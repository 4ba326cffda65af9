"""The example topology DAG: load sentences into a Redis stream, run the reliable word count
as a PySpark job (local[2] by default), report the top words from Redis.

Two DAGs of one shape: ``wordcount_topology`` runs spark-submit inside the task (the driver's
lines stream into the task log); ``wordcount_topology_deferrable`` starts the driver detached and
defers to the triggerer until the run ends, holding no worker slot while the topology runs."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, task
from topology_airflow import SubmitTopologyOperator, TopologyRecoveryOperator


def wordcount_dag(dag_id: str, deferrable: bool) -> DAG:
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        params={
            "sentences": Param(20000, type="integer", minimum=1),
            "workers": Param(2, type="integer", minimum=1),
        },
        tags=["topology"],
    ) as dag:

        @task
        def load_sentences(params=None) -> int:
            from examples.wordcount import COUNTS, STREAM, load_sentences
            from state.connection import connect
            from topology_runtime.control.redis_server import resolve_redis_url

            url, where = resolve_redis_url(None)
            print(f"Redis: {where}")
            client = connect(url, decode_responses=True)
            client.delete(STREAM, COUNTS, f"{STREAM}:dead")
            n = len(load_sentences(client, int(params["sentences"])))
            print(f"loaded {n} sentences into {STREAM!r}")
            return n  # not the URL: it may carry a password, and XCom values are logged and stored

        loaded = load_sentences()

        # Whatever a crashed earlier run left prepared is committed or rolled back before a new run;
        # on a fresh Redis there is no record of "wordcount" yet: allowed, as the first run.
        recover = TopologyRecoveryOperator(task_id="recover_state", topology_id="wordcount", allow_unknown=True)

        wordcount = SubmitTopologyOperator(
            task_id="wordcount",
            topology="examples.wordcount:topology",
            name="wordcount",
            workers="{{ params.workers }}",
            progress_interval=2,
            deferrable=deferrable,
            # If the task's process dies mid-run (a worker or scheduler killed), the retry re-attaches
            # to the run this try started and follows it; it does not submit a second run.
            retries=1,
            retry_delay=timedelta(seconds=5),
        )

        @task
        def report() -> dict:
            from examples.wordcount import COUNTS, report

            return report(COUNTS)

        loaded >> recover >> wordcount >> report()
    return dag


wordcount_topology = wordcount_dag("wordcount_topology", deferrable=False)
wordcount_topology_deferrable = wordcount_dag("wordcount_topology_deferrable", deferrable=True)
