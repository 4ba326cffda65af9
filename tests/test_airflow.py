"""Airflow, for real: the example DAG through dag.test() on Spark local[2] with a real Redis, and
the operator's failure and kill paths. One Airflow database per test session."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
import redis
from structlog.testing import capture_logs

from examples.wordcount import COUNTS, sample_sentences, true_counts
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.testing import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent


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
    with capture_logs() as logs, pytest.raises(AirflowException,
                                               match="af-broken.*failed.*BrokenSpout|af-broken.*failed.*source"):
        op.execute(context={})
    rec = ControlPlane(redis_url).get("af-broken")
    assert rec.state == "failed"
    assert "cannot reach the source" in rec.status["error"]
    lines = [e["event"] % e["positional_args"] if e.get("positional_args") else e["event"] for e in logs]
    text = "\n".join(lines)
    assert "run 'af-broken' failed after" in text  # the driver's summary, streamed from spark-submit
    # The task log ends with the failing component, its task and the traceback.
    assert lines[-2].startswith("failed in component 'source' task "), lines[-5:]
    assert "Traceback" in lines[-1] and "ConnectionError: cannot reach the source" in lines[-1], lines[-1]


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
    for task in (0, 1):
        s = RedisKeyValueState(client, "crashed", "count", task)
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
    assert RedisKeyValueState(client, "crashed", "count", 0).prepared_txid == 4  # dry run: untouched
    run = dag.test(run_conf={"topology_id": "crashed", "action": "auto", "dry_run": False})
    assert run.state == "success"
    assert [RedisKeyValueState(client, "crashed", "count", t).get("count") for t in (0, 1)] == [10, 10]
    assert load_checkpoint(client, "crashed") == CheckPointState(3, COMMITTED)
    assert not client.keys("topology:{crashed:*}:prepare")


def test_recovery_dag_refuses_a_forced_commit_that_splits_txids(airflow_db, redis_url, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from state import RedisKeyValueState
    from state.checkpoint import PREPARING, CheckPointState, save_checkpoint

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    client = redis.Redis.from_url(redis_url)
    s = RedisKeyValueState(client, "split", "count", 0)
    s.put("x", 1)
    s.prepare_commit(0)
    RedisKeyValueState(client, "split", "count", 1).put("x", 1)  # task 1 never prepared txid 0
    client.hset("topology:{split:count/1}:txid", "commit", -1)
    save_checkpoint(client, "split", CheckPointState(0, PREPARING))
    dag = DagBag(dag_folder=str(ROOT / "dags")).get_dag("topology_recovery")
    run = dag.test(run_conf={"topology_id": "split", "action": "commit", "dry_run": False})
    assert run.state == "failed"
    assert RedisKeyValueState(client, "split", "count", 0).prepared_txid == 0  # nothing changed


def test_recovery_of_an_unknown_id_fails_naming_known_ids(airflow_db, redis_url, monkeypatch, capfd):
    """The operator, the manual recovery DAG: an id Redis has no record of (a typo, the wrong
    Redis) fails, without retries, naming ids it knows; nothing is written."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException
    from topology_airflow import TopologyRecoveryOperator

    from state.checkpoint import COMMITTED, CheckPointState, save_checkpoint

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    client = redis.Redis.from_url(redis_url)
    ControlPlane(redis_url).register("wordcount", "spark", 2)
    client.delete("topology:{wordcount:ctl}:lease")  # a run that ended (its lease gone)
    save_checkpoint(client, "stateful", CheckPointState(2, COMMITTED))
    before = {k: client.dump(k) for k in client.keys("*")}
    op = TopologyRecoveryOperator(task_id="recover", topology_id="wordcont", redis_url=redis_url)
    with pytest.raises(AirflowFailException) as e:
        op.execute(context={})
    assert str(e.value) == "no topology 'wordcont' in Redis (known: wordcount, stateful)"
    # the same id is known to the same operator once allowed as a first run
    allowed = TopologyRecoveryOperator(task_id="recover", topology_id="wordcont", redis_url=redis_url,
                                       allow_unknown=True).execute(context={})
    assert allowed["known"] is False and allowed["decision"] == "nothing"
    dag = DagBag(dag_folder=str(ROOT / "dags")).get_dag("topology_recovery")
    capfd.readouterr()
    run = dag.test(run_conf={"topology_id": "no-such-id", "action": "auto", "dry_run": False})
    assert run.state == "failed"
    out = capfd.readouterr()  # dag.test logs the task's failure with its traceback
    assert "AirflowFailException: no topology 'no-such-id' in Redis (known: wordcount, stateful)" \
        in out.out + out.err, (out.out + out.err)[-3000:]
    assert {k: client.dump(k) for k in client.keys("*")} == before
    ok = TopologyRecoveryOperator(task_id="recover", topology_id="stateful", redis_url=redis_url).execute({})
    assert ok["known"] is True and ok["decision"] == "nothing"


def test_example_dag_recovery_step_allows_a_first_run(airflow_db, redis_url, monkeypatch):
    """On a fresh Redis the example DAG's recovery step (before its first submit) succeeds: the
    DAG passes allow_unknown=True."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    client = redis.Redis.from_url(redis_url)
    assert client.dbsize() == 0
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    for dag_id in ("wordcount_topology", "wordcount_topology_deferrable"):
        task = bag.get_dag(dag_id).get_task("recover_state")
        assert task.allow_unknown is True and task.topology_id == "wordcount"
        result = task.execute(context={})
        assert result["known"] is False and result["decision"] == "nothing" and result["tasks"] == []
    assert client.dbsize() == 0  # a first run's recovery writes nothing


def _event_text(logs: list[dict]) -> list[str]:
    return [e["event"] % e["positional_args"] if e.get("positional_args") else e["event"] for e in logs]


def _run_trigger(trigger, timeout: float = 120):
    """Drive a trigger's async run() to its first event, as the triggerer would."""
    import asyncio

    async def first():
        async for event in trigger.run():
            return event

    return asyncio.run(asyncio.wait_for(first(), timeout))


def test_deferrable_operator_failure_resumes_with_failing_component_and_traceback(airflow_db, redis_url):
    """deferrable=True: the driver starts detached in its own session, the task defers, the
    trigger (redis.asyncio) reports the failed run, and the resumed task logs the driver's
    summary and ends with the failing component, task and traceback."""
    import os

    from airflow.sdk.exceptions import AirflowException, TaskDeferred
    from topology_airflow import SubmitTopologyOperator, TopologyTrigger

    op = SubmitTopologyOperator(task_id="broken", topology="tests.spark_topologies:broken", name="af-dbroken",
                                workers=1, redis_url=redis_url, progress_interval=1, deferrable=True,
                                poll_interval=0.5)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context={})
    trigger = deferred.value.trigger
    assert isinstance(trigger, TopologyTrigger) and deferred.value.method_name == "execute_complete"
    # Survives the task process: its own session, so not in the task's process group.
    assert os.getsid(trigger.pid) == trigger.pid
    classpath, kwargs = trigger.serialize()  # what the triggerer re-creates it from
    assert classpath == "topology_airflow.triggers.TopologyTrigger"
    event = _run_trigger(TopologyTrigger(**kwargs))
    assert event.payload["state"] == "failed", event.payload
    rec = ControlPlane(redis_url).get("af-dbroken")
    assert rec.info["log"] == trigger.log_file  # the run registry points at the driver log
    with capture_logs() as logs, pytest.raises(AirflowException, match="af-dbroken.*failed.*source"):
        op.execute_complete(context={}, event=event.payload)
    lines = _event_text(logs)
    assert "run 'af-dbroken' failed after" in "\n".join(lines)
    assert "topology 'af-dbroken' final state: failed" in lines
    assert lines[-2].startswith("failed in component 'source' task "), lines[-5:]
    assert "ConnectionError: cannot reach the source" in lines[-1]


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "in-task"])
def test_a_topology_module_that_does_not_exist_fails_naming_the_import_error(airflow_db, redis_url, deferrable):
    """Both submit modes, with the machine loaded (a CPU hog per core) while the driver starts,
    fails and exits: the task fails with the driver's reason first, the import error named."""
    import subprocess
    import sys

    from airflow.sdk.exceptions import AirflowException, TaskDeferred
    from topology_airflow import SubmitTopologyOperator

    name = f"af-bad-{'d' if deferrable else 't'}"
    op = SubmitTopologyOperator(task_id="bad", topology="tests.no_such_module:topology", name=name,
                                workers=1, redis_url=redis_url, deferrable=deferrable, poll_interval=0.5)
    reason = re.escape(f"topology {name!r} rejected: topology reference 'tests.no_such_module:topology': importing "
                       "'tests.no_such_module' raised ModuleNotFoundError: No module named 'tests.no_such_module'")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        if not deferrable:
            with pytest.raises(AirflowException, match=reason):
                op.execute(context={})
            return
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context={})
        t0 = time.monotonic()
        event = _run_trigger(deferred.value.trigger)
    finally:
        for h in hogs:
            h.kill()
    assert event.payload["state"] == "not-started"
    assert time.monotonic() - t0 < 90  # noticed from the driver's exit, not a start timeout
    # The driver's reason first, naming what does not import, however much Spark printed after it.
    with pytest.raises(AirflowException, match=rf"'{name}' did not start: {reason}"):
        op.execute_complete(context={}, event=event.payload)
    log = Path(event.payload["log_file"])
    log.write_text(log.read_text() + "".join(f"26/11/26 10:00:{i:02d} INFO ShutdownHookManager: noise {i}\n"
                                             for i in range(60)))
    with pytest.raises(AirflowException, match=rf"did not start: {reason}"):
        op.execute_complete(context={}, event=event.payload)


def test_sensor_conditions_on_a_real_transactional_run(redis_url):
    from airflow.sdk.exceptions import AirflowFailException
    from topology_airflow import TopologySensor

    from examples.transactional_count import DATA, global_count
    from topology_runtime import LocalCluster

    with pytest.raises(ValueError, match="unknown condition 'txid>=3'.*running, completed, failed, txid"):
        TopologySensor(task_id="bad", name="x", condition="txid>=3")
    with pytest.raises(ValueError, match="needs txid=N"):
        TopologySensor(task_id="bad", name="x", condition="txid")

    def sensor(condition: str, **kw) -> TopologySensor:
        return TopologySensor(task_id=f"wait_{condition}", name="global-count", condition=condition,
                              redis_url=redis_url, **kw)

    assert sensor("running").mode == "reschedule"
    assert not sensor("running").poke({})  # nothing registered yet: keep waiting
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("global-count", global_count(DATA), {"redis.url": redis_url,
                                                                  "topology.max.spout.pending": 3})
        assert wait_for(lambda: sensor("running").poke({}), 60, interval=0.2)
        assert wait_for(lambda: sensor("txid", txid=2, txid_kind="transactional").poke({}), 60, interval=0.2)
        assert run.wait(60).state == "completed"
    assert sensor("completed").poke({})
    assert sensor("running").poke({})  # it ran
    with pytest.raises(AirflowFailException, match="ended completed; it will never be failed"):
        sensor("failed").poke({})
    with pytest.raises(AirflowFailException, match="before committing txid 1000"):
        sensor("txid", txid=1000).poke({})


def test_sensor_fails_fast_on_a_failed_run_and_reads_checkpoint_txids(redis_url):
    from airflow.sdk.exceptions import AirflowFailException
    from topology_airflow import TopologySensor

    from state.checkpoint import PREPARING, CheckPointState, save_checkpoint
    from tests.spark_topologies import broken
    from topology_runtime import LocalCluster

    with LocalCluster(workers=1, redis_url=redis_url) as cluster:
        assert cluster.submit("sensor-broken", broken(), {}).wait(60).state == "failed"
    for condition in ("running", "completed"):
        with pytest.raises(AirflowFailException, match="ended failed.*cannot reach the source"):
            TopologySensor(task_id="w", name="sensor-broken", condition=condition, redis_url=redis_url).poke({})
    assert TopologySensor(task_id="w", name="sensor-broken", condition="failed", redis_url=redis_url).poke({})

    # A live stateful run whose checkpoint is PREPARING(5): txid 4 is the last committed one.
    # (registered through the real control plane; the redis_url fixture flushes it afterwards)
    ControlPlane(redis_url).register("sensor-stateful", "local", 1)
    save_checkpoint(redis.Redis.from_url(redis_url), "sensor-stateful", CheckPointState(5, PREPARING))

    def poke(n: int, kind: str = "checkpoint") -> bool:
        return TopologySensor(task_id="w", name="sensor-stateful", condition="txid", txid=n, txid_kind=kind,
                              redis_url=redis_url).poke({})

    assert poke(4) and poke(4, "any")
    assert not poke(5)
    assert not poke(1, "transactional")  # not a transactional topology: no coordinator txid
