"""A Spark node lost mid-run (tests/spark_standalone.py: two 1-core workers). Its worker daemon
and executor are SIGKILLed: the driver re-plans the same tasks onto the one slot left (same task
ids, so state stays put) after the restart back-off, and the run completes; when the node comes
back, the run grows back to two workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from runtime_components import StreamFeeder

from examples.stateful_wordcount import counts_in_state
from examples.wordcount import COUNTS, STREAM, load_sentences, true_counts
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.testing import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
DRIVER_IP = "127.0.0.2"
EO_CONF = ["topology.state.provider=redis", "topology.state.exactly.once=true",
           "topology.state.checkpoint.interval.ms=300", "topology.message.timeout.secs=5",
           "topology.max.spout.pending=100"]


def _submit(cluster, topology: str, name: str, redis_url: str, conf: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "topology_runtime.cli", "submit", topology, "--name", name, "--master", cluster.url,
           "--workers", "2", "--redis", redis_url, "--progress-interval", "2"]
    for c in conf:
        cmd += ["--conf", c]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, "SPARK_LOCAL_IP": DRIVER_IP}, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """The CLI, spark-submit and the driver (one process group): a failed test leaves no live run."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _diagnosis(cluster, name: str, out: str) -> str:
    """The driver's output and the executors' logs, kept in a file (the asserts show the tail)."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"lost-node-{name}-{os.getpid()}.log"
    logs = "\n".join(f"===== {p}\n{text[-20000:]}" for p, text in cluster.executor_logs().items())
    path.write_text(f"===== driver\n{out}\n{logs}\n===== cluster\n{cluster.tails()}\n")
    return f"(driver output and executor logs in {path})\n{out[-5000:]}"


def _status(redis_url: str, name: str) -> dict:
    rec = ControlPlane(redis_url).get(name)
    return (rec.status or {}) if rec is not None else {}


def _executed(redis_url: str, name: str, component: str) -> int:
    return ((_status(redis_url, name).get("components") or {}).get(component) or {}).get("executed", 0)


def _live_workers(redis_url: str, name: str) -> int:
    st = _status(redis_url, name)
    return sum(1 for w in (st.get("workers") or {}).values() if w.get("ready")) if st.get("state") == "running" else 0


@pytest.fixture
def cluster(spark_standalone):
    spark_standalone.wait_idle()
    yield spark_standalone
    if spark_standalone.alive_workers() < len(spark_standalone.worker_hosts):  # back for the next test
        for i in range(len(spark_standalone.worker_hosts)):
            if spark_standalone.workers.get(i) is None or spark_standalone.workers[i].poll() is not None:
                spark_standalone.start_worker(i)
    spark_standalone.wait_idle()


def test_exactly_once_count_survives_a_lost_node_that_does_not_come_back(cluster, redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = true_counts(load_sentences(client, 3000))
    proc = _submit(cluster, "tests.spark_topologies:exactly_once_wordcount", "lost-node-eo", redis_url, EO_CONF)
    try:
        assert wait_for(lambda: _executed(redis_url, "lost-node-eo", "split") > 300 or proc.poll() is not None, 180)
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        cluster.kill_worker(1)  # its daemon and its executor: the node is gone, and stays gone
        out, _ = proc.communicate(timeout=300)
    except BaseException:
        _stop(proc)
        print(_diagnosis(cluster, proc.args[6], proc.stdout.read() if proc.stdout else ""))
        raise
    finally:
        _stop(proc)
    assert proc.returncode == 0, _diagnosis(cluster, proc.args[6], out)
    assert "re-planned from 2 to 1 worker(s)" in out, out[-4000:]
    st = _status(redis_url, "lost-node-eo")
    assert st["state"] == "completed" and st["restarts"] >= 1
    counts = counts_in_state(redis_url, "lost-node-eo", "count")
    if counts != truth:  # keep what tells why: the driver's story and the executors' logs
        missing = sum(truth.values()) - sum(counts.values())
        raise AssertionError(f"counts differ from the truth by {missing} word(s) "
                             f"{_diagnosis(cluster, proc.args[6], out)}")


def test_a_smaller_run_grows_back_when_the_node_returns(cluster, redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.delete(COUNTS)
    first = load_sentences(client, 2000)
    name = "lost-node-grow"
    proc = _submit(cluster, "tests.spark_topologies:slow_wordcount", name, redis_url,
                   ["topology.message.timeout.secs=5"])
    try:
        # Sentences kept coming until the run is back on two workers: live however long that takes,
        # with little left to read after it.
        with StreamFeeder(redis_url, STREAM, per_round=500, every=0.1, keep_ahead=1500) as feeder:
            assert wait_for(lambda: _live_workers(redis_url, name) == 2 or proc.poll() is not None, 180)
            assert proc.poll() is None, proc.communicate()[0][-4000:]
            cluster.kill_worker(1)
            assert wait_for(lambda: _live_workers(redis_url, name) == 1 or proc.poll() is not None, 120), \
                "not re-planned onto one worker"
            t0 = time.monotonic()
            cluster.start_worker(1)
            assert wait_for(lambda: _live_workers(redis_url, name) == 2 or proc.poll() is not None, 120), \
                "did not grow back to two workers"
            assert proc.poll() is None, "the run ended before it could grow back"
            grew = time.monotonic() - t0
        truth = true_counts(first + feeder.sentences)
        out, _ = proc.communicate(timeout=300)
    except BaseException:
        _stop(proc)
        print(_diagnosis(cluster, proc.args[6], proc.stdout.read() if proc.stdout else ""))
        raise
    finally:
        _stop(proc)
    assert proc.returncode == 0, _diagnosis(cluster, proc.args[6], out)
    assert "relaunching on 2 worker(s)" in out, out[-4000:]
    counts = {k: int(v) for k, v in client.hgetall(COUNTS).items()}
    assert not {w: n for w, n in truth.items() if counts.get(w, 0) < n}, "sentences lost"
    print(f"\nnode back -> run on two workers again in {grew:.1f}s")
