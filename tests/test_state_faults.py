"""Stateful word count under faults: a worker SIGKILLed during PREPARE, between PREPARE and
COMMIT, and during COMMIT; Redis restarted from its AOF mid-run; the driver killed, then
`topology recover` and a resubmit. At-least-once: every count >= the truth, nothing left
prepared."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from spark_topologies import exactly_once_wordcount, slow_stateful_wordcount

from examples.stateful_wordcount import counts_in_state
from examples.wordcount import load_sentences, true_counts
from topology_runtime import LocalCluster
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
CONF = {"topology.state.provider": "redis", "topology.state.checkpoint.interval.ms": 200,
        "topology.message.timeout.secs": 3, "topology.max.spout.pending": 200}
EO = {**CONF, "topology.state.exactly.once": True, "topology.max.spout.pending": 100}


def _checkpoint_txid(client, topology_id):
    raw = client.hgetall(f"topology:{{{topology_id}:ctl}}:checkpoint")
    return int(raw[b"txid"]) if raw else -1


def _assert_at_least_once(redis_url, client, topology_id, truth):
    counts = counts_in_state(redis_url, topology_id, "count")
    short = {w: (counts.get(w, 0), n) for w, n in truth.items() if counts.get(w, 0) < n}
    assert not short, f"under-counted: {list(short.items())[:5]}"
    assert client.keys(f"topology:{{{topology_id}:*}}:prepare") == []


@pytest.mark.parametrize("point", ["prepare", "between", "commit"])
def test_worker_killed_at_each_checkpoint_phase(point, redis_url, tmp_path, monkeypatch):
    client = redis.Redis.from_url(redis_url)
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 1500))
    marker = tmp_path / "fired"
    monkeypatch.setenv("TOPOLOGY_FAULT", f"{point}:3")
    monkeypatch.setenv("TOPOLOGY_FAULT_ONCE", str(marker))
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit(f"f-{point}", slow_stateful_wordcount(), {"redis.url": redis_url, **CONF})
        status = run.wait(180)
    assert marker.exists(), "the fault never fired"
    assert status.state == "completed", status.error
    assert status.restarts >= 1
    _assert_at_least_once(redis_url, client, f"f-{point}", truth)


@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once"])
def test_redis_restarted_from_aof_mid_run(redis_server, redis_url, mode):
    client = redis.Redis.from_url(redis_url)
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 1500))
    topology, conf = (slow_stateful_wordcount(), CONF) if mode == "at-least-once" else (exactly_once_wordcount(), EO)
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("f-redis", topology, {"redis.url": redis_url, **conf})
        assert wait_for(lambda: _checkpoint_txid(client, "f-redis") >= 2, 60)
        redis_server.kill()  # SIGKILL: only what the AOF fsynced survives (appendfsync always)
        time.sleep(1.0)
        redis_server.start()
        status = run.wait(240)
    assert status.state == "completed", status.error
    if mode == "exactly-once":
        counts = counts_in_state(redis_url, "f-redis", "count")
        assert counts == truth
    _assert_at_least_once(redis_url, client, "f-redis", truth)


@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once"])
def test_driver_killed_then_recover_and_resubmit(redis_url, tmp_path, mode):

    client = redis.Redis.from_url(redis_url)
    truth = true_counts(load_sentences(redis.Redis.from_url(redis_url, decode_responses=True), 1500))
    env = {**os.environ, "TOPOLOGY_LEASE_TTL_MS": "2000"}
    ref, conf = (("spark_topologies:slow_stateful_wordcount", CONF) if mode == "at-least-once"
                 else ("spark_topologies:exactly_once_wordcount", EO))
    cmd = [sys.executable, "-m", "topology_runtime.cli", "run", ref,
           "--name", "f-driver", "--redis", redis_url, "--workers", "2"]
    cmd += [arg for k, v in conf.items() for arg in ("--conf", f"{k}={json.dumps(v)}")]
    driver = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        assert wait_for(lambda: _checkpoint_txid(client, "f-driver") >= 2, 60)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        # Orphaned workers notice the silent supervisor and stop; the lease then expires.
        assert wait_for(lambda: not client.exists("topology:{f-driver:ctl}:lease"), 30)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert wait_for(lambda: subprocess.run(["pgrep", "-s", str(driver.pid)], capture_output=True).returncode != 0,
                    20), "workers of the killed driver are still running"
    rec = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "recover", "f-driver", "--redis", redis_url],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert rec.returncode == 0, rec.stderr
    assert "checkpoint after: COMMITTED(" in rec.stdout
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    if mode == "exactly-once":
        assert counts_in_state(redis_url, "f-driver", "count") == truth
    _assert_at_least_once(redis_url, client, "f-driver", truth)
