"""Session-wide real services: one Redis server and one Airflow database per test session."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "plugins"), str(ROOT / "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

# Spark executors and spawned CLIs must import the project and use this interpreter; Airflow
# must read the repo's airflow.cfg with its DB in a per-session folder. Set before any import.
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="topology-airflow-")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), str(ROOT / "plugins"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")] if p)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ["TOPOLOGY_HOME"] = str(ROOT)
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW_CONFIG"] = str(ROOT / "airflow.cfg")
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")

from airflow_live import airflow_db, airflow_live  # noqa: E402, F401  (session Airflow DB + live Airflow)
from kafka_broker import kafka  # noqa: E402, F401  (session Kafka-protocol broker, Tansu)
from redis_clusters import cluster_url, redis_cluster, redis_sentinel, sentinel_url  # noqa: E402, F401  (Cluster, Sentinel)
from spark_standalone import spark_standalone  # noqa: E402, F401  (session Spark standalone cluster)

from topology_runtime.control.redis_server import RedisServer  # noqa: E402


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """One real Redis for the session, AOF with fsync on every write (restart tests rely on it)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendonly=True, appendfsync="always")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server):
    if redis_server.proc is None:  # a test stopped it: bring it back for the next one
        redis_server.start()
    yield redis_server.url
    redis.Redis.from_url(redis_server.url).flushall()


@pytest.fixture
def redis_client(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


# --- one semantic suite, parametrised by launcher ---------------------------------------------------
# Every test that takes `make_cluster` runs on LocalCluster; those marked `spark_subset` also run
# on SparkCluster (local[2]) and those marked `local_cluster` on local-cluster[2,1,1024]
# (separate executor JVMs). Spark costs a JVM start per run, hence a subset.
def pytest_configure(config):
    config.addinivalue_line("markers", "spark_subset: also run this launcher test on Spark local[2]")
    config.addinivalue_line("markers", "local_cluster: also run this launcher test on local-cluster[2,1,1024]")


def pytest_generate_tests(metafunc):
    if "launcher" not in metafunc.fixturenames:
        return
    params = [pytest.param("local", id="local")]
    spark_marks = [pytest.mark.spark, pytest.mark.slow]
    if metafunc.definition.get_closest_marker("spark_subset"):
        params.append(pytest.param("spark", id="spark", marks=spark_marks))
    if metafunc.definition.get_closest_marker("local_cluster"):
        params.append(pytest.param("local-cluster", id="local-cluster", marks=spark_marks))
    metafunc.parametrize("launcher", params)


@pytest.fixture
def make_cluster(launcher, redis_url, tmp_path):
    from topology_runtime import LocalCluster
    from topology_runtime.launchers.spark import SparkCluster

    clusters = []

    def make(workers: int = 2):
        if launcher == "local":
            cluster = LocalCluster(workers=workers)
        else:
            master = "local[2]" if launcher == "spark" else "local-cluster[2,1,1024]"
            cluster = SparkCluster(master, workers=workers, redis_url=redis_url, log_dir=str(tmp_path),
                                   progress_interval=1)
        clusters.append(cluster)
        return cluster

    yield make
    for c in clusters:
        c.shutdown()


@pytest.fixture
def cluster_factory(make_cluster):
    """``make(workers)`` -> a cluster of the launcher under test (LocalCluster for every test; Spark
    too for tests marked ``spark_subset``); every cluster made is shut down after the test."""
    return make_cluster


def pytest_sessionfinish(session, exitstatus):
    """The session's Airflow home (DB, task logs) goes when the session passed; after a failure
    it stays for reading, and its path is printed."""
    import shutil

    if exitstatus == 0:
        shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)
    else:
        print(f"\nAirflow home of this session (DB, task logs) kept for reading: {_AIRFLOW_HOME}")
