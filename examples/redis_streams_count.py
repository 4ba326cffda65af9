"""A transactional word count over Redis Streams partitions (one stream key per partition).

With the opaque spout (default) a replayed batch may differ (it rereads from the last committed
entry id), so the per-word counts are OpaqueValues: a replay recomputes from the previous value.
With ``--transactional`` replays are identical id ranges and counts are TransactionalValues.

    python examples/redis_streams_count.py [--transactional]
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from examples.transactional_count import KeyedCount, UpdateWordCounts  # noqa: E402
from state.connection import connect  # noqa: E402
from state.layout import same_slot  # noqa: E402
from state.values import ValueMap  # noqa: E402
from topology_runtime import LocalCluster  # noqa: E402
from topology_runtime.transactional import (  # noqa: E402
    BatchBolt,
    Committer,
    RedisStreamsOpaqueTransactionalSpout,
    RedisStreamsTransactionalSpout,
    TransactionalTopologyBuilder,
)


def _adder(n: int):
    return lambda v: (v or 0) + n


class UpdateOpaqueWordCounts(BatchBolt, Committer):
    """Adds a batch's per-word counts to OpaqueValues, in txid order (commit phase)."""

    outputs = ["tx", "word", "count"]

    def prepare(self, conf, context, batch_id):
        self.id, self.counts = batch_id, {}
        self.values = ValueMap(connect(conf["redis.url"]), conf.get("count.key", "word-counts"),
                               opaque=True)
        # Words reach this task by fields grouping, so the task is a stable writer of its words:
        # a replay that lost a word resets what an earlier attempt of the txid wrote for it.
        self.writer = f"{context.component_id}:{context.task_index}"

    def execute(self, tup):
        self.counts[tup["word"]] = self.counts.get(tup["word"], 0) + tup["count"]

    def finish_batch(self):
        self.values.multi_update(self.id.txid, {w: _adder(n) for w, n in self.counts.items()}, writer=self.writer)


def counting_topology(spout, name: str, opaque: bool, parallelism: int = 2, committer: BatchBolt | None = None):
    """spout -> per-batch word counts (fields grouped) -> committed word counts in Redis."""
    b = TransactionalTopologyBuilder(name, "spout", spout, parallelism)
    b.set_bolt("count", KeyedCount(), parallelism).fields_grouping("spout", ["word"])
    if committer is None:
        committer = UpdateOpaqueWordCounts() if opaque else UpdateWordCounts()
    b.set_committer_bolt("update", committer, parallelism).fields_grouping("count", ["word"])
    return b.create_topology()


def streams_word_count(streams: list[str], opaque: bool = True, max_entries: int = 50, name: str = "streams-wc"):
    """A bounded word count over ``streams`` (one partition each), ending once they are drained."""
    cls = RedisStreamsOpaqueTransactionalSpout if opaque else RedisStreamsTransactionalSpout
    return counting_topology(cls(streams, ["word"], max_entries=max_entries, stop_when_drained=True), name, opaque)


EXAMPLE_STREAMS = [f"example:words:{p}" for p in range(3)]


def example_topology():
    """The bounded transactional count over EXAMPLE_STREAMS (transactional id "streams-wc"): what
    dags/committed_counts.py submits."""
    return streams_word_count(EXAMPLE_STREAMS, opaque=False, name="streams-wc")


def fill(client: redis.Redis, streams: list[str], n_per_stream: int, seed: int = 1) -> dict[str, int]:
    """Append random words to every stream; returns the true per-word counts."""
    rng = random.Random(seed)
    words = ["apple", "banana", "cat", "dog", "egg", "fig", "grape"]
    truth: dict[str, int] = {}
    for s in streams:
        pipe = client.pipeline(transaction=False)
        for _ in range(n_per_stream):
            w = rng.choice(words)
            truth[w] = truth.get(w, 0) + 1
            pipe.xadd(s, {"word": w})
        pipe.execute()
    return truth


def main() -> int:
    from topology_runtime.control.redis_server import resolve_redis_url

    opaque = "--transactional" not in sys.argv[1:]
    url, where = resolve_redis_url(None)
    print(f"Redis: {where}")
    client = connect(url)
    streams = EXAMPLE_STREAMS
    name = "streams-wc-opaque" if opaque else "streams-wc"
    client.delete(*streams, "word-counts", same_slot("word-counts", ":writers"),
                  *client.keys(f"topology:{{{name}:ctl}}:*"))
    truth = fill(client, streams, 200)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run(name, streams_word_count(streams, opaque=opaque, name=name),
                             {"redis.url": url, "topology.max.spout.pending": 3}, timeout=120)
    print(status.table())
    got = ValueMap(client, "word-counts", opaque=opaque).get(sorted(truth))
    for w, v in got.items():
        print(f"{w:8} {v.curr if opaque else v.value:5}  (truth {truth[w]})")
    return 0 if status.state == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
