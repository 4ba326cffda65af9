"""The Trident word count DAG through dag.test(): the compiled Trident topology runs unchanged on
Spark local[2] (one spark-submit), launched by SubmitTopologyOperator, with exact counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.trident_wordcount import state_counts
from examples.wordcount import sample_sentences, true_counts
from topology_runtime.control.control_plane import ControlPlane

pytestmark = [pytest.mark.slow, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent


def test_trident_dag_counts_exactly_on_spark(airflow_db, redis_url, monkeypatch):
    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag("trident_wordcount").test(run_conf={"sentences": 3000})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"load_sentences": "success", "trident_wordcount": "success", "report": "success"}, states
    assert state_counts(redis_url) == true_counts(sample_sentences(3000))
    status = ControlPlane(redis_url).get("trident-wordcount")
    assert status.state == "completed"
    # the segments carry names a person can read, with their figures
    components = status.status["components"]
    assert {"spout-trident-wordcount", "b-0-split-aggregate", "b-1-persist"} <= set(components), sorted(components)
    assert components["b-1-persist"]["executed"] > 0
