"""The manual topology_upgrade DAG through dag.test(): a live exactly-once word count (local
workers) is drained, savepointed and replaced by a new version with an extra stateful component
on Spark local[2], started from the savepoint under the same id: every word counted exactly once.
A new version that cannot start fails the DAG run, leaves the savepoint, and the last task says
how to roll back."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from spark_topologies import exactly_once_wordcount

from examples.stateful_wordcount import counts_in_state
from examples.wordcount import load_sentences, true_counts
from state import savepoints
from topology_runtime import LocalCluster
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.testing import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent
CONF = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
        "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
        "topology.max.spout.pending": 100}


def _states(run):
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_upgrade_dag_drains_savepoints_and_starts_the_new_version(airflow_db, redis_url, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("topology_upgrade")
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    first = load_sentences(r, 300)
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("up", exactly_once_wordcount(bounded=False), {"redis.url": redis_url, **CONF})
        assert wait_for(lambda: counts_in_state(redis_url, "up") == true_counts(first), 120)
        second = load_sentences(r, 200, seed=7)  # some of it v1 counts before the drain, the rest v2
        dr = dag.test(run_conf={"topology_id": "up", "new_topology": "tests.spark_topologies:exactly_once_wordcount_v2",
                                "workers": 2, "conf": CONF, "savepoint_name": "pre-v2",
                                "rollback_topology": "tests.spark_topologies:exactly_once_wordcount"})
        assert run.done
    assert dr.state == "success", _states(dr)
    assert _states(dr) == {"drain": "success", "savepoint": "success", "upgrade": "success",
                           "rollback_hint": "skipped"}
    assert counts_in_state(redis_url, "up") == true_counts(first + second)  # nothing lost, nothing twice
    assert ControlPlane(redis_url).get("up").state == "completed"
    assert [m.name for m in savepoints.list_savepoints(r, "up")] == ["pre-v2"]  # kept for a rollback

    # A new version that cannot start: the run fails, the savepoint stays, the hint runs.
    dr = dag.test(run_conf={"topology_id": "up", "new_topology": "tests.spark_topologies:no_such_topology",
                            "workers": 2, "conf": CONF, "savepoint_name": "pre-broken",
                            "rollback_topology": "tests.spark_topologies:exactly_once_wordcount_v2"})
    assert dr.state == "failed"
    assert _states(dr) == {"drain": "success", "savepoint": "success", "upgrade": "failed",
                           "rollback_hint": "failed"}  # its log: the rollback command
    assert "pre-broken" in [m.name for m in savepoints.list_savepoints(r, "up")]
