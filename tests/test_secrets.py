"""A Redis password stays secret: not on any command line (ps), not in what `topology submit`
prints, not in the driver's log, and registered with Airflow's secret masker for task logs."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import redis

from topology_runtime.control.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "pw-Zq9xT4kVb7"


@pytest.fixture(scope="module")
def secret_redis(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("secret-redis"), appendonly=False, password=PASSWORD)
    server.start()
    yield server.url
    server.stop()


def _cmdlines() -> list[str]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        out.append(" ".join(p.info["cmdline"] or []))
    return out


def test_airflow_task_logs_mask_the_password(secret_redis):
    from airflow.sdk.log import _secrets_masker  # noqa: PLC2701 - the masker task logs go through
    from topology_airflow.hooks import TopologyHook

    assert TopologyHook(redis_url=secret_redis).redis_url == secret_redis
    assert PASSWORD not in str(_secrets_masker().redact(f"connecting to {secret_redis}"))


@pytest.mark.slow
@pytest.mark.spark
def test_password_is_in_no_output_and_no_command_line(secret_redis):
    client = redis.Redis.from_url(secret_redis, decode_responses=True)
    from examples.wordcount import load_sentences

    load_sentences(client, 300)
    cmd = [sys.executable, "-m", "topology_runtime.cli", "submit", "examples.wordcount:topology", "--name",
           "secret-wc", "--master", "local[2]", "--workers", "2", "--redis", secret_redis,
           "--conf", f"topology.state.provider.config={{\"url\": \"{secret_redis}\"}}"]
    seen: list[str] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            seen.extend(c for c in _cmdlines() if PASSWORD in c and "pytest" not in c)
            time.sleep(0.2)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        # The test's own command line carries the password (it is the user typing it); every
        # process it starts must not.
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    finally:
        stop.set()
        t.join()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert PASSWORD not in out.stdout and PASSWORD not in out.stderr
    leaked = [c for c in seen if "topology_runtime.cli submit" not in c]
    assert not leaked, f"password on a command line: {leaked[0][:300]}"
    assert "completed" in out.stdout
