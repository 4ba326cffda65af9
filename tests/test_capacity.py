"""Capacity and backpressure, measured by the workers: a deliberately slow bolt shows capacity
near 1 and holds its producer's spouts back (backpressure on that worker), while a fast bolt
beside it stays low; both in RunStatus, the run record and the Prometheus exposition."""

from __future__ import annotations

import time

import pytest

from topology_runtime import BasicBolt, LocalCluster, Spout, TopologyBuilder
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.control.metrics import exposition
from topology_runtime.testing import wait_for


class Lines(Spout):
    outputs = ["line"]

    def next_tuple(self):
        self.emit(["x" * 1000])  # unacked, unbounded: only backpressure holds it back


class Slow(BasicBolt):
    outputs = []

    def execute(self, tup):
        time.sleep(0.002)


class Fast(BasicBolt):
    outputs = []

    def execute(self, tup):
        pass


@pytest.mark.slow  # a live run driven into backpressure
def test_a_slow_bolt_is_near_capacity_one_and_holds_its_producer_back(redis_url):
    b = TopologyBuilder()
    b.set_spout("lines", Lines(), 1)
    b.set_bolt("slow", Slow(), 1).shuffle_grouping("lines")
    b.set_bolt("fast", Fast(), 1).shuffle_grouping("lines")
    conf = {"topology.acker.executors": 0, "topology.transfer.peer.window.bytes": 256 << 10}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("capacity", b.create_topology(), conf)
        try:
            plan = run.plan
            spout_worker = plan.task_worker[plan.component_tasks["lines"][0]]
            assert plan.task_worker[plan.component_tasks["slow"][0]] != spout_worker  # the slow bolt is remote

            def settled():
                st = run.status()
                slow, fast = st.components["slow"].capacity, st.components["fast"].capacity
                return slow is not None and fast is not None and slow > 0.8 and fast < 0.3
            assert wait_for(settled, timeout=30), run.status().components
            st = run.status()
            print(f"\ncapacity: slow {st.components['slow'].capacity}, fast {st.components['fast'].capacity}")
            control = ControlPlane(redis_url)
            assert wait_for(lambda: (control.get("capacity").status or {}).get("workers", {})
                            .get(str(spout_worker), {}).get("backpressure"), timeout=15)
            workers = control.get("capacity").status["workers"]
            assert workers[str(spout_worker)]["backpressure_secs"] > 0
            # The exposition reads the run record, which the run publishes every 2 s.
            assert wait_for(lambda: 'topology_component_capacity{component="slow",topology="capacity"}'
                            in exposition(control).decode(), timeout=15)
            text = exposition(control).decode()
            assert f'topology_worker_backpressure{{topology="capacity",worker="{spout_worker}"}} 1.0' in text
        finally:
            run.kill()


def test_topology_metrics_server_serves_every_topology_of_the_redis(redis_url):
    """`topology metrics-server` (no Airflow): the same exposition over plain HTTP."""
    import socket
    import subprocess
    import sys
    import urllib.request

    from topology_runtime.api.status import ComponentStats, RunStatus

    control = ControlPlane(redis_url)
    token = control.register("served", "local", 1)
    control.finish("served", token, RunStatus("served", "completed", components={
        "words": ComponentStats(emitted=42, acked=40, failed=2)}), {})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "topology_runtime.cli", "metrics-server", "--port", str(port),
                             "--redis", redis_url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def scrape():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    return r.read().decode()
            except OSError:
                return None
        assert wait_for(scrape, timeout=20), proc.stdout.read() if proc.poll() is not None else "no answer"
        text = scrape()
        assert 'topology_run_info{launcher="local",state="completed",topology="served"} 1.0' in text
        assert 'topology_component_emitted_total{component="words",topology="served"} 42.0' in text
        assert 'topology_component_failed_total{component="words",topology="served"} 2.0' in text
    finally:
        proc.terminate()
        proc.wait(10)


def test_metrics_server_on_a_taken_port_says_so(redis_url):
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "metrics-server", "--port", str(port),
                              "--redis", redis_url], capture_output=True, text=True, timeout=60)
    assert out.returncode == 4 and f"cannot listen on 127.0.0.1:{port}" in out.stderr, out


def test_a_topology_leaves_the_metrics_at_topology_reset(redis_url):
    """Finished runs stay in the exposition (their state label says so) until `topology reset`
    deletes their records."""
    import subprocess
    import sys

    from topology_runtime.api.status import ComponentStats, RunStatus

    control = ControlPlane(redis_url)
    for name in ("reset-me", "kept"):
        token = control.register(name, "local", 1)
        control.finish(name, token, RunStatus(name, "killed", components={"words": ComponentStats(emitted=7)}), {})
    text = exposition(control).decode()
    for name in ("reset-me", "kept"):
        assert f'topology_run_info{{launcher="local",state="killed",topology="{name}"}} 1.0' in text
    out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "reset", "reset-me", "--redis", redis_url],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    text = exposition(control).decode()
    assert 'topology="reset-me"' not in text
    assert 'topology_component_emitted_total{component="words",topology="kept"} 7.0' in text
