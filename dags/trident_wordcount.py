"""The Trident word count as a PySpark job: load sentences into a Redis Stream, run
``examples.trident_wordcount:counting_topology`` (an opaque transactional spout, split, group by
word, an exactly-once opaque map state in Redis) until the stream is read and committed, then
report the top words from the state and check them against the sentences."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task
from topology_airflow import SubmitTopologyOperator

with DAG(
    dag_id="trident_wordcount",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "sentences": Param(20000, type="integer", minimum=1),
        "workers": Param(2, type="integer", minimum=1),
    },
    tags=["topology", "trident"],
) as trident_wordcount:

    @task
    def load_sentences(params=None) -> int:
        from examples.trident_wordcount import STREAM, reset
        from examples.wordcount import load_sentences as load
        from state.connection import connect
        from topology_runtime.control.redis_server import resolve_redis_url

        url, _ = resolve_redis_url(None)
        reset(url)  # the stream, the spout's transactions and the counts of an earlier run
        n = len(load(connect(url), int(params["sentences"]), STREAM))
        print(f"loaded {n} sentences into {STREAM!r}")
        return n

    count = SubmitTopologyOperator(
        task_id="trident_wordcount",
        topology="examples.trident_wordcount:counting_topology",
        name="trident-wordcount",
        workers="{{ params.workers }}",
        progress_interval=2,
    )

    @task
    def report(params=None) -> dict:
        from examples.trident_wordcount import report as top_words
        from examples.trident_wordcount import state_counts
        from examples.wordcount import sample_sentences, true_counts
        from topology_runtime.control.redis_server import resolve_redis_url

        url, _ = resolve_redis_url(None)
        truth = true_counts(sample_sentences(int(params["sentences"])))
        counts = state_counts(url)
        if counts != truth:
            wrong = sorted(w for w in set(truth) | set(counts) if truth.get(w) != counts.get(w))[:5]
            raise ValueError(f"the Trident counts differ from the sentences' words, e.g. {wrong}")
        return top_words(url)

    load_sentences() >> count >> report()
