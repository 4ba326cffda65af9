"""Credit-based flow control between workers: what a peer can make a worker buffer for it is
bounded in bytes (topology.transfer.peer.window.bytes), whatever its batches weigh. Real sockets
(two DataTransports on loopback, with CURVE), then a live run whose consumer is slower than its
producer, with no spout pending bound at all."""

from __future__ import annotations

import time

import pytest
from runtime_components import peak_rss_growth

from topology_runtime import BasicBolt, LocalCluster, Spout, TopologyBuilder
from topology_runtime.testing import wait_for
from topology_runtime.transport.sockets import DataTransport

KB = 1 << 10
MB = 1 << 20


def _pair(window: int) -> tuple[DataTransport, DataTransport]:
    secret = b"w" * 32
    a, b = DataTransport(secret, sender=0, window=window), DataTransport(secret, sender=1, window=window)
    a_addr, b_addr = a.bind(), b.bind()
    a.connect(1, b_addr)
    b.connect(0, a_addr)
    return a, b


def _pay(t: DataTransport, now: float) -> None:
    """The receiver worked through everything it read (no queue here: position 0)."""
    t.queued(0)
    t.release_credits(now, 0)


def _drain(t: DataTransport, seconds: float = 0.5) -> list[bytes]:
    got: list[bytes] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t.flush()
        got.extend(t.recv_payloads(100))
        time.sleep(0.01)
    return got


def test_a_sender_stops_at_the_window_until_the_receiver_pays_credit():
    a, b = _pair(window=1 * MB)
    try:
        for i in range(10):
            a.send(1, bytes([i]) * (300 * KB))
        got = _drain(b)
        assert len(got) == 3  # 3 x 300 KiB fit in the 1 MiB window; the 4th waits for credit
        assert a.backlogged() == 7 and a.window_waits > 0
        _pay(b, time.monotonic())  # b worked through what it read
        assert wait_for(lambda: (a.flush(), a.recv_payloads(10))[1] == [] and a.unconsumed[1] == 0, timeout=5)
        got += _drain(b)
        _pay(b, time.monotonic() + 1)
        assert wait_for(lambda: (a.recv_payloads(10), a.flush(), got.extend(b.recv_payloads(100)),
                                 _pay(b, time.monotonic() + 1), a.backlogged())[4] == 0, timeout=10)
        got += _drain(b)
        assert [p[0] for p in got] == list(range(10))  # every batch, in order, none refused as a replay
        assert b.rejected == 0 and a.rejected == 0
    finally:
        a.close()
        b.close()


def test_a_batch_larger_than_the_window_goes_alone():
    a, b = _pair(window=256 * KB)
    try:
        a.send(1, b"x" * MB)
        a.send(1, b"y" * 10)
        got = _drain(b)
        assert [len(p) for p in got] == [MB]  # alone: the small one waits for its credit
        _pay(b, time.monotonic())
        assert wait_for(lambda: (a.recv_payloads(10), a.flush(), got.extend(b.recv_payloads(10)))
                        and len(got) == 2, timeout=5)
    finally:
        a.close()
        b.close()


class Firehose(Spout):
    """Unacked 1 MB tuples as fast as the worker lets it: no max.spout.pending can hold it back."""

    outputs = ["blob"]

    def open(self, conf, context):
        self.n = 0

    def next_tuple(self):
        if self.n >= 400:
            self.finish()
            return
        self.n += 1
        self.emit([bytes(MB)])


class Slow(BasicBolt):
    outputs = []

    def execute(self, tup):
        time.sleep(0.005)


def _peak_consumer_rss(window: int) -> float:
    """Peak RSS growth (MiB) of the worker that runs the slow bolt, above what it inherited."""
    b = TopologyBuilder()
    b.set_spout("hose", Firehose(), 1)
    b.set_bolt("slow", Slow(), 1).shuffle_grouping("hose")
    conf = {"topology.acker.executors": 0, "topology.transfer.peer.window.bytes": window}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("firehose", b.create_topology(), conf)
        plan = run.plan
        consumer = plan.task_worker[plan.component_tasks["slow"][0]]
        assert plan.task_worker[plan.component_tasks["hose"][0]] != consumer  # the tuples cross workers
        status, peak = peak_rss_growth(run, only=lambda index: index == consumer)
    assert status.state == "completed", status.error
    return peak


@pytest.mark.slow  # two runs of 400 MB through real workers
def test_a_slow_consumer_holds_its_producer_back_instead_of_buffering_without_end():
    bounded = _peak_consumer_rss(16 * MB)
    unbounded = _peak_consumer_rss(0)
    print(f"\npeak worker RSS growth, 400 unacked 1 MB tuples to a slow bolt: {bounded:.0f} MiB with a "
          f"16 MiB window, {unbounded:.0f} MiB without one")
    assert bounded < 150, bounded
    assert unbounded > 2 * bounded  # the test can see a pile-up
