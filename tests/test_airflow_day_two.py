"""The day-two operators and the manual topology_rebalance DAG through dag.test() against a
live run on local workers and a real Redis: rebalance onto 3 workers, pause, resume; the task
log says what was done and the new shape; a run that is not live, or one on Spark, fails the
task at once naming why and what to do instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_components import CountInState, Ticker

from topology_runtime import LocalCluster, TopologyBuilder
from topology_runtime.api.exit_codes import ExitCode
from topology_runtime.api.status import RunStatus
from topology_runtime.cli.main import main as cli
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def _topology():
    b = TopologyBuilder()
    b.set_spout("ticks", Ticker(), 2)
    b.set_bolt("count", CountInState(), 2).shuffle_grouping("ticks")
    return b.create_topology()


def _states(run):
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_rebalance_dag_rebalances_pauses_and_resumes_a_live_run(airflow_db, redis_url, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException
    from structlog.testing import capture_logs
    from topology_airflow import RebalanceTopologyOperator

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", redis_url)
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("topology_rebalance")
    assert dag.params.get_param("action").schema["enum"] == ["rebalance", "pause", "resume"]
    conf = {"redis.url": redis_url, "test.redis.url": redis_url, "topology.state.provider": "redis",
            "topology.state.checkpoint.interval.ms": 200, "topology.stats.interval.secs": 0.2}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("af-rb", _topology(), conf)
        try:
            assert wait_for(lambda: run.status().components["ticks"].emitted > 100, 30), run.status()
            dr = dag.test(run_conf={"topology_id": "af-rb", "action": "rebalance", "workers": 3, "timeout": 5})
            assert dr.state == "success", _states(dr)
            assert _states(dr) == {"choose": "success", "rebalance": "success", "pause": "skipped",
                                   "resume": "skipped"}
            assert run.status().workers == 3 and len(run.pids) == 3
            # The operator alone: its log says what was done and the new shape; XCom has the shape.
            op = RebalanceTopologyOperator(task_id="rb", topology_id="af-rb", workers=2, redis_url=redis_url)
            with capture_logs() as logs:
                shape = op.execute({})
            lines = [e["event"] % e["positional_args"] if e.get("positional_args") else e["event"] for e in logs]
            assert "done: af-rb: running on 2 worker(s) (ticks=2, count=2)" in lines, lines
            assert shape == {"state": "running", "workers": 2, "parallelism": {"ticks": 2, "count": 2}}
            # Rescale: the stateless spout through the form's object; the shuffled (not keyed)
            # stateful count is refused, naming it and a key its state holds.
            dr = dag.test(run_conf={"topology_id": "af-rb", "action": "rebalance", "workers": None,
                                    "parallelism": {"ticks": 3}})
            assert dr.state == "success", _states(dr)
            assert run.status().parallelism == {"ticks": 3, "count": 2} and run.status().workers == 2
            refused = RebalanceTopologyOperator(task_id="rb", topology_id="af-rb", parallelism="count=3",
                                                redis_url=redis_url)
            with pytest.raises(AirflowFailException, match="stateful component 'count'.*not keyed.*key "):
                refused.execute({})
            assert run.status().parallelism == {"ticks": 3, "count": 2} and run.status().state == "running"

            dr = dag.test(run_conf={"topology_id": "af-rb", "action": "pause", "workers": 3})
            assert dr.state == "success", _states(dr)
            assert run.status().paused
            emitted = run.status().components["ticks"].emitted
            dr = dag.test(run_conf={"topology_id": "af-rb", "action": "resume", "workers": 3})
            assert dr.state == "success", _states(dr)
            assert wait_for(lambda: run.status().components["ticks"].emitted > emitted + 50, 15)
            assert not run.status().paused
        finally:
            run.kill()

    # Not live any more: the task fails at once (no retry can help), saying so.
    dr = dag.test(run_conf={"topology_id": "af-rb", "action": "rebalance", "workers": 2})
    assert dr.state == "failed" and _states(dr)["rebalance"] == "failed"
    with pytest.raises(AirflowFailException, match="no live run named 'af-rb' to rebalance"):
        RebalanceTopologyOperator(task_id="rb", topology_id="af-rb", workers=2, redis_url=redis_url).execute({})


def test_a_rebalance_the_driver_refuses_fails_the_task_naming_why(airflow_db, redis_url):
    """The driver's refusal (a Spark cluster without the slots: tests/test_rebalance.py has the
    real one) reaches the task at once; here a thread answers as the driver's reporter does."""
    import threading

    from airflow.sdk.exceptions import AirflowFailException
    from topology_airflow import RebalanceTopologyOperator

    cp = ControlPlane(redis_url)
    token = cp.register("af-spark", "spark", 2)  # a live run record of a Spark driver
    cp.publish("af-spark", token, RunStatus("af-spark", "running", workers=2), {})

    def driver() -> None:
        assert wait_for(lambda: cp.take_rebalance_request("af-spark") is not None, 10)
        cp.refuse_rebalance("af-spark", "the cluster offers 3 task slot(s): a barrier stage of 4 worker(s) could "
                                        "not start (at most 3)")

    t = threading.Thread(target=driver)
    t.start()
    op = RebalanceTopologyOperator(task_id="rebalance", topology_id="af-spark", workers=4, redis_url=redis_url)
    with pytest.raises(AirflowFailException, match=r"'af-spark': the cluster offers 3 task slot\(s\)") as refused:
        op.execute({})
    t.join()
    # What stands (the run's shape, from its record) and the command that goes on from there.
    assert "the run goes on with its components' numbers of tasks as they were (af-spark: running on 2 worker(s);" \
        in str(refused.value), refused.value
    assert "`topology rebalance af-spark --workers N [--parallelism COMPONENT=N]`" in str(refused.value)
    bad = RebalanceTopologyOperator(task_id="rebalance", topology_id="af-spark", workers="four", redis_url=redis_url)
    with pytest.raises(AirflowFailException, match="workers must be an integer, got 'four'"):
        bad.execute({})
    cp.release("af-spark", token)


def test_a_request_the_run_does_not_confirm_names_its_state_and_the_command_that_undoes_it(
        airflow_db, redis_url, capsys):
    """A live run record whose driver never answers (one busy past the wait): each request fails
    saying that it stands, what the run is now and the command that undoes it or goes on, in the
    task's error (its log) and on the command line (exit 7); once the run is gone, what it is."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
    from topology_airflow import (
        PauseTopologyOperator,
        RebalanceTopologyOperator,
        SavepointTopologyOperator,
        StopTopologyOperator,
    )

    name = "af-slow"
    cp = ControlPlane(redis_url)
    token = cp.register(name, "spark", 2)
    cp.publish(name, token, RunStatus(name, "running", workers=2, parallelism={"ticks": 2, "count": 2}), {})
    now = "af-slow: running on 2 worker(s) (ticks=2, count=2)"

    def fails(op) -> str:
        cp.renew(name, token)  # no driver renews this lease: keep it live through the waits
        with pytest.raises(AirflowException) as e:
            op.execute({})
        assert not isinstance(e.value, AirflowFailException), e.value  # a retry may see it done
        return str(e.value)

    err = fails(PauseTopologyOperator(task_id="pause", topology_id=name, wait=1, redis_url=redis_url))
    assert f"pause of topology 'af-slow': 'af-slow' has not confirmed the pause after 1s and is now {now}; " \
           "the request stands (`topology status af-slow` shows when it is done; to undo: " \
           "`topology resume af-slow`)" == err, err
    err = fails(RebalanceTopologyOperator(task_id="rb", topology_id=name, workers=3, parallelism="count=4", wait=1,
                                          redis_url=redis_url))
    assert f"has not confirmed the rebalance to 3 worker(s), count=4 after 1s and is now {now}" in err, err
    assert "to undo: `topology rebalance af-slow --workers 2 --parallelism count=2`" in err, err
    err = fails(SavepointTopologyOperator(task_id="sp", topology_id=name, name="sp1", wait=1, redis_url=redis_url))
    assert f"'af-slow' has not taken savepoint 'sp1' after 1s and is {now}; the request stands " \
           "(`topology savepoints af-slow` lists it once taken; to drop it then: " \
           "`topology savepoint-delete af-slow sp1`)" in err, err
    # The command line: the same words, exit 7 (STILL_LIVE).
    cp.renew(name, token)
    assert cli(["pause", name, "--wait", "1", "--redis", redis_url]) == ExitCode.STILL_LIVE
    assert f"is now {now}; the request stands" in (err := capsys.readouterr().err), err
    assert "to undo: `topology resume af-slow`" in err, err
    cp.renew(name, token)
    assert cli(["savepoint", name, "--name", "sp2", "--wait", "1", "--redis", redis_url]) == ExitCode.STILL_LIVE
    assert "the request stands (`topology savepoints af-slow` lists it once taken" in capsys.readouterr().err
    # A drain that does not finish: it cannot be taken back; a kill stops the run now.
    err = fails(StopTopologyOperator(task_id="drain", topology_id=name, wait=1, redis_url=redis_url))
    assert err == "topology 'af-slow' still live after 1s (running); the drain request stands and cannot be taken " \
                  "back: it stops once its in-flight trees finish (`topology status af-slow`); to stop it now: " \
                  "`topology kill af-slow`", err

    cp.release(name, token)  # the driver vanished: the record says lost, and the refusal says so
    with pytest.raises(AirflowFailException, match=r"no live run named 'af-slow' to pause: it is lost "
                                                   r"\(`topology status af-slow`\)"):
        PauseTopologyOperator(task_id="pause", topology_id=name, redis_url=redis_url).execute({})
    with pytest.raises(AirflowFailException, match="no live run named 'never-ran' to rebalance: Redis has no record"):
        RebalanceTopologyOperator(task_id="rb", topology_id="never-ran", workers=2, redis_url=redis_url).execute({})


def test_the_operators_parallelism_takes_a_dict_json_or_pairs_and_names_what_is_wrong():
    from topology_airflow.operations import _parallelism

    assert _parallelism({"count": "4"}) == _parallelism('{"count": 4}') == _parallelism("count=4") == {"count": 4}
    assert _parallelism("") == _parallelism(None) == {}
    with pytest.raises(ValueError, match=r"expected COMPONENT=N\[,COMPONENT=N\], got 'count'"):
        _parallelism("count")
    with pytest.raises(ValueError, match="parallelism of 'count': expected an integer, got 'four'"):
        _parallelism("count=four")
