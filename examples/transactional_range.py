"""A generic transactional spout (Storm's ITransactionalSpout) over the numbers 0..total-1,
and the three kinds of bolt of a transactional topology.

The spout's coordinator part makes each batch's metadata, ``[start, count]``, from the previous
batch's; the runtime stores it in Redis under the txid before the batch goes out, so every
replay of that txid (also after a worker or driver restart) emits exactly the same numbers. Its
emitter part emits them, each emitter task its share (``n % parallelism == task_index``).

    spout (numbers) -> square (BasicBolt, per tuple) -> partial (BatchBolt) -> sum (committer)

The committer adds each batch's sum of squares to ``range-sum`` once per txid
(TransactionalValue), so the result is exact: sum(n*n for n in range(total)).

    python examples/transactional_range.py
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typing import Any  # noqa: E402

from state.connection import connect  # noqa: E402
from state.values import ValueMap  # noqa: E402
from topology_runtime import BasicBolt, LocalCluster  # noqa: E402
from topology_runtime.transactional import (  # noqa: E402
    BatchBolt,
    Committer,
    TransactionalSpout,
    TransactionalTopologyBuilder,
)


class RangeSpout(TransactionalSpout):
    """The numbers ``0 .. total - 1`` in batches of up to ``batch_size``; metadata ``[start, count]``."""

    fields = ["n"]

    def __init__(self, total: int, batch_size: int) -> None:
        self.total, self.batch_size = int(total), int(batch_size)

    def open(self, conf: dict, context: Any) -> None:
        self.index, self.tasks = context.task_index, context.parallelism

    # coordinator part: one task; called once per txid, the result stored under the txid
    def initialize_transaction(self, txid: int, prev_meta: Any, tx_state: Any) -> list[int]:
        start = 0 if prev_meta is None else prev_meta[0] + prev_meta[1]
        return [start, max(0, min(self.batch_size, self.total - start))]

    def exhausted(self, meta: Any) -> bool:
        return meta is not None and meta[0] + meta[1] >= self.total

    # emitter part: every emitter task, with the stored metadata, on every attempt
    def emit_batch(self, tx: Any, meta: list[int], emit: Any) -> None:
        start, count = meta
        for n in range(start, start + count):
            if n % self.tasks == self.index:
                emit([n])


class Square(BasicBolt):
    """Per tuple (a BasicBolt in a transactional topology): its emits carry the attempt first."""

    outputs = ["tx", "square"]

    def execute(self, tup):
        self.emit([tup[0], tup["n"] * tup["n"]])


class PartialSum(BatchBolt):
    outputs = ["tx", "sum"]

    def prepare(self, conf, context, batch_id):
        self.id, self.sum = batch_id, 0

    def execute(self, tup):
        self.sum += tup["square"]

    def finish_batch(self):
        self.emit([self.id, self.sum])


class UpdateSum(BatchBolt, Committer):
    """Adds the batch's sum to ``range-sum`` once per txid, in txid order."""

    outputs = ["tx", "sum"]

    def prepare(self, conf, context, batch_id):
        self.id, self.sum = batch_id, 0
        self.values = ValueMap(connect(conf["redis.url"]), conf.get("sum.key", "range-sum"))

    def execute(self, tup):
        self.sum += tup["sum"]

    def finish_batch(self):
        self.values.multi_add(self.id.txid, {"sum": self.sum})


def range_sum(total: int = 1000, batch_size: int = 50, name: str = "range-sum", spout: Any = None):
    b = TransactionalTopologyBuilder(name, "numbers", spout or RangeSpout(total, batch_size), 2)
    b.set_bolt("square", Square(), 2).shuffle_grouping("numbers")
    b.set_bolt("partial", PartialSum(), 2).shuffle_grouping("square")
    b.set_committer_bolt("sum", UpdateSum()).global_grouping("partial")
    return b.create_topology()


def main() -> int:
    from topology_runtime.control.redis_server import resolve_redis_url

    url, where = resolve_redis_url(None)
    print(f"Redis: {where}")
    client = connect(url)
    client.delete("range-sum")
    total = 1000
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("range-sum", range_sum(total), {"redis.url": url, "topology.max.spout.pending": 3},
                             timeout=120)
    print(status.table())
    got = ValueMap(client, "range-sum").get(["sum"])["sum"]
    print("sum of squares:", got.value, "expected:", sum(n * n for n in range(total)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
