"""Memory is bounded by default: a spout task's pending trees are bounded in
number (topology.max.spout.pending, 1000 when not set) and in bytes of tuple values
(topology.max.spout.pending.bytes, 64 MiB), so 150 tuples of 10 MB do not pile up in a worker;
without those bounds, backpressure (a spout held back while its outbound buffers are over their
high-water mark) still bounds it, and batches over the 256 MB message cap go as smaller ones. A
bolt that keeps tuples shows up in the measurement, so the test can fail."""

from __future__ import annotations

import time

import pytest
from runtime_components import peak_rss_growth

from topology_runtime import BasicBolt, LocalCluster, Spout, TopologyBuilder
from topology_runtime.reliability.spout_pending import PendingBudget, value_bytes

pytestmark = pytest.mark.slow  # 10 MB tuples through real workers: not in make test-fast

MB = 1 << 20


def test_the_budget_bounds_count_and_bytes():
    b = PendingBudget(1000, 64 * MB)
    assert b.cap == 1000  # nothing seen yet: the count bound
    b.observe([b"x" * (10 * MB)])
    assert b.cap == 6  # 64 MiB of 10 MiB tuples
    for _ in range(3):
        b.observe(["a short sentence"])
    assert 6 <= b.cap < 1000  # a smaller tuple lowers the estimate slowly
    for _ in range(200):
        b.observe(["a short sentence"])
    assert b.cap == 1000
    b.observe([b"y" * (32 * MB)])
    assert b.cap == 2  # a larger one raises it at once
    assert PendingBudget(None, None).cap is None  # both bounds off: unbounded
    assert PendingBudget(7, None).countdown > 1 << 40  # no byte bound: never samples


def test_value_bytes_counts_strings_bytes_and_one_level_of_containers():
    assert value_bytes(["abc", b"de", 7]) == 3 + 2 + 16
    assert value_bytes([["ab", "c"], {"k": "vv"}]) == (16 + 3) + (16 + 1 + 2)


class BigTuples(Spout):
    outputs = ["blob"]

    def open(self, conf, context):
        self.n = 0

    def next_tuple(self):
        if self.n >= 150:
            self.finish()
            return
        self.n += 1
        # A fresh 10 MB value each time, written through: bytes(n) would be calloc'd zero pages
        # that count in no RSS until touched, so a pile-up inside one worker could go unseen.
        self.emit([bytes([self.n % 251]) * (10 * MB)], msg_id=self.n)


class SlowSink(BasicBolt):
    outputs = []

    def execute(self, tup):
        time.sleep(0.03)  # slower than the spout: without bounds, tuples pile up


class Hoarder(BasicBolt):
    """Keeps the first 30 values it sees: 300 MB a worker must hold, whatever the bounds."""

    outputs = []

    def prepare(self, conf, context):
        self.kept = []

    def execute(self, tup):
        if len(self.kept) < 30:
            self.kept.append(tup.values[0])
        time.sleep(0.03)


def _peak_worker_rss(conf: dict, sink=SlowSink) -> tuple[str, float]:
    """Run 150 tuples of 10 MB through 2 workers; the peak RSS of the largest worker (MiB) above
    what it inherited from this process."""
    b = TopologyBuilder()
    b.set_spout("big", BigTuples(), 1)
    b.set_bolt("sink", sink(), 2).shuffle_grouping("big")
    with LocalCluster(workers=2) as cluster:
        status, peak = peak_rss_growth(cluster.submit("big-tuples", b.create_topology(), conf))
    return status.state, peak


def test_large_tuples_stay_bounded_by_default_and_by_backpressure_without_the_pending_bounds():
    state, bounded = _peak_worker_rss({})
    assert state == "completed"
    # Without the pending bounds the spout is still held back once its outbound buffers pass
    # their high-water mark (backpressure); a batch of these would be over the 256 MB message
    # cap: it goes as smaller ones.
    state, unbounded = _peak_worker_rss({"topology.max.spout.pending": 100_000,
                                         "topology.max.spout.pending.bytes": None})
    assert state == "completed"
    # The control: tuples a bolt keeps are seen by the measurement (it can fail).
    state, hoarded = _peak_worker_rss({}, sink=Hoarder)
    assert state == "completed"
    print(f"\npeak worker RSS over what it inherited, 150 tuples of 10 MB: {bounded:.0f} MiB by default, "
          f"{unbounded:.0f} MiB without the pending bounds, {hoarded:.0f} MiB with a bolt keeping 30 of them")
    # The byte bound (64 MiB of pending values) plus the copies a message takes on its way
    # (serialized batch, encrypted frame, decrypted frame, decoded tuple).
    assert bounded < 320, f"a worker reached {bounded:.0f} MiB with the default bounds"
    assert unbounded < 320, f"a worker reached {unbounded:.0f} MiB without the pending bounds"
    assert hoarded > 250, f"the measurement missed 300 MB a bolt kept: {hoarded:.0f} MiB"
