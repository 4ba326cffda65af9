"""The manual topology_upgrade DAG through dag.test(): a live exactly-once word count (local
workers) is drained, savepointed and replaced by a new version with an extra stateful component
on Spark local[2], started from the savepoint under the same id; the DAG run succeeds once the new
version runs and committed a checkpoint, while that version goes on reading forever, and every
word is counted exactly once. A step that fails leaves the DAG run failed, and its last task says
what the step left and the command that goes on or rolls back: tested for a drain, a savepoint and
a new version that cannot start."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from spark_topologies import exactly_once_wordcount

from examples.stateful_wordcount import counts_in_state
from examples.wordcount import load_sentences, true_counts
from state import savepoints
from topology_runtime import LocalCluster
from topology_runtime.api.status import RunStatus
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.testing import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.spark]
ROOT = Path(__file__).resolve().parent.parent
CONF = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
        "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
        "topology.max.spout.pending": 100}
V1 = "tests.spark_topologies:exactly_once_wordcount"
V2 = "tests.spark_topologies:unbounded_v2"


def _states(run):
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def _hint(run) -> str:
    """What the failed DAG run's rollback_hint task logged (it pushes the same text to XCom)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, key="hint", dag_ids=run.dag_id,
                                                 task_ids="rollback_hint")).first()
        assert row is not None, _states(run)
        return XComModel.deserialize_value(row)


def _upgrade_dag(monkeypatch, redis_url):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag("topology_upgrade")


def test_upgrade_dag_drains_savepoints_and_starts_the_new_version(airflow_db, redis_url, monkeypatch):
    dag = _upgrade_dag(monkeypatch, redis_url)
    cp = ControlPlane(redis_url)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    first = load_sentences(r, 300)
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("up", exactly_once_wordcount(bounded=False), {"redis.url": redis_url, **CONF})
        assert wait_for(lambda: counts_in_state(redis_url, "up") == true_counts(first), 120)
        second = load_sentences(r, 200, seed=7)  # some of it v1 counts before the drain, the rest v2
        dr = dag.test(run_conf={"topology_id": "up", "new_topology": V2, "workers": 2, "conf": CONF,
                                "savepoint_name": "pre-v2", "rollback_topology": V1})
        assert run.done
    try:
        # The DAG run ended while the new version runs on: it is started and verified, not followed.
        assert dr.state == "success", _states(dr)
        assert _states(dr) == {"drain": "success", "savepoint": "success", "upgrade": "success",
                               "verify": "success", "rollback_hint": "skipped"}
        rec = cp.get("up")
        assert rec.live and rec.state == "running", rec
        third = load_sentences(r, 100, seed=8)  # arrives after the upgrade: the new version reads it
        everything = true_counts(first + second + third)
        assert wait_for(lambda: counts_in_state(redis_url, "up") == everything, 120)  # nothing lost, nothing twice
        after = true_counts(third)  # the new counter started empty and saw at least what came after
        assert all(counts_in_state(redis_url, "up", "count2").get(w, 0) >= n for w, n in after.items())
    finally:
        cp.request_kill("up", drain=True)
        assert wait_for(lambda: not cp.is_live("up"), 120), cp.get("up")
    assert cp.get("up").state in ("completed", "killed")
    assert [m.name for m in savepoints.list_savepoints(r, "up")] == ["pre-v2"]  # kept for a rollback

    # The savepoint step fails (the name is taken): the old run stays as the drain left it, and
    # the hint says so, with the commands that take the savepoint by hand or restart the old code.
    dr = dag.test(run_conf={"topology_id": "up", "new_topology": V2, "workers": 2, "conf": CONF,
                            "savepoint_name": "pre-v2", "rollback_topology": V1})
    assert dr.state == "failed"
    assert _states(dr) == {"drain": "success", "savepoint": "failed", "upgrade": "upstream_failed",
                           "verify": "upstream_failed", "rollback_hint": "failed"}
    hint = _hint(dr)
    assert hint.startswith("the savepoint of 'up' failed"), hint
    assert f"the old run is {cp.get('up').state} and this upgrade took no savepoint" in hint, hint
    assert "`topology savepoint up --name NAME`" in hint and f"`topology submit {V2} --name up " \
           "--from-savepoint up/NAME`" in hint, hint
    assert f"to undo: start the old code again from its committed state: `topology submit {V1} --name up`" in hint
    assert "None" not in hint, hint

    # A new version that cannot start: the savepoint stays, the hint gives the rollback to it.
    dr = dag.test(run_conf={"topology_id": "up", "new_topology": "tests.spark_topologies:no_such_topology",
                            "workers": 2, "conf": CONF, "savepoint_name": "pre-broken", "rollback_topology": V2})
    assert dr.state == "failed"
    assert _states(dr) == {"drain": "success", "savepoint": "success", "upgrade": "failed",
                           "verify": "upstream_failed", "rollback_hint": "failed"}
    hint = _hint(dr)
    assert hint.startswith("the new version of 'up' did not start: 'up' is "), hint
    assert "savepoint up/pre-broken stands" in hint, hint
    assert f"Roll back: `topology submit {V2} --name up --from-savepoint up/pre-broken`" in hint, hint
    assert "pre-broken" in [m.name for m in savepoints.list_savepoints(r, "up")]


def test_a_drain_that_does_not_finish_fails_naming_the_live_run_and_the_command(airflow_db, redis_url,
                                                                               monkeypatch):
    """A run whose drain outlasts drain_timeout (here a run record nobody serves: the request is
    never carried out): nothing is saved or replaced, and the hint says the run is still live."""
    dag = _upgrade_dag(monkeypatch, redis_url)
    cp = ControlPlane(redis_url)
    token = cp.register("up-stuck", "spark", 2)
    cp.publish("up-stuck", token, RunStatus("up-stuck", "running", workers=2), {})
    try:
        dr = dag.test(run_conf={"topology_id": "up-stuck", "new_topology": V2, "workers": 2, "conf": CONF,
                                "rollback_topology": V1, "drain_timeout": 1})
    finally:
        cp.release("up-stuck", token)
    assert dr.state == "failed"
    assert _states(dr) == {"drain": "failed", "savepoint": "upstream_failed", "upgrade": "upstream_failed",
                           "verify": "upstream_failed", "rollback_hint": "failed"}
    hint = _hint(dr)
    assert hint.startswith("the drain of 'up-stuck' failed: the old run is still live (running, live); "
                           "nothing was saved or replaced"), hint
    assert "`topology kill up-stuck --drain --wait 600`, then trigger topology_upgrade again" in hint, hint
    assert savepoints.list_savepoints(redis.Redis.from_url(redis_url), "up-stuck") == []


def test_started_not_followed_fails_with_the_drivers_reason_when_the_run_never_starts(airflow_db, redis_url,
                                                                                    monkeypatch):
    """``wait_for_completion=False`` on a topology that does not import: the detached driver exits
    before registering, and the task fails at once with the driver's own reason."""
    import time

    from airflow.sdk.exceptions import AirflowException
    from topology_airflow import SubmitTopologyOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    op = SubmitTopologyOperator(task_id="upgrade", topology="tests.spark_topologies:no_such_topology",
                                name="up-bad", workers=1, redis_url=redis_url, wait_for_completion=False,
                                poll_interval=0.5)
    t0 = time.monotonic()
    with pytest.raises(AirflowException, match=r"'up-bad' did not start: topology 'up-bad' rejected: "
                                               r".*no_such_topology.*exited before registering"):
        op.execute(context={})
    assert time.monotonic() - t0 < 120  # noticed from the driver's exit, not a start timeout
    assert ControlPlane(redis_url).get("up-bad") is None
