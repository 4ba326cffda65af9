"""Stateful word count: counts live in a checkpointed KeyValueState in Redis.

Every `topology.state.checkpoint.interval.ms` the runtime prepares and commits every count
bolt's state (Storm's 3-phase checkpoint); inputs are acked only after the commit that covers
them, so after a crash the counts restart from the last commit and the spout replays the rest
(at-least-once: counts >= the truth).

    python examples/stateful_wordcount.py
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.wordcount import STREAM, SplitSentence, load_sentences, true_counts  # noqa: E402
from topology_runtime import LocalCluster, StatefulBolt, TopologyBuilder  # noqa: E402
from topology_runtime.connectors import RedisStreamSpout  # noqa: E402


class StatefulWordCount(StatefulBolt):
    outputs = ["word", "count"]

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        word = tup["word"]
        n = self.counts.get(word, 0) + 1
        self.counts.put(word, n)
        self.emit([word, n], anchors=tup)
        self.ack(tup)


def build(stream: str = STREAM, parallelism: int = 2, split: int | None = None, count: str = "count"):
    """``split``: the (stateless) split bolt's parallelism, ``parallelism`` by default; ``count``:
    the stateful bolt's component id (its state is keyed by it)."""
    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamSpout(stream, fields=["sentence"], bounded=True), 1)
    b.set_bolt("split", SplitSentence(), split or parallelism).shuffle_grouping("sentences")
    b.set_bolt(count, StatefulWordCount(), parallelism).fields_grouping("split", ["word"])
    return b.create_topology()


def topology():
    return build()


def counts_in_state(url: str, topology_id: str, component: str = "count") -> dict[str, int]:
    """The committed counts of every task of ``component`` summed (its tasks' own state and its
    key groups, as the id's state records them)."""
    from state.connection import connect
    from state.keyed_state import component_state

    out: dict[str, int] = {}
    for k, v in component_state(connect(url), topology_id, component):
        out[k] = out.get(k, 0) + v
    return out


def main() -> int:
    from state import reset
    from state.connection import connect
    from topology_runtime.control.redis_server import resolve_redis_url

    url, where = resolve_redis_url(None)
    print(f"Redis: {where}")
    client = connect(url, decode_responses=True)
    client.delete(STREAM)
    reset("stateful-wordcount", url)
    truth = true_counts(load_sentences(client, 10000))
    conf = {"redis.url": url, "topology.state.provider": "redis"}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("stateful-wordcount", build(), conf)
        status = run.wait(300)
    print(status.table())
    counts = counts_in_state(url, "stateful-wordcount", "count")
    print("state in Redis matches the truth" if counts == truth else "MISMATCH")
    return 0 if counts == truth and status.state == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
