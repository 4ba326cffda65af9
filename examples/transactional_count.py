"""Transactional topologies (Storm's seed): an exactly-once global count and word count.

Batches of tuples get txids; bolts process several batches at once; committers' finish_batch
runs strictly in txid order, and the Redis values carry the txid so a replayed batch is never
counted twice (TransactionalValue).

    python examples/transactional_count.py
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from state.connection import connect  # noqa: E402
from state.values import ValueMap  # noqa: E402
from topology_runtime import LocalCluster  # noqa: E402
from topology_runtime.transactional import (  # noqa: E402
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
)

_CLIENTS: dict[str, redis.Redis] = {}


def _client(url: str) -> redis.Redis:
    """One client (connection pool) per worker process for every batch: a batch bolt lives for
    one batch, and a client per batch would open a new connection in every commit."""
    c = _CLIENTS.get(url)
    if c is None:
        c = _CLIENTS[url] = connect(url)
    return c


class BatchCount(BatchBolt):
    """Counts the tuples of one batch (the seed's BatchCount)."""

    outputs = ["tx", "count"]

    def prepare(self, conf, context, batch_id):
        self.id, self.n = batch_id, 0

    def execute(self, tup):
        self.n += 1

    def finish_batch(self):
        self.emit([self.id, self.n])


class UpdateGlobalCount(BatchBolt, Committer):
    """Adds the batch's partial counts to the global count, once per txid."""

    outputs = ["tx", "sum"]

    def prepare(self, conf, context, batch_id):
        self.id, self.sum = batch_id, 0
        self.values = ValueMap(_client(conf["redis.url"]), conf.get("count.key", "global-count"))

    def execute(self, tup):
        self.sum += tup["count"]

    def finish_batch(self):
        self.values.multi_add(self.id.txid, {"count": self.sum})


class KeyedCount(BatchBolt):
    outputs = ["tx", "word", "count"]

    def prepare(self, conf, context, batch_id):
        self.id, self.counts = batch_id, {}

    def execute(self, tup):
        w = tup["word"]
        self.counts[w] = self.counts.get(w, 0) + 1

    def finish_batch(self):
        for w, n in self.counts.items():
            self.emit([self.id, w, n])


class UpdateWordCounts(BatchBolt, Committer):
    outputs = ["tx", "word", "count"]

    def prepare(self, conf, context, batch_id):
        self.id, self.counts = batch_id, {}
        self.values = ValueMap(_client(conf["redis.url"]), conf.get("count.key", "word-counts"))

    def execute(self, tup):
        w = tup["word"]
        self.counts[w] = self.counts.get(w, 0) + tup["count"]

    def finish_batch(self):
        # Counts: added in Redis in one atomic call (a replay of this txid is skipped there).
        self.values.multi_add(self.id.txid, self.counts)


class KeyedCountUpdater(UpdateWordCounts):
    """A committer that counts its batch's words itself, grouped on the word straight from the
    spout (Storm's TransactionalWords shape): no count rows between two bolts, one hop fewer."""

    def execute(self, tup):
        w = tup["word"]
        self.counts[w] = self.counts.get(w, 0) + 1


def global_count(data: dict, take: int = 3, name: str = "global-count"):
    b = TransactionalTopologyBuilder(name, "spout", MemoryTransactionalSpout(data, ["word"], take), 2)
    b.set_bolt("partial-count", BatchCount(), 3).shuffle_grouping("spout")
    b.set_committer_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    return b.create_topology()


def word_count(data: dict, take: int = 3, name: str = "tx-wordcount"):
    b = TransactionalTopologyBuilder(name, "spout", MemoryTransactionalSpout(data, ["word"], take), 2)
    b.set_bolt("count", KeyedCount(), 2).fields_grouping("spout", ["word"])
    b.set_committer_bolt("update", UpdateWordCounts(), 2).fields_grouping("count", ["word"])
    return b.create_topology()


def counting_committer_word_count(data: dict, take: int = 3, name: str = "tx-words"):
    """The word count with no count bolt: the committer counts (Storm's TransactionalWords)."""
    b = TransactionalTopologyBuilder(name, "spout", MemoryTransactionalSpout(data, ["word"], take), 2)
    b.set_committer_bolt("update", KeyedCountUpdater(), 2).fields_grouping("spout", ["word"])
    return b.create_topology()


DATA = {0: [["dog"], ["cat"], ["chicken"], ["cat"], ["dog"], ["apple"]],
        1: [["cat"], ["dog"], ["apple"], ["banana"]]}


def main() -> int:
    from topology_runtime.control.redis_server import resolve_redis_url

    url, where = resolve_redis_url(None)
    print(f"Redis: {where}")
    client = connect(url)
    client.delete("global-count")
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("global-count", global_count(DATA), {"redis.url": url, "topology.max.spout.pending": 3},
                             timeout=120)
    print(status.table())
    print("global count:", ValueMap(client, "global-count").get(["count"])["count"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
