"""LocalCluster forks its workers with the driver's heap frozen: the inherited objects sit in
the worker's permanent generation, so its start-up collection does not walk them (a driver
holding a million rows cost each worker ~0.3 s) and the driver's own collector is back on after."""

from __future__ import annotations

import gc
import json
from pathlib import Path

from topology_runtime import BasicBolt, LocalCluster, TopologyBuilder
from topology_runtime.testing.spouts import FixedTupleSpout


class FreezeProbe(BasicBolt):
    outputs = []

    def prepare(self, conf, context):
        # prepare runs before the worker freezes its own start-up objects
        Path(conf["probe.dir"], f"task-{context.task_index}").write_text(json.dumps(gc.get_freeze_count()))

    def execute(self, tup):
        pass


def test_workers_start_with_the_drivers_heap_in_their_permanent_generation(tmp_path):
    b = TopologyBuilder()
    b.set_spout("n", FixedTupleSpout([[i] for i in range(10)], fields=["n"]), 1)
    b.set_bolt("probe", FreezeProbe(), 2).shuffle_grouping("n")
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("fork-frozen", b.create_topology(), {"probe.dir": str(tmp_path)}, timeout=60)
    assert status.state == "completed"
    counts = [json.loads(p.read_text()) for p in tmp_path.glob("task-*")]
    assert len(counts) == 2
    assert all(n > 10_000 for n in counts), counts  # the imported modules' objects, at least
    assert gc.get_freeze_count() == 0  # the driver's objects are collectable again
