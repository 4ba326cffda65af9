"""Inspecting a live run without changing its code: a log level set in every worker for a while
(then back), and a share of a component's emitted tuples sampled into a capped Redis stream.
LocalCluster workers are forked processes writing to this process's stderr (captured)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from topology_runtime import BasicBolt, LocalCluster, Spout, TopologyBuilder
from topology_runtime.control import inspection
from topology_runtime.control.control_plane import ControlPlane
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow  # a live run watched for several seconds: not in make test-fast
log = logging.getLogger("userapp.talk")


class Counter(Spout):
    outputs = ["n"]

    def open(self, conf, context):
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.emit([self.n])
        # ~200 tuples/s: half of them sampled stays under a worker's buffer per stats report
        time.sleep(0.005)


class Talk(BasicBolt):
    outputs = ["n", "square"]

    def execute(self, tup):
        log.debug("saw %s", tup["n"])  # silent at the workers' own level
        self.emit([tup["n"], tup["n"] ** 2])


class Sink(BasicBolt):
    outputs = []

    def execute(self, tup):
        pass


def test_set_log_level_then_back_and_sampling_of_a_live_run(redis_url, capfd):
    b = TopologyBuilder()
    b.set_spout("counter", Counter(), 1)
    b.set_bolt("talk", Talk(), 2).shuffle_grouping("counter")
    b.set_bolt("sink", Sink(), 1).shuffle_grouping("talk")
    control = ControlPlane(redis_url)
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit("inspected", b.create_topology(), {"topology.acker.executors": 0})
        try:
            assert wait_for(lambda: run.status().state == "running", timeout=30)
            time.sleep(1.0)
            assert "saw " not in capfd.readouterr().err  # DEBUG is off by default

            with pytest.raises(ValueError, match="DEBUG, INFO"):
                inspection.request_log_level(control, "inspected", "LOUD")
            out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "set-log-level", "inspected",
                                  "userapp=debug", "--expiry", "3", "--redis", redis_url],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0 and "userapp at DEBUG" in out.stdout, out
            seen = ""

            def debug_lines():
                nonlocal seen
                seen += capfd.readouterr().err
                return {line.split("worker=")[1][0] for line in seen.splitlines() if "saw " in line}
            assert wait_for(lambda: len(debug_lines()) == 2, timeout=15), seen[-2000:]  # in both workers
            time.sleep(3.5)  # past the expiry: each worker's own level is back
            capfd.readouterr()
            time.sleep(1.5)
            assert "saw " not in capfd.readouterr().err

            with pytest.raises(ValueError, match="no component 'nope'"):
                inspection.request_sample(control, "inspected", "nope")
            asked = inspection.request_sample(control, "inspected", "talk", percent=50, duration_secs=5)
            assert wait_for(lambda: len(inspection.read_samples(control, "inspected", 50)) >= 20, timeout=15)
            # the sampling ended and the workers' last reports (every 1 s) were written (every 2 s)
            time.sleep(max(0.0, asked["until"] - time.time()) + 3)
            counts: list[int] = []

            def settled() -> bool:  # the same count for 2.5 s: a publish interval went by
                counts.append(len(inspection.read_samples(control, "inspected", 1000)))
                time.sleep(0.5)
                return len(counts) >= 6 and len(set(counts[-6:])) == 1
            assert wait_for(settled, timeout=30), counts
            samples = inspection.read_samples(control, "inspected", 1000)
            assert {s["component"] for s in samples} == {"talk"} and {s["stream"] for s in samples} == {"default"}
            n, square = eval(samples[-1]["values"])  # noqa: S307 - our own repr of two ints
            assert square == n * n
            # The spout counts 1, 2, 3...: talk emitted every n between the first and the last
            # sampled one exactly once (no acker, no replays), so this is the share recorded.
            ns = [eval(s["values"])[0] for s in samples]  # noqa: S307
            assert len(set(ns)) == len(ns) >= 60, len(ns)
            share = len(ns) / (max(ns) - min(ns) + 1)
            assert 0.35 <= share <= 0.65, (share, len(ns), min(ns), max(ns))
            # ... and recorded until the end, not only up to a worker's first report
            assert max(s["time"] for s in samples) >= asked["until"] - 1.5, (samples[-1], asked)
            before = len(samples)
            time.sleep(1.5)
            assert len(inspection.read_samples(control, "inspected", 1000)) == before
            out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "samples", "inspected", "--count", "3",
                                  "--component", "talk", "--redis", redis_url], capture_output=True, text=True,
                                 timeout=60)
            assert out.returncode == 0 and out.stdout.count("talk[") == 3, out
        finally:
            run.kill()
    with pytest.raises(inspection.NotLive):
        inspection.request_log_level(control, "inspected", "DEBUG")
