"""Reliable word count: sentences from a Redis stream -> split -> count, counts kept in Redis.

At-least-once: the spout reads a Redis Streams consumer group (a sentence is XACKed only when
its whole tuple tree is acked), and the count bolt acks its input only after the counts are
written to Redis, so a crash anywhere replays work instead of losing it.

    python examples/wordcount.py            # loads a sample corpus, runs on 2 local workers
    topology run examples.wordcount:topology --conf redis.url=redis://...
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import redis

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from state.connection import connect  # noqa: E402
from topology_runtime import BasicBolt, Bolt, LocalCluster, TopologyBuilder  # noqa: E402
from topology_runtime.connectors import RedisStreamSpout  # noqa: E402

STREAM = "wordcount:sentences"
COUNTS = "wordcount:counts"

CORPUS = """the quick brown fox jumps over the lazy dog
it was the best of times it was the worst of times
a stream is an unbounded sequence of tuples
every tuple tree is tracked by an acker with xor
spouts emit tuples and bolts process them
the acker acks the spout tuple when its tree is complete
a failed tuple is replayed by a reliable spout
redis keeps the counts safe when a worker dies""".splitlines()


class SplitSentence(BasicBolt):
    outputs = ["word"]

    def execute(self, tup):
        for word in tup["sentence"].split():
            self.emit([word])


class WordCount(Bolt):
    """Counts words and writes them to a Redis hash, acking its inputs only once written."""

    outputs = ["word", "count"]

    def __init__(self, counts_key: str = COUNTS, flush_every: int = 2000) -> None:
        self.counts_key = counts_key
        self.flush_every = flush_every

    def prepare(self, conf, context):
        self.redis = connect(conf["redis.url"])
        self.delta: dict[str, int] = {}
        self.held = []

    def execute(self, tup):
        if tup.is_tick():
            self.flush()
            return
        word = tup["word"]
        self.delta[word] = self.delta.get(word, 0) + 1
        self.held.append(tup)
        if len(self.held) >= self.flush_every:
            self.flush()

    def flush(self):
        if not self.held:
            return
        held, self.held = self.held, []
        delta, self.delta = self.delta, {}
        try:
            pipe = self.redis.pipeline(transaction=False)
            for word, n in delta.items():
                pipe.hincrby(self.counts_key, word, n)
            pipe.execute()
        except redis.RedisError:
            for t in held:  # not written: fail, so the spout replays the sentences
                self.fail(t)
            raise
        for t in held:
            self.ack(t)

    def cleanup(self):
        self.flush()


def build(stream: str = STREAM, counts_key: str = COUNTS, parallelism: int = 2, bounded: bool = True):
    builder = TopologyBuilder()
    builder.set_spout("sentences", RedisStreamSpout(stream, fields=["sentence"], bounded=bounded), 1)
    builder.set_bolt("split", SplitSentence(), parallelism).local_or_shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(counts_key), parallelism).fields_grouping("split", ["word"]) \
        .add_configuration("topology.tick.tuple.freq.secs", 0.2)
    return builder.create_topology()


def topology():
    """`examples.wordcount:topology` for the CLI and Spark launchers."""
    return build()


def sample_sentences(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(CORPUS) for _ in range(n)]


def true_counts(sentences: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in sentences:
        for w in s.split():
            counts[w] = counts.get(w, 0) + 1
    return counts


def report(counts_key: str = COUNTS, n: int = 10) -> dict[str, int]:
    """Print and return the ``n`` most counted words in the hash ``counts_key`` of the run's
    Redis (what the word count DAGs' last task shows)."""
    from topology_runtime.control.redis_server import resolve_redis_url

    url, _ = resolve_redis_url(None)  # every task finds the same Redis (docs/operations.md)
    counts = {k: int(v) for k, v in connect(url, decode_responses=True).hgetall(counts_key).items()}
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    print(f"{sum(counts.values())} words counted; top words:")
    for word, c in top:
        print(f"  {word:<10} {c}")
    return dict(top)


def load_sentences(client: redis.Redis, n: int, stream: str = STREAM, seed: int = 7) -> list[str]:
    sentences = sample_sentences(n, seed)
    pipe = client.pipeline(transaction=False)
    for i, s in enumerate(sentences):
        pipe.xadd(stream, {"sentence": s})
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    return sentences


def main(argv: list[str] | None = None) -> int:
    from topology_runtime.control.redis_server import resolve_redis_url

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=20000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--redis", default=None, help="Redis URL (default: TOPOLOGY_REDIS_URL, else project-local)")
    args = p.parse_args(argv)
    url, where = resolve_redis_url(args.redis)
    print(f"Redis: {where}")
    client = connect(url, decode_responses=True)
    client.delete(STREAM, COUNTS, f"{STREAM}:dead")
    sentences = load_sentences(client, args.sentences)
    truth = true_counts(sentences)
    print(f"loaded {len(sentences)} sentences into stream {STREAM!r}")
    t0 = time.monotonic()
    with LocalCluster(workers=args.workers) as cluster:
        status = cluster.run("wordcount", build(), {"redis.url": url}, timeout=600)
    elapsed = time.monotonic() - t0
    counts = {k: int(v) for k, v in client.hgetall(COUNTS).items()}
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    print(f"\nrun {status.state} in {elapsed:.1f}s ({sum(counts.values()) / elapsed:,.0f} words/s)\n")
    print("top words:")
    for word, n in top:
        print(f"  {word:<10} {n}")
    print("\nper component:")
    print(status.table())
    missing = [w for w, n in truth.items() if counts.get(w, 0) < n]
    print(f"\ncounts in Redis hash {COUNTS!r}: {'all >= truth (at-least-once holds)' if not missing else f'MISSING {missing}'}")
    return 0 if status.state == "completed" and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
