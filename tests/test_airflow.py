"""Airflow, for real: the example DAG through dag.test() on Spark local[2] with a real Redis, and
the operator's failure and kill paths. One Airflow database per test session."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from examples.wordcount import COUNTS, sample_sentences, true_counts
from topology_runtime.control_plane import ControlPlane
from topology_runtime.local_cluster import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def airflow_db():
    out = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def test_wordcount_dag_runs_topology_on_spark(airflow_db, redis_url, monkeypatch):
    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("wordcount_topology")
    run = dag.test(run_conf={"sentences": 2000})
    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"load_sentences": "success", "recover_state": "success", "wordcount": "success",
                      "report": "success"}
    counts = {k.decode(): int(v) for k, v in redis.Redis.from_url(redis_url).hgetall(COUNTS).items()}
    assert counts == true_counts(sample_sentences(2000))
    assert ControlPlane(redis_url).get("wordcount").state == "completed"


def test_operator_fails_when_topology_fails(airflow_db, redis_url):
    from airflow.sdk.exceptions import AirflowException
    from topology_airflow import SubmitTopologyOperator

    op = SubmitTopologyOperator(task_id="broken", topology="tests.spark_topologies:broken", name="af-broken",
                                workers=1, redis_url=redis_url, progress_interval=1)
    with pytest.raises(AirflowException, match="af-broken.*failed.*BrokenSpout|af-broken.*failed.*source"):
        op.execute(context={})
    rec = ControlPlane(redis_url).get("af-broken")
    assert rec.state == "failed"
    assert "cannot reach the source" in rec.status["error"]


def test_operator_on_kill_stops_topology_and_task_fails(airflow_db, redis_url):
    from topology_airflow import SubmitTopologyOperator

    op = SubmitTopologyOperator(task_id="forever", topology="tests.spark_topologies:unbounded", name="af-forever",
                                workers=2, redis_url=redis_url, progress_interval=1)
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = op.execute(context={})
        except Exception as e:  # noqa: BLE001 - the test inspects it
            outcome["error"] = e

    t = threading.Thread(target=run)
    t.start()
    cp = ControlPlane(redis_url)
    assert wait_for(lambda: (cp.get("af-forever") or None) is not None
                    and cp.get("af-forever").state == "running", 120)
    t0 = time.monotonic()
    op.on_kill()
    t.join(60)
    assert not t.is_alive()
    assert "result" not in outcome, "a killed topology's task must not succeed"
    assert "killed" in str(outcome["error"])
    assert cp.get("af-forever").state == "killed"
    assert time.monotonic() - t0 < 15


def test_recovery_dag_rolls_back_a_planted_prepared_checkpoint(airflow_db, redis_url, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from state import RedisKeyValueState
    from state.checkpoint import COMMITTED, PREPARING, CheckPointState, load_checkpoint, save_checkpoint

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    client = redis.Redis.from_url(redis_url)
    for task in (1, 2):
        s = RedisKeyValueState(client, "crashed", task)
        s.put("count", 10)
        s.prepare_commit(3)
        s.commit(3)
        s.put("count", 99)
        s.prepare_commit(4)  # the crash: prepared, never committed
    save_checkpoint(client, "crashed", CheckPointState(4, PREPARING))
    dag = DagBag(dag_folder=str(ROOT / "dags")).get_dag("topology_recovery")
    assert dag.params["action"] == "auto"
    assert dag.params.get_param("action").schema["enum"] == ["auto", "rollback", "commit"]
    dry = dag.test(run_conf={"topology_id": "crashed", "action": "auto", "dry_run": True})
    assert dry.state == "success"
    assert RedisKeyValueState(client, "crashed", 1).prepared_txid == 4  # dry run: untouched
    run = dag.test(run_conf={"topology_id": "crashed", "action": "auto", "dry_run": False})
    assert run.state == "success"
    assert [RedisKeyValueState(client, "crashed", t).get("count") for t in (1, 2)] == [10, 10]
    assert load_checkpoint(client, "crashed") == CheckPointState(3, COMMITTED)
    assert not client.keys("topology:{crashed:*}:prepare")


def test_recovery_dag_refuses_a_forced_commit_that_splits_txids(airflow_db, redis_url, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from state import RedisKeyValueState
    from state.checkpoint import PREPARING, CheckPointState, save_checkpoint

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    client = redis.Redis.from_url(redis_url)
    s = RedisKeyValueState(client, "split", 1)
    s.put("x", 1)
    s.prepare_commit(0)
    RedisKeyValueState(client, "split", 2).put("x", 1)  # task 2 never prepared txid 0
    client.hset("topology:{split:2}:txid", "commit", -1)
    save_checkpoint(client, "split", CheckPointState(0, PREPARING))
    dag = DagBag(dag_folder=str(ROOT / "dags")).get_dag("topology_recovery")
    run = dag.test(run_conf={"topology_id": "split", "action": "commit", "dry_run": False})
    assert run.state == "failed"
    assert RedisKeyValueState(client, "split", 1).prepared_txid == 0  # nothing changed
