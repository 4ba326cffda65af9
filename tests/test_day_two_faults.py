"""A driver SIGKILLed in the middle of a rebalance, a rescale or a live savepoint: the run it leaves is
brought back by `topology recover` and a resubmit with nothing lost and, exactly-once, nothing
counted twice; a savepoint the crash let finish restores to exact counts too (the driver is the
`topology run` process, its workers local processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from examples.stateful_wordcount import counts_in_state
from examples.wordcount import load_sentences, true_counts
from state import savepoints
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
EO = {"topology.state.provider": "redis", "topology.state.checkpoint.interval.ms": 200,
      "topology.message.timeout.secs": 3, "topology.state.exactly.once": True, "topology.max.spout.pending": 100}
ENV = {**os.environ, "TOPOLOGY_LEASE_TTL_MS": "2000"}


def _cmd(name, redis_url, workers=2, extra=()):
    cmd = [sys.executable, "-m", "topology_runtime.cli", "run", "spark_topologies:exactly_once_wordcount",
           "--name", name, "--redis", redis_url, "--workers", str(workers), *extra]
    return cmd + [arg for k, v in EO.items() for arg in ("--conf", f"{k}={json.dumps(v)}")]


def _txid(client, name):
    raw = client.hgetall(f"topology:{{{name}:ctl}}:checkpoint")
    return int(raw[b"txid"]) if raw else -1


@pytest.mark.parametrize("operation", ["rebalance", "rescale", "savepoint"])
def test_driver_killed_during_a_day_two_operation(redis_url, operation):
    client = redis.Redis.from_url(redis_url)
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 1500))
    name = f"f2-{operation}"
    cp = ControlPlane(redis_url)
    driver = subprocess.Popen(_cmd(name, redis_url), cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: _txid(client, name) >= 2, 60)
        if operation == "rebalance":
            assert cp.request_rebalance(name, 3, timeout=5)
            request = f"topology:{{{name}:ctl}}:rebalance"
        elif operation == "rescale":  # the keyed count 2 -> 3 tasks; the resubmit below has 2 again
            assert cp.request_rebalance(name, None, timeout=5, parallelism={"count": 3})
            request = f"topology:{{{name}:ctl}}:rebalance"
        else:
            assert cp.request_savepoint(name, "mid")
            request = f"topology:{{{name}:ctl}}:savepoint-request"
        assert wait_for(lambda: not client.exists(request), 10)  # the driver took it: it is under way
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        assert wait_for(lambda: not client.exists(f"topology:{{{name}:ctl}}:lease"), 30)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert wait_for(lambda: subprocess.run(["pgrep", "-s", str(driver.pid)], capture_output=True).returncode != 0,
                    20), "workers of the killed driver are still running"
    rec = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "recover", name, "--redis", redis_url],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert rec.returncode == 0, rec.stderr
    again = subprocess.run(_cmd(name, redis_url, workers=3), cwd=ROOT, env=ENV, capture_output=True, text=True,
                           timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert counts_in_state(redis_url, name, "count") == truth  # nothing lost, nothing counted twice
    if operation == "savepoint":
        saved = [m.name for m in savepoints.list_savepoints(client, name)]
        if saved:  # the crash let it finish: a consistent cut, restored to exact counts
            restored = subprocess.run(_cmd(f"{name}-restored", redis_url, extra=("--from-savepoint", f"{name}/mid")),
                                      cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=240)
            assert restored.returncode == 0, restored.stderr[-3000:]
            assert counts_in_state(redis_url, f"{name}-restored", "count") == truth
