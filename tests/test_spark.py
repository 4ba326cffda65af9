"""Topologies on real Spark (spark-submit, barrier stage), real Redis. Each spark-submit costs a
JVM start, so this module keeps their number small."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from examples.wordcount import COUNTS, load_sentences
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.launchers.spark import SparkCluster, spark_env
from topology_runtime.testing import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent


def _truth(client, n):
    truth: dict[str, int] = {}
    for s in load_sentences(client, n):
        for w in s.split():
            truth[w] = truth.get(w, 0) + 1
    return truth


def _counts(client):
    return {k: int(v) for k, v in client.hgetall(COUNTS).items()}


def test_pyspark_python_matches_jars():
    import pyspark

    jars = list((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert jars, "pyspark ships no spark-core jar"
    assert jars[0].name.split("-")[-1].removesuffix(".jar") == pyspark.__version__


def test_wordcount_on_spark_local(redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = _truth(client, 3000)
    with SparkCluster("local[2]", workers=2, redis_url=redis_url, log_dir=str(tmp_path), progress_interval=1) as c:
        run = c.submit("spark-wc", "tests.spark_topologies:wordcount", {"redis.url": redis_url})
        status = run.wait(240)
        log = run.log()
    assert status.state == "completed", log[-3000:]
    assert run.proc.returncode == 0
    assert _counts(client) == truth
    assert status.components["sentences"].acked == 3000
    # The driver log tells the story: progress lines, worker lines with context, a summary.
    assert "progress [" in log
    assert "[spark-wc worker=0 " in log and "[spark-wc worker=1 " in log
    assert "run 'spark-wc' completed" in log
    # The control plane knows the run after it ended.
    rec = ControlPlane(redis_url).get("spark-wc")
    assert rec is not None and rec.state == "completed" and not rec.live
    out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "status", "spark-wc", "--redis", redis_url],
                         capture_output=True, text=True, env=spark_env(), cwd=ROOT, timeout=60)
    assert out.returncode == 0 and "spark-wc: completed" in out.stdout and "sentences" in out.stdout


def test_sigkill_a_barrier_task_mid_run(redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = _truth(client, 2000)
    conf = {"redis.url": redis_url, "topology.message.timeout.secs": 3, "topology.max.spout.pending": 100}
    with SparkCluster("local[2]", workers=2, redis_url=redis_url, log_dir=str(tmp_path), progress_interval=1) as c:
        run = c.submit("spark-kill", "tests.spark_topologies:slow_wordcount", conf)
        assert wait_for(lambda: run.status().state == "running" and len(run.pids) == 2, 120), run.log()[-3000:]
        assert wait_for(lambda: run.status().components["split"].executed > 100, 60)
        victim = run.pids[1]
        os.kill(victim, signal.SIGKILL)
        status = run.wait(300)
        log = run.log()
    assert status.state == "completed", log[-4000:]
    assert status.restarts >= 1
    assert "relaunching them" in log
    counts = _counts(client)
    missing = {w: n for w, n in truth.items() if counts.get(w, 0) < n}
    assert not missing, f"under-counted after a worker kill: {list(missing.items())[:5]}"


def test_kill_command_and_duplicate_run(redis_url, tmp_path):
    cp = ControlPlane(redis_url)
    with SparkCluster("local[2]", workers=2, redis_url=redis_url, log_dir=str(tmp_path), progress_interval=1) as c:
        run = c.submit("spark-forever", "tests.spark_topologies:unbounded", {})
        assert wait_for(lambda: run.status().state == "running", 120), run.log()[-3000:]
        # A second live run with the same id is refused with a clear error.
        second = subprocess.run(
            [sys.executable, "-m", "topology_runtime.cli", "run", "tests.spark_topologies:unbounded",
             "--name", "spark-forever", "--redis", redis_url],
            capture_output=True, text=True, env=spark_env(), cwd=ROOT, timeout=60)
        assert second.returncode == 5
        assert "already live" in second.stderr
        # Inspection reaches the barrier tasks too: a log level in every worker, then a sample.
        from topology_runtime.control import inspection

        # The level for a few seconds, the samples for longer: both workers revert the level
        # (no restart, nothing else asked) while the run goes on.
        inspection.request_log_level(cp, "spark-forever", "DEBUG", logger="topology", expiry_secs=8)
        inspection.request_sample(cp, "spark-forever", "ticks", percent=100, duration_secs=30)
        assert wait_for(lambda: inspection.read_samples(cp, "spark-forever", 5), 30), run.log()[-3000:]
        assert {s["component"] for s in inspection.read_samples(cp, "spark-forever", 5)} == {"ticks"}
        assert wait_for(lambda: run.log().count("log level of topology set to DEBUG") == 2, 10), run.log()[-3000:]
        assert wait_for(lambda: run.log().count("log level of topology back to") == 2, 30), run.log()[-3000:]
        assert run.status().state == "running"
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "kill", "spark-forever",
                              "--redis", redis_url], capture_output=True, text=True, env=spark_env(), cwd=ROOT,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        status = run.wait(60)
        assert time.monotonic() - t0 < 10, "kill took longer than 10 s"
    assert status.state == "killed"
    assert run.proc.returncode == 2
    assert not cp.is_live("spark-forever")


def _pins(*names: str) -> list[str]:
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    return [line.strip() for line in lock if line.split("==")[0].strip().lower() in names]


def test_packed_env_shipped_with_archives_on_local_cluster(redis_url, tmp_path):
    """The cluster recipe of docs/operations.md: compiled dependencies (pyzmq) travel in a
    venv-pack archive (--archives), executors run its Python; on separate executor JVMs."""
    env = tmp_path / "packenv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + _pins("pyzmq", "msgpack", "redis"), check=True, timeout=300)
    subprocess.run(pip + ["--no-deps", str(ROOT)], check=True, timeout=300, cwd=tmp_path)
    archive = tmp_path / "topology-env.tar.gz"
    subprocess.run([str(Path(sys.executable).parent / "venv-pack"), "-p", str(env), "-o", str(archive), "-q"],
                   check=True, timeout=300)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = _truth(client, 1000)
    spark_conf = {"spark.archives": f"{archive}#env", "spark.pyspark.python": "./env/bin/python",
                  "spark.pyspark.driver.python": sys.executable}
    with SparkCluster("local-cluster[2,1,1024]", workers=2, redis_url=redis_url, spark_conf=spark_conf,
                      log_dir=str(tmp_path), progress_interval=1) as c:
        run = c.submit("packed", "tests.spark_topologies:wordcount", {"redis.url": redis_url})
        status = run.wait(300)
        log = run.log()
    assert status.state == "completed", log[-3000:]
    assert _counts(client) == truth
    workers = ControlPlane(redis_url).get("packed").status["workers"]
    pythons = {w["python"] for w in workers.values()}
    # local-cluster's workers unpack into $SPARK_HOME/work (inside the venv) and never clean up:
    # remove what this run left there (the app's dir, found from its executors' interpreter path).
    for p in pythons:
        if "/work/app-" in p:
            app = p[: p.index("/work/app-") + len("/work/")] + p[p.index("/work/app-") + 6:].split("/")[0]
            shutil.rmtree(app, ignore_errors=True)
    # Each executor unpacked the archive in its own work dir and runs that interpreter.
    assert len(pythons) == 2 and all(p.endswith("/env/bin/python") and "/work/app-" in p for p in pythons), pythons
