"""Every way a person stops a submit task ends the run ``killed``, never ``lost``:
SIGTERM to the task's whole process group (what Airflow sends on mark-failed and clear) while
spark-submit runs, the deferred task's trigger ``on_kill``, and a retry of the same task that
re-attaches to the live run its earlier try left (instead of failing with "already live").
Real spark-submits on ``local[2]`` and a real Redis; the Airflow task context is a stand-in
(a TaskInstance-like object with dag_id, run_id and task_id): the live-Airflow path is in
tests/test_airflow_e2e.py."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis

from examples.wordcount import COUNTS, load_sentences, true_counts
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.testing import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent


def _running(cp: ControlPlane, name: str) -> bool:
    rec = cp.get(name)
    return rec is not None and rec.live and rec.state == "running"


def _submit_unbounded(name: str, redis_url: str) -> tuple[subprocess.Popen, ControlPlane]:
    """`topology submit` of an unbounded topology in its own process group (as an Airflow task
    runs it), once the run is running."""
    proc = subprocess.Popen([sys.executable, "-m", "topology_runtime.cli", "submit", "tests.spark_topologies:unbounded",
                             "--name", name, "--workers", "2", "--redis", redis_url, "--progress-interval", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True)
    cp = ControlPlane(redis_url)
    if not wait_for(lambda: _running(cp, name) or proc.poll() is not None, 120):
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"run {name!r} did not start: {proc.communicate()[0][-3000:]}")
    return proc, cp


def test_sigterm_to_the_task_process_group_ends_the_run_killed_not_lost(redis_url):
    """The CLI, spark-submit's JVM and the Python driver share a process group, as under an
    Airflow task: SIGTERM to all of them at once. The driver kills the topology and records it."""
    name = "term-group"
    proc, cp = _submit_unbounded(name, redis_url)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        assert wait_for(lambda: not cp.is_live(name), 40), "the run is still live after SIGTERM"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate(timeout=30)[0]
    rec = cp.get(name)
    assert rec.state == "killed", (rec.info, out[-3000:])
    assert "SIGTERM: killing the topology" in out, out[-3000:]


def _jvm_pid(parent: int) -> int | None:
    """The spark-submit JVM among ``parent``'s descendants."""
    out = subprocess.run(["ps", "-o", "pid=,ppid=,comm=", "-e"], capture_output=True, text=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    kids: dict[int, list[tuple[int, str]]] = {}
    for pid, ppid, comm in rows:
        kids.setdefault(int(ppid), []).append((int(pid), comm.strip()))
    todo = [parent]
    while todo:
        for pid, comm in kids.get(todo.pop(), []):
            if comm == "java":
                return pid
            todo.append(pid)
    return None


def test_a_spark_jvm_that_dies_under_the_driver_ends_the_run_failed_not_lost(redis_url):
    """spark-submit's JVM SIGKILLed (an OOM kill, a crash) while the Python driver lives on: every
    call into Spark fails from then on, and the driver still ends the run with a final state that
    names what happened, instead of dying with it and leaving it ``lost``."""
    name = "jvm-gone"
    proc, cp = _submit_unbounded(name, redis_url)
    try:
        jvm = _jvm_pid(proc.pid)
        assert jvm is not None
        os.kill(jvm, signal.SIGKILL)
        assert wait_for(lambda: not cp.is_live(name), 60), "the run is still live after its JVM died"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate(timeout=30)[0]
    rec = cp.get(name)
    assert rec.state == "failed", (rec.info, out[-3000:])
    assert "Spark" in (rec.status or {}).get("error", ""), rec.status


def test_a_deferred_task_killed_kills_its_topology_through_the_trigger(airflow_db, redis_url):
    from airflow.sdk.exceptions import TaskDeferred
    from topology_airflow import SubmitTopologyOperator, TopologyTrigger

    name = "term-deferred"
    op = SubmitTopologyOperator(task_id="forever", topology="tests.spark_topologies:unbounded", name=name,
                                workers=2, redis_url=redis_url, deferrable=True, poll_interval=0.5)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context={})
    _, kwargs = deferred.value.trigger.serialize()
    trigger = TopologyTrigger(**kwargs)  # as the triggerer re-creates it
    cp = ControlPlane(redis_url)
    try:
        assert wait_for(lambda: _running(cp, name), 120)
        t0 = time.monotonic()
        asyncio.run(trigger.on_kill())  # what Airflow 3.3 calls on mark-failed and clear
        assert time.monotonic() - t0 < 30
        assert cp.get(name).state == "killed"
        assert wait_for(lambda: subprocess.run(["kill", "-0", str(trigger.pid)]).returncode != 0, 30), \
            "the detached driver outlived its killed run"
    finally:
        if cp.is_live(name):
            cp.request_kill(name)


def _ti(run_id: str) -> SimpleNamespace:
    return SimpleNamespace(dag_id="wc_dag", run_id=run_id, task_id="submit")


def test_a_retry_of_the_same_task_reattaches_and_another_dag_run_is_refused(airflow_db, redis_url, monkeypatch):
    """Try 1's task process died (SIGKILL) and left its detached driver running: try 2 of the same
    DAG run and task follows that run to the end and succeeds; one run only. A different DAG run
    still gets "already live"."""
    from airflow.sdk.exceptions import AirflowException, TaskDeferred
    from topology_airflow import SubmitTopologyOperator

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.delete(COUNTS)
    truth = true_counts(load_sentences(client, 4000))
    name = "reattach"
    for var, value in (("AIRFLOW_CTX_DAG_ID", "wc_dag"), ("AIRFLOW_CTX_DAG_RUN_ID", "run-1"),
                       ("AIRFLOW_CTX_TASK_ID", "submit")):
        monkeypatch.setenv(var, value)  # what Airflow puts in a task's environment (the driver inherits it)

    def op():
        return SubmitTopologyOperator(task_id="submit", topology="tests.spark_topologies:slow_wordcount", name=name,
                                      workers=2, redis_url=redis_url, poll_interval=0.5, progress_interval=1)
    with pytest.raises(TaskDeferred):  # try 1: its process "dies" once the driver is started
        SubmitTopologyOperator(task_id="submit", topology="tests.spark_topologies:slow_wordcount", name=name,
                               workers=2, redis_url=redis_url, deferrable=True).execute(context={})
    cp = ControlPlane(redis_url)
    assert wait_for(lambda: _running(cp, name), 120)
    token = cp.get(name).info["token"]
    # Another DAG run: refused before any driver starts (the run was seen live), naming who has it.
    with pytest.raises(AirflowException, match="already live .*started by DAG 'wc_dag' run 'run-1' task 'submit'"):
        op().execute(context={"ti": _ti("run-2")})
    outcome: dict = {}
    t = threading.Thread(target=lambda: outcome.setdefault("status", op().execute(context={"ti": _ti("run-1")})))
    t.start()
    t.join(180)
    assert outcome.get("status", {}).get("state") == "completed", outcome
    rec = cp.get(name)
    assert rec.state == "completed" and rec.info["token"] == token  # the same run, followed to its end
    counts = {k: int(v) for k, v in client.hgetall(COUNTS).items()}
    assert not {w: n for w, n in truth.items() if counts.get(w, 0) < n}, "sentences lost"
