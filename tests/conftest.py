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
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ["TOPOLOGY_HOME"] = str(ROOT)
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW_CONFIG"] = str(ROOT / "airflow.cfg")
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")

from topology_runtime.redis_server import RedisServer  # noqa: E402


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
