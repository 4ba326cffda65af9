"""Airflow as a user runs it: a real api-server, scheduler, dag-processor and triggerer (the
``airflow_live`` fixture), DAGs triggered and read through the REST API v2, topologies on Spark
local[2], state in the session's Redis. Nothing is mocked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from examples.wordcount import COUNTS, sample_sentences, true_counts
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.testing import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_wordcount_dag_through_the_rest_api(airflow_live, redis_url):
    live = airflow_live
    run_id = live.trigger("wordcount_topology", {"sentences": 2000})
    state = live.wait_for_run("wordcount_topology", run_id, timeout=180)
    assert state == "success", live.describe_run("wordcount_topology", run_id)
    log = live.task_log("wordcount_topology", run_id, "wordcount")
    # The driver's lines, streamed through spark-submit into the task log: progress and summary.
    assert "progress [" in log, log[-3000:]
    assert "run 'wordcount' completed after" in log, log[-3000:]
    assert "component" in log and "sentences" in log  # the summary table
    # Spark's INFO start-up lines stay out (WARN and up only), and each progress
    # line is short enough to read without scrolling sideways.
    assert " INFO SparkContext" not in log and " INFO Executor" not in log, log[:3000]
    progress = [line[line.index("progress ["):].split(" [airflow.")[0].rstrip()  # minus the log's own context
                for line in log.splitlines() if "progress [" in line]
    assert progress and max(map(len, progress)) <= 100, max(progress, key=len)
    counts = {k.decode(): int(v) for k, v in redis.Redis.from_url(redis_url).hgetall(COUNTS).items()}
    assert counts == true_counts(sample_sentences(2000))
    # The task's "Topology" button, as the UI fetches it, leads to the run's status page.
    r = live.api("GET", f"/dags/wordcount_topology/dagRuns/{run_id}/taskInstances/wordcount/links")
    assert r.status_code == 200, r.text
    href = r.json()["extra_links"].get("Topology")
    assert href, r.json()
    assert href.endswith("/topologies/topology/wordcount"), href
    url = href if href.startswith("http") else f"{live.base_url}{href}"
    page = live.session().get(url, timeout=30)  # the app takes the same Bearer token as the API
    assert page.status_code == 200 and "wordcount" in page.text, page.text[:500]


def test_recovery_dag_through_the_rest_api_commits_a_half_committed_checkpoint(airflow_live, redis_url):
    """A crash in the middle of COMMITTING(4): task 1 still holds txid 4 prepared, task 2 already
    committed it. The checkpoint record says commit: recovery must finish the commit."""
    from state import RedisKeyValueState
    from state.checkpoint import COMMITTED, COMMITTING, CheckPointState, load_checkpoint, save_checkpoint

    client = redis.Redis.from_url(redis_url)
    for task in (1, 2):  # indexes task - 1 of component "count"
        s = RedisKeyValueState(client, "e2e-crashed", "count", task - 1)
        s.put("count", 10)
        s.prepare_commit(3)
        s.commit(3)
        s.put("count", 40 + task)
        s.prepare_commit(4)
        if task == 2:
            s.commit(4)
    save_checkpoint(client, "e2e-crashed", CheckPointState(4, COMMITTING))
    assert RedisKeyValueState(client, "e2e-crashed", "count", 0).prepared_txid == 4

    live = airflow_live
    run_id = live.trigger("topology_recovery", {"topology_id": "e2e-crashed", "action": "auto", "dry_run": False})
    state = live.wait_for_run("topology_recovery", run_id, timeout=120)
    assert state == "success", live.describe_run("topology_recovery", run_id)
    log = live.task_log("topology_recovery", run_id, "recover")
    assert "checkpoint COMMITTING(4); action auto -> commit" in log, log[-3000:]
    # As decided: the prepared txid 4 committed on task 1, nothing prepared is left, record COMMITTED(4).
    assert [RedisKeyValueState(client, "e2e-crashed", "count", t).get("count") for t in (0, 1)] == [41, 42]
    assert RedisKeyValueState(client, "e2e-crashed", "count", 0).prepared_txid is None
    assert not client.keys("topology:{e2e-crashed:*}:prepare")
    assert load_checkpoint(client, "e2e-crashed") == CheckPointState(4, COMMITTED)


def test_deferrable_wordcount_defers_then_succeeds_with_the_summary(airflow_live, redis_url):
    live = airflow_live
    dag_id = "wordcount_topology_deferrable"
    run_id = live.trigger(dag_id, {"sentences": 2000})
    seen: list[str] = []

    def watch(tis: dict) -> None:
        state = (tis.get("wordcount") or {}).get("state")
        if state and (not seen or seen[-1] != state):
            seen.append(state)

    state = live.wait_for_run(dag_id, run_id, timeout=180, on_poll=watch)
    assert state == "success", live.describe_run(dag_id, run_id)
    assert "deferred" in seen, f"the task never showed as deferred: {seen}"
    log = live.task_log(dag_id, run_id, "wordcount")
    assert "run 'wordcount' completed after" in log, log[-3000:]
    assert "topology 'wordcount' final state: completed" in log, log[-3000:]
    # While deferred, the trigger copied the driver's progress lines (its log is merged in).
    assert "progress [" in log, log[-3000:]
    # The run registry points at the driver's log file, which holds the whole driver output.
    rec = ControlPlane(redis_url).get("wordcount")
    assert rec.state == "completed"
    driver_log = Path(rec.info["log"])
    assert driver_log.is_file() and "run 'wordcount' completed after" in driver_log.read_text()
    counts = {k.decode(): int(v) for k, v in redis.Redis.from_url(redis_url).hgetall(COUNTS).items()}
    assert counts == true_counts(sample_sentences(2000))


def test_a_dag_scheduled_on_committed_data_runs_after_the_topology_commits(airflow_live, redis_url):
    """dags/committed_counts.py. The report DAG is scheduled on the transactional
    count's asset; its watcher (TopologyCommitTrigger in the triggerer) turns each commit into an
    asset event, and the report runs with those commits as its triggering events."""
    live = airflow_live
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    live.wait_for_dag("committed_counts_report")
    r = live.api("PATCH", "/dags/committed_counts_report", json={"is_paused": False})
    assert r.status_code == 200, r.text
    stream = "topology:{streams-wc:ctl}:commits"

    # The watcher creates no key: it waits for the stream the first commit creates, then reads all of it.
    client.delete(stream)
    run_id = live.trigger("transactional_wordcount", {})
    state = live.wait_for_run("transactional_wordcount", run_id, timeout=240)
    assert state == "success", live.describe_run("transactional_wordcount", run_id)
    commits = client.xlen(stream)
    assert commits >= 1

    def reports() -> list[dict]:
        runs = live.api("GET", "/dags/committed_counts_report/dagRuns").json().get("dag_runs", [])
        return [r for r in runs if r.get("run_type") == "asset_triggered"]
    assert wait_for(lambda: any(r["state"] == "success" for r in reports()), 180), (reports(), live.tails())
    events = live.api("GET", "/assets/events", params={"limit": 100}).json().get("asset_events", [])
    payloads = [(e.get("extra") or {}).get("payload") or {} for e in events]  # Airflow: {"from_trigger", "payload"}
    txids = sorted(p["txid"] for p in payloads if p.get("topology") == "streams-wc")
    assert txids and len(txids) == len(set(txids)) and len(txids) <= commits, txids  # each commit at most once


def test_recovery_of_an_unknown_id_through_the_rest_api_fails_naming_the_known_ids(airflow_live, redis_url):
    """The manual recovery DAG, triggered through the REST API with an id
    this Redis has no record of, fails at once (no retry: a typo does not heal) and says so."""
    from state.recovery import is_known

    live = airflow_live
    run_id = live.trigger("topology_recovery", {"topology_id": "no-such-topology", "action": "auto", "dry_run": False})
    assert live.wait_for_run("topology_recovery", run_id, timeout=120) == "failed"
    ti = live.task_instances("topology_recovery", run_id)["recover"]
    assert ti["state"] == "failed" and ti["try_number"] == 1, ti
    log = live.task_log("topology_recovery", run_id, "recover")
    assert "no topology 'no-such-topology' in Redis (known: " in log, log[-3000:]
    assert "nothing" not in log.split("no topology 'no-such-topology'")[0][-200:]  # no "action auto -> nothing"
    assert not is_known(redis.Redis.from_url(redis_url), "no-such-topology")  # nothing written for it


def _fed(redis_url: str):
    """Sentences appended to the word count's stream for as long as the block lasts, a few
    thousand ahead of the run: a bounded run stays live until then, however slow the machine.
    (The DAG's load task empties the stream first; until the run's spout opens, nothing is added.)"""
    from runtime_components import StreamFeeder

    from examples.wordcount import STREAM

    # 20,000 ahead: about a second of this word count's reading on 2 cores, so a feeder thread
    # starved for a while on a loaded machine does not let the bounded spout run dry and finish.
    return StreamFeeder(redis_url, STREAM, per_round=5000, every=0.05, keep_ahead=20000)


def _driver_live(cp: ControlPlane, name: str) -> bool:
    rec = cp.get(name)
    return rec is not None and rec.live and rec.state == "running"


def test_marking_a_running_submit_task_failed_ends_the_run_killed(airflow_live, redis_url):
    """Mark-failed through the REST API while the topology runs (the task
    gets SIGTERM and on_kill): the run ends ``killed`` with its final state recorded, never
    ``lost``."""
    live = airflow_live
    dag_id = "wordcount_topology"
    cp = ControlPlane(redis_url)
    run_id = live.trigger(dag_id, {"sentences": 20000, "workers": 1})
    with _fed(redis_url):  # still running when marked
        assert wait_for(lambda: _driver_live(cp, "wordcount"), 240), live.describe_run(dag_id, run_id)
        r = live.api("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/wordcount",
                     json={"new_state": "failed"})
        assert r.status_code == 200, r.text
        assert wait_for(lambda: not cp.is_live("wordcount"), 60), "the run outlived its task"
    rec = cp.get("wordcount")
    assert rec.state == "killed", (rec.info, live.describe_run(dag_id, run_id))
    assert live.wait_for_run(dag_id, run_id, timeout=120) == "failed"


def test_marking_a_deferred_submit_task_failed_ends_the_run_killed(airflow_live, redis_url):
    """Deferrable: the task waits in the triggerer; mark-failed through the
    REST API makes Airflow 3.3 call the trigger's on_kill, which kills the topology: ``killed``."""
    live = airflow_live
    dag_id = "wordcount_topology_deferrable"
    cp = ControlPlane(redis_url)
    run_id = live.trigger(dag_id, {"sentences": 20000, "workers": 1})

    def deferred_and_live() -> bool:
        state = (live.task_instances(dag_id, run_id).get("wordcount") or {}).get("state")
        return state == "deferred" and _driver_live(cp, "wordcount")
    with _fed(redis_url):  # still running when marked
        assert wait_for(deferred_and_live, 240), live.describe_run(dag_id, run_id)
        r = live.api("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/wordcount",
                     json={"new_state": "failed"})
        assert r.status_code == 200, r.text
        assert wait_for(lambda: not cp.is_live("wordcount"), 90), ("the run outlived its deferred task", live.tails())
    rec = cp.get("wordcount")
    assert rec.state == "killed", (rec.info, live.describe_run(dag_id, run_id))


def test_a_retry_after_the_task_process_is_sigkilled_reattaches_to_the_same_run(airflow_live, redis_url):
    """SIGKILL the submit task's own process (the parent of its
    spark-submit) mid-run; Airflow retries the task, the retry re-attaches to the run the first try
    started and follows it to the end: one run, the task and the DAG run succeed."""
    import signal

    import psutil
    live = airflow_live
    cp = ControlPlane(redis_url)
    dag_id = "wordcount_topology"
    attached = "following it to the end instead of submitting again"

    def retry_attached() -> bool:
        """The retry said so in its log (the file it writes as it runs; the API serves it whole
        once the try ended)."""
        log = (Path(os.environ["AIRFLOW_HOME"]) / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
               / "task_id=wordcount" / "attempt=2.log")
        return log.is_file() and attached in log.read_text(errors="replace")

    def cmd(p: psutil.Process) -> str:
        return " ".join(p.info["cmdline"] or [])

    # More sentences keep coming from before the run starts until the retry has re-attached: the
    # run outlasts it however slow the machine (the 20,000 loaded are read in about a second, and a
    # bounded run ends within milliseconds of its last tuple), and it ends soon after.
    with _fed(redis_url):
        run_id = live.trigger(dag_id, {"sentences": 20000})
        assert wait_for(lambda: _driver_live(cp, "wordcount"), 240), live.describe_run(dag_id, run_id)
        token = cp.get("wordcount").info["token"]
        # spark-submit execs into the JVM (SparkSubmit), keeping the pid the task process started
        submits = [p for p in psutil.process_iter(["cmdline"])
                   if "SparkSubmit" in cmd(p) and "topology-wordcount" in cmd(p)]
        assert len(submits) == 1, [cmd(p) for p in submits]  # one, not a leftover of an earlier test
        task_process = submits[0].parent()
        killed = f"{task_process.pid} ({' '.join(task_process.cmdline())[:200]})"
        task_process.send_signal(signal.SIGKILL)

        def why() -> str:
            rec = cp.get("wordcount")
            return (f"killed {killed}; the run now: {rec.state if rec else None} {rec.info if rec else None} "
                    f"(token at start {token})\n" + live.describe_run(dag_id, run_id))
        assert wait_for(retry_attached, 240, interval=0.5), why()
        assert cp.is_live("wordcount"), "the run ended before the retry re-attached: " + why()
    assert live.wait_for_run(dag_id, run_id, timeout=300) == "success", live.describe_run(dag_id, run_id)
    ti = live.task_instances(dag_id, run_id)["wordcount"]
    assert ti["try_number"] == 2, ti
    assert attached in live.task_log(dag_id, run_id, "wordcount", 2)
    rec = cp.get("wordcount")
    assert rec.state == "completed" and rec.info["token"] == token  # exactly one run


def test_rebalance_dag_through_the_rest_api(airflow_live, redis_url):
    """The manual topology_rebalance DAG, triggered through the REST API against a live run on
    local workers: the run goes on 3 workers, and the task log says so with the new shape; then
    its pause and resume actions: the spouts stop and go on, and the record says paused, then
    running."""
    from runtime_components import CountInState, Ticker

    from topology_runtime import LocalCluster, TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("ticks", Ticker(), 2)
    b.set_bolt("count", CountInState(), 2).shuffle_grouping("ticks")
    live = airflow_live
    conf = {"redis.url": redis_url, "test.redis.url": redis_url, "topology.state.provider": "redis",
            "topology.state.checkpoint.interval.ms": 200}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("e2e-rb", b.create_topology(), conf)
        try:
            assert wait_for(lambda: run.status().components["ticks"].emitted > 100, 30), run.status()
            run_id = live.trigger("topology_rebalance", {"topology_id": "e2e-rb", "action": "rebalance", "workers": 3,
                                                         "timeout": 5})
            assert live.wait_for_run("topology_rebalance", run_id, timeout=180) == "success", \
                live.describe_run("topology_rebalance", run_id)
            assert run.status().workers == 3 and len(run.pids) == 3
            log = live.task_log("topology_rebalance", run_id, "rebalance")
            assert "done: e2e-rb: running on 3 worker(s) (ticks=2, count=2)" in log, log[-3000:]

            cp = ControlPlane(redis_url)
            run_id = live.trigger("topology_rebalance", {"topology_id": "e2e-rb", "action": "pause"})
            assert live.wait_for_run("topology_rebalance", run_id, timeout=180) == "success", \
                live.describe_run("topology_rebalance", run_id)
            assert run.status().paused and cp.get("e2e-rb").display_state == "paused"
            log = live.task_log("topology_rebalance", run_id, "pause")
            assert "done: e2e-rb: paused on 3 worker(s) (ticks=2, count=2)" in log, log[-3000:]
            emitted = run.status().components["ticks"].emitted
            run_id = live.trigger("topology_rebalance", {"topology_id": "e2e-rb", "action": "resume"})
            assert live.wait_for_run("topology_rebalance", run_id, timeout=180) == "success", \
                live.describe_run("topology_rebalance", run_id)
            assert not run.status().paused and cp.get("e2e-rb").display_state == "running"
            assert "done: e2e-rb: running on 3 worker(s)" in live.task_log("topology_rebalance", run_id, "resume")
            assert wait_for(lambda: run.status().components["ticks"].emitted > emitted + 50, 15), run.status()
        finally:
            run.kill()


@pytest.mark.spark
def test_upgrade_dag_through_the_rest_api(airflow_live, redis_url):
    """The manual topology_upgrade DAG, triggered through the REST API: a live exactly-once word
    count on local workers is drained, savepointed and replaced by its next version (an extra
    stateful counter) on Spark local[2], started from the savepoint under the same id and verified
    (a checkpoint past the savepoint committed); every word is counted exactly once, and the
    savepoint stays for a rollback."""
    from spark_topologies import exactly_once_wordcount

    from examples.stateful_wordcount import counts_in_state
    from examples.wordcount import load_sentences, true_counts
    from state import savepoints
    from topology_runtime import LocalCluster

    live = airflow_live
    conf = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
            "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
            "topology.max.spout.pending": 100}
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    first = load_sentences(r, 300)
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("e2e-up", exactly_once_wordcount(bounded=False), {"redis.url": redis_url, **conf})
        assert wait_for(lambda: counts_in_state(redis_url, "e2e-up") == true_counts(first), 120)
        second = load_sentences(r, 200, seed=7)
        run_id = live.trigger("topology_upgrade", {
            "topology_id": "e2e-up", "new_topology": "tests.spark_topologies:exactly_once_wordcount_v2",
            "workers": 2, "conf": conf, "savepoint_name": "pre-v2",
            "rollback_topology": "tests.spark_topologies:exactly_once_wordcount"})
        assert live.wait_for_run("topology_upgrade", run_id, timeout=420) == "success", \
            live.describe_run("topology_upgrade", run_id)
        assert run.done
    states = {t: ti["state"] for t, ti in live.task_instances("topology_upgrade", run_id).items()}
    assert states == {"drain": "success", "savepoint": "success", "upgrade": "success", "verify": "success",
                      "rollback_hint": "skipped"}, states
    # The DAG run ends once the new version runs and committed a checkpoint; this one is bounded.
    cp = ControlPlane(redis_url)
    assert wait_for(lambda: cp.get("e2e-up").state == "completed", 240), cp.get("e2e-up")
    assert counts_in_state(redis_url, "e2e-up") == true_counts(first + second)  # nothing lost, nothing twice
    assert [m.name for m in savepoints.list_savepoints(r, "e2e-up")] == ["pre-v2"]
    assert "e2e-up/pre-v2" in live.task_log("topology_upgrade", run_id, "savepoint")

