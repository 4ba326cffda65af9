"""Topologies on a real Spark standalone cluster (tests/spark_standalone.py): a master and two
1-core workers, each worker on its own loopback address in a mount namespace without this
project or its venv; the driver on 127.0.0.2. Nothing is shared but Spark and a plain Python 3.11:
the code, the runtime and its dependencies reach the executors with the job (docs/cluster.md).
One cluster per session; each test is one spark-submit (a driver JVM and two executor JVMs)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import redis

from examples.wordcount import COUNTS, load_sentences
from topology_runtime.control.control_plane import ControlPlane

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
DRIVER_IP = "127.0.0.2"


def _truth(client, n):
    truth: dict[str, int] = {}
    for s in load_sentences(client, n):
        for w in s.split():
            truth[w] = truth.get(w, 0) + 1
    return truth


def _counts(client):
    return {k: int(v) for k, v in client.hgetall(COUNTS).items()}


def _driver_env(**extra) -> dict[str, str]:
    """The submitting machine: this venv and the project, its own address 127.0.0.2."""
    return {**os.environ, "SPARK_LOCAL_IP": DRIVER_IP, **extra}


def _submit(cluster, topology: str, name: str, redis_url: str, *args: str, env=None, timeout=300):
    cmd = [sys.executable, "-m", "topology_runtime.cli", "submit", topology, "--name", name, "--master",
           cluster.url, "--workers", "2", "--redis", redis_url, "--progress-interval", "1", *args]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env or _driver_env(), cwd=ROOT, timeout=timeout)
    return out.returncode, out.stdout + out.stderr, time.monotonic() - t0


class Listeners:
    """Samples, while a run goes on, the TCP sockets its processes listen on: the submitting
    process's tree (spark-submit, the driver JVM, the driver's Python) and what the cluster's
    workers started (executor JVMs, Python workers)."""

    def __init__(self, cluster, root_pid: int | None = None) -> None:
        self.cluster, self.root_pid = cluster, root_pid
        self.seen: dict[tuple[str, int], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pids(self) -> dict[int, str]:
        roots = [psutil.Process(p.pid) for p in self.cluster.workers.values() if p.poll() is None]
        procs = [c for r in roots for c in r.children(recursive=True)]  # not the worker daemons themselves
        if self.root_pid:
            me = psutil.Process(self.root_pid)
            procs += [me, *me.children(recursive=True)]
        out = {}
        for p in procs:
            try:
                out[p.pid] = " ".join(p.cmdline())
            except psutil.Error:
                pass
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = self._pids()
            for c in psutil.net_connections("tcp"):
                if c.status == psutil.CONN_LISTEN and c.pid in pids:
                    self.seen[(c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)] = pids[c.pid]
            self._stop.wait(0.3)

    def __enter__(self) -> Listeners:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    @staticmethod
    def kind(cmd: str) -> str:
        if "org.apache.spark.deploy.SparkSubmit" in cmd:
            return "driver JVM"
        if "spark_main.py" in cmd:
            return "driver Python"
        if "CoarseGrainedExecutorBackend" in cmd:
            return "executor JVM"
        if "pyspark.daemon" in cmd:
            return "executor Python"
        return cmd[:80]

    def by_ip(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for (ip, port), cmd in sorted(self.seen.items()):
            out.setdefault(ip, []).append(f"{port} {self.kind(cmd)}")
        return out


# A user's project whose own packages are named like this project's top-level `plugins` and
# `topology_airflow`: they are the user's (the executors get them in the code zip), and each task
# records where it imported its class from.
USER_PROJECT = {
    "userwc.py": """
from examples.wordcount import STREAM
from plugins.split import Split
from topology_airflow.count import Count
from topology_runtime import TopologyBuilder
from topology_runtime.connectors import RedisStreamSpout


def topology():
    builder = TopologyBuilder()
    builder.set_spout("sentences", RedisStreamSpout(STREAM, fields=["sentence"], bounded=True), 1)
    builder.set_bolt("split", Split(), 2).local_or_shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), 2).fields_grouping("split", ["word"]) \\
        .add_configuration("topology.tick.tuple.freq.secs", 0.2)
    return builder.create_topology()
""",
    "plugins/__init__.py": "",
    "plugins/split.py": """
from examples.wordcount import SplitSentence
from state.connection import connect


class Split(SplitSentence):
    def prepare(self, conf, context):
        super().prepare(conf, context)
        connect(conf["redis.url"]).hset("userwc:imported", f"split-{context.task_id}", __file__)
        import confluent_kafka  # the Kafka client ships with the runtime's dependencies, librdkafka too

        connect(conf["redis.url"]).hset("userwc:kafka", f"split-{context.task_id}", confluent_kafka.libversion()[0])
""",
    "topology_airflow/__init__.py": "",
    "topology_airflow/count.py": """
from examples.wordcount import WordCount
from state.connection import connect


class Count(WordCount):
    def prepare(self, conf, context):
        super().prepare(conf, context)
        connect(conf["redis.url"]).hset("userwc:imported", f"count-{context.task_id}", __file__)
""",
}


def test_wordcount_through_the_cli_on_a_standalone_cluster(spark_standalone, redis_url, tmp_path):
    """`topology submit ... --master spark://...` from a user's project with nothing else: the
    executors' nodes have no project, no venv, no PYTHONPATH; the project's own packages named
    `plugins` and `topology_airflow` are shipped and imported there; counts exact; every address
    of the run on its own host."""
    project = tmp_path / "project"
    for rel, text in USER_PROJECT.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text.lstrip())
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = _truth(client, 6000)
    cmd = [sys.executable, "-m", "topology_runtime.cli", "submit", "userwc:topology", "--name", "sa-wc",
           "--master", spark_standalone.url, "--workers", "2", "--redis", redis_url, "--progress-interval", "1"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_driver_env(PYTHONPATH=str(ROOT)), cwd=project)
    with Listeners(spark_standalone, proc.pid) as listeners:
        out, _ = proc.communicate(timeout=300)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, out[-5000:] + "\n" + "\n".join(list(spark_standalone.executor_logs().values())[-2:])[-5000:]
    assert _counts(client) == truth
    assert "shipping code: examples, plugins, topology_airflow, userwc (" in out, out[-3000:]
    assert "shipping environment: " in out and "executors run python3.11" in out
    imported = client.hgetall("userwc:imported")  # one entry per task: 2 split, 2 count
    assert len(imported) == 4 and all(".zip/" in f and str(project) not in f for f in imported.values()), imported
    assert {f.split(".zip/")[1] for f in imported.values()} == {"plugins/split.py", "topology_airflow/count.py"}
    import confluent_kafka

    kafka = client.hgetall("userwc:kafka")  # the executors imported confluent-kafka from the shipped deps
    assert len(kafka) == 2 and set(kafka.values()) == {confluent_kafka.libversion()[0]}, kafka
    assert f"supervisor at tcp://{DRIVER_IP}:" in out
    rec = ControlPlane(redis_url).get("sa-wc")
    assert rec.state == "completed" and rec.status["restarts"] == 0
    workers = rec.status["workers"]
    assert {w["host"] for w in workers.values()} == set(spark_standalone.worker_hosts)
    assert all(w["address"].startswith(f"tcp://{w['host']}:") for w in workers.values()), workers
    # A plain interpreter from the node's PATH, not this venv's (which the nodes do not have).
    assert {w["python"] for w in workers.values()} == {"/usr/bin/python3.11"}, workers
    # Every listener of the run is on its own host's address: the driver's (Spark RPC, block
    # manager, the supervisor) on 127.0.0.2, each executor's and worker's on its node's.
    by_ip = listeners.by_ip()
    assert {"driver Python", "driver JVM"} <= {k.split(" ", 1)[1] for k in by_ip.get(DRIVER_IP, [])}, by_ip
    for host in spark_standalone.worker_hosts:
        assert {"executor Python", "executor JVM"} <= {k.split(" ", 1)[1] for k in by_ip.get(host, [])}, by_ip
    # On 127.0.0.1 only the Py4J gateway between the driver's Python and its JVM (Spark binds it
    # to loopback, by design); the other JVM<->Python channels use Unix sockets on spark:// masters.
    assert [k.split(" ", 1)[1] for k in by_ip.get("127.0.0.1", [])] == ["driver JVM"], by_ip
    assert not {"0.0.0.0", "::"} & set(by_ip), by_ip
    print(f"\nsubmit -> completed on the standalone cluster: {elapsed:.1f}s")


def test_wordcount_through_the_operator_on_a_standalone_cluster(spark_standalone, airflow_db, redis_url,
                                                                monkeypatch):
    from structlog.testing import capture_logs
    from topology_airflow import SubmitTopologyOperator

    host, _, port = spark_standalone.url.removeprefix("spark://").partition(":")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE",
                       f'{{"conn_type": "spark", "host": "spark://{host}", "port": {port}}}')
    monkeypatch.setenv("SPARK_LOCAL_IP", DRIVER_IP)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = _truth(client, 3000)
    op = SubmitTopologyOperator(task_id="wc", topology="tests.spark_topologies:wordcount", name="sa-af-wc",
                                workers=2, conn_id="spark_standalone", redis_url=redis_url, progress_interval=1)
    with capture_logs() as logs:
        result = op.execute(context={})
    lines = [e["event"] % e["positional_args"] if e.get("positional_args") else e["event"] for e in logs]
    text = "\n".join(lines)
    assert result["state"] == "completed", text[-4000:]
    assert _counts(client) == truth
    assert "shipping code: examples, tests" in text
    assert "run 'sa-af-wc' completed" in text  # the driver's summary, streamed into the task log
    workers = ControlPlane(redis_url).get("sa-af-wc").status["workers"]
    assert {w["host"] for w in workers.values()} == set(spark_standalone.worker_hosts)


def test_import_error_on_the_executors_fails_at_once_with_its_traceback(spark_standalone, redis_url):
    """The topology imports on the driver but not on the executors: exit 4 after one launch, the
    executor's Python traceback in the driver's output and in the run's status."""
    code, out, elapsed = _submit(spark_standalone, "tests.spark_topologies:executor_import_error", "sa-import",
                                 redis_url, env=_driver_env(TOPOLOGY_TEST_DRIVER="1"))
    assert code == 4, out[-4000:]
    assert "relaunching" not in out and "epoch 1" not in out, out[-4000:]
    assert "Traceback (most recent call last)" in out
    assert "ImportError: planted: tests.driver_only imports only on the driver" in out
    rec = ControlPlane(redis_url).get("sa-import")
    assert rec.state == "failed" and rec.status["restarts"] == 0
    assert "planted" in rec.status["error"]
    assert any("Traceback" in (e.get("traceback") or "") for e in rec.status["errors"])
    assert elapsed < 60, f"took {elapsed:.0f}s"


def test_open_error_fails_at_once_with_its_traceback(spark_standalone, redis_url):
    code, out, elapsed = _submit(spark_standalone, "tests.spark_topologies:broken", "sa-broken", redis_url)
    assert code == 1, out[-4000:]
    assert "epoch 1" not in out, out[-4000:]
    assert "ConnectionError: cannot reach the source (planted failure)" in out
    assert "Traceback (most recent call last)" in out
    rec = ControlPlane(redis_url).get("sa-broken")
    assert rec.state == "failed" and rec.status["restarts"] == 0
    assert "cannot reach the source" in rec.status["error"]
    assert elapsed < 45, f"took {elapsed:.0f}s"  # no relaunch, no worker left waiting for a stop


def test_more_workers_than_slots_fails_within_seconds_naming_both_numbers(spark_standalone, redis_url):
    spark_standalone.wait_idle()
    code, out, elapsed = _submit(spark_standalone, "tests.spark_topologies:unbounded", "sa-slots", redis_url,
                                 "--workers", "3", "--spark-conf", "spark.cores.max=3")
    assert code == 4, out[-4000:]
    assert "needs 3 worker(s)" in out and "offers 2 task slot(s)" in out, out[-3000:]
    assert "launching" not in out  # checked before any barrier stage
    rec = ControlPlane(redis_url).get("sa-slots")
    assert rec.state == "failed" and "offers 2 task slot(s)" in rec.status["error"]
    assert elapsed < 45, f"took {elapsed:.0f}s"


def test_rebalance_on_the_standalone_cluster(spark_standalone, redis_url, capsys):
    """2 slots: 3 workers refused before anything changes (naming 2 slots); 2 -> 1 relaunches the
    barrier stage on one executor; exactly-once counts exact."""
    import json

    from examples.stateful_wordcount import counts_in_state
    from examples.wordcount import true_counts
    from topology_runtime.api.exit_codes import ExitCode
    from topology_runtime.cli.main import main as cli
    from topology_runtime.testing import wait_for

    spark_standalone.wait_idle()
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    truth = true_counts(load_sentences(client, 6000))
    eo = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
          "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
          "topology.max.spout.pending": 100}
    cmd = [sys.executable, "-m", "topology_runtime.cli", "submit", "tests.spark_topologies:exactly_once_wordcount",
           "--name", "sa-rb", "--master", spark_standalone.url, "--workers", "2", "--redis", redis_url,
           "--progress-interval", "1", *[x for k, v in eo.items() for x in ("--conf", f"{k}={json.dumps(v)}")]]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_driver_env(),
                            cwd=ROOT)
    try:
        cp = ControlPlane(redis_url)

        def split_executed() -> int:
            rec = cp.get("sa-rb")
            return ((((rec.status or {}) if rec else {}).get("components") or {}).get("split") or {}).get("executed", 0)

        assert wait_for(lambda: split_executed() > 300 or proc.poll() is not None, 180)
        assert proc.poll() is None
        assert cli(["rebalance", "sa-rb", "--workers", "3", "--redis", redis_url]) == ExitCode.REFUSED
        assert "the cluster offers 2 task slot(s)" in capsys.readouterr().err
        assert cli(["rebalance", "sa-rb", "--workers", "1", "--redis", redis_url]) == ExitCode.COMPLETED
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-4000:]
    assert "launching 1 worker(s) as a barrier stage" in out, out[-4000:]
    assert counts_in_state(redis_url, "sa-rb", "count") == truth
