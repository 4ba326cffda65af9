"""The Kafka word count as a PySpark job: produce sentences to a topic, run
``examples.kafka_wordcount:topology`` (KafkaSpout through a consumer group, counts into Redis and
back to Kafka through KafkaBolt), report the top words. The brokers are a parameter, handed to
the run as the config key ``kafka.bootstrap.servers``."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task
from topology_airflow import SubmitTopologyOperator

with DAG(
    dag_id="kafka_wordcount",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "bootstrap_servers": Param("127.0.0.1:9092", type="string", description="the Kafka brokers, HOST:PORT,..."),
        "sentences": Param(20000, type="integer", minimum=1),
        "workers": Param(2, type="integer", minimum=1),
    },
    tags=["topology", "kafka"],
) as kafka_wordcount:

    @task
    def produce_sentences(params=None) -> int:
        from examples.kafka_wordcount import COUNTS, TOPIC, produce
        from examples.wordcount import sample_sentences
        from state.connection import connect
        from topology_runtime.control.redis_server import resolve_redis_url

        url, _ = resolve_redis_url(None)
        connect(url).delete(COUNTS)
        sentences = sample_sentences(int(params["sentences"]))
        produce(params["bootstrap_servers"], sentences)
        print(f"produced {len(sentences)} sentences to {TOPIC!r} on {params['bootstrap_servers']}")
        return len(sentences)

    count = SubmitTopologyOperator(
        task_id="kafka_wordcount",
        topology="examples.kafka_wordcount:topology",
        name="kafka-wordcount",
        workers="{{ params.workers }}",
        conf={"kafka.bootstrap.servers": "{{ params.bootstrap_servers }}"},
        progress_interval=2,
    )

    @task
    def report() -> dict:
        from examples.kafka_wordcount import COUNTS
        from examples.wordcount import report

        return report(COUNTS)

    produce_sentences() >> count >> report()
