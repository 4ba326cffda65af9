"""Pause and resume a live run (Storm's deactivate/activate) on real worker processes: the
spouts stop calling next_tuple (their deactivate() is called) while in-flight trees finish and
checkpoints, heartbeats, status reports and lease renewals go on; `topology status` and the run
record say paused; a worker SIGKILLed while paused comes back paused; resume calls activate() and
the spouts go on. Through the CLI and the run handle; a run that is not live is refused (exit 6)."""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis
from runtime_components import CountInState, Ticker

from topology_runtime import LocalCluster, TopologyBuilder
from topology_runtime.api.exit_codes import ExitCode
from topology_runtime.cli.main import main as cli
from topology_runtime.control.control_plane import LEASE_TTL_MS, ControlPlane
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow


def _topology():
    b = TopologyBuilder()
    b.set_spout("ticks", Ticker(), 2)
    b.set_bolt("count", CountInState(), 2).shuffle_grouping("ticks")
    return b.create_topology()


def _checkpoint_txid(r, name):
    v = r.hget(f"topology:{{{name}:ctl}}:checkpoint", "txid")
    return int(v) if v is not None else -1


def test_pause_and_resume_through_the_cli_and_the_handle(redis_url, capsys):
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    name = "pausing"
    conf = {"redis.url": redis_url, "test.redis.url": redis_url, "topology.state.provider": "redis",
            "topology.state.checkpoint.interval.ms": 200, "topology.stats.interval.secs": 0.2}
    cp = ControlPlane(redis_url)
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit(name, _topology(), conf)
        try:
            assert wait_for(lambda: run.status().components["ticks"].emitted > 200, 30), run.status()
            assert r.lrange("t:activation", 0, -1) == ["activate", "activate"]  # each task, once opened

            assert cli(["pause", name, "--redis", redis_url]) == ExitCode.COMPLETED
            assert "pausing: paused" in capsys.readouterr().out
            assert r.lrange("t:activation", 0, -1)[2:] == ["deactivate", "deactivate"]
            # In-flight trees finish; then nothing new is emitted.
            assert wait_for(lambda: (s := run.status().components["ticks"]).acked == s.emitted, 10), run.status()
            emitted = run.status().components["ticks"].emitted
            txid = _checkpoint_txid(r, name)
            # The paused window, longer than a lease renewal period: every worker keeps sending
            # heartbeats, the driver keeps publishing the run's status and renewing its lease.
            ages, updated, ttls = [], [], []
            deadline = time.monotonic() + LEASE_TTL_MS / 5000 + 1.5
            while time.monotonic() < deadline:
                rec = cp.get(name)
                ages += [w["heartbeat_age_secs"] for w in rec.status["workers"].values()]
                updated.append(rec.status["updated"])
                ttls.append(r.pttl(f"topology:{{{name}:ctl}}:lease"))
                time.sleep(0.25)
            assert ages and None not in ages and max(ages) < 2.0, ages  # stats every 0.2 s: a heartbeat each
            assert len(set(updated)) >= 2, updated  # the status went on being published
            assert min(ttls) > LEASE_TTL_MS / 2 and any(b > a for a, b in zip(ttls, ttls[1:])), ttls  # renewed
            st = run.status()
            assert st.paused and st.state == "running"
            assert st.components["ticks"].emitted == emitted
            assert _checkpoint_txid(r, name) >= txid + 2  # checkpoints go on while paused

            # The record says paused too (what `topology status` and the plugin read).
            assert wait_for(lambda: cp.get(name).display_state == "paused", 10)
            assert cli(["status", name, "--redis", redis_url]) == ExitCode.COMPLETED
            out = capsys.readouterr().out
            assert out.startswith("pausing: paused") and "parallelism: ticks=2, count=2" in out, out

            # A worker killed while paused starts again paused: its spout emits nothing new.
            worker = run.plan.task_worker[run.plan.component_tasks["ticks"][0]]
            os.kill(run.pids[worker], signal.SIGKILL)
            assert wait_for(lambda: run.status().restarts >= 1 and run.status().state == "running", 30)
            time.sleep(1.0)
            before = run.status().components["ticks"].emitted
            time.sleep(1.0)
            assert run.status().components["ticks"].emitted == before and run.status().paused

            run.resume()  # the handle, this time
            assert wait_for(lambda: run.status().components["ticks"].emitted > before + 100, 15), run.status()
            assert not run.status().paused
            assert r.lrange("t:activation", 0, -1).count("activate") >= 4  # each task again (+ the restarted one)
            assert wait_for(lambda: cp.get(name).display_state == "running", 10)
        finally:
            status = run.kill()
    assert status.components["ticks"].failed == 0  # nothing was lost to the pause
    assert cli(["pause", name, "--redis", redis_url]) == ExitCode.NO_SUCH_RUN
    assert "no live run named 'pausing'" in capsys.readouterr().err
