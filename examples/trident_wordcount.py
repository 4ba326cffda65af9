"""The Trident word count and its DRPC query (Storm's TridentWordCount, in Python).

    sentences (Redis Stream, opaque transactional spout)
      -> each(Split) -> group_by(word) -> persistent_aggregate(RedisMapState.opaque(), Count)
    DRPC "words": each(Split) -> group_by(word) -> state_query(MapGet) -> FilterNull -> Sum

Exactly-once: the opaque spout and the opaque map state (each word's value stored with the txid
that last wrote it and the value before) count every sentence once, across worker crashes.

    python examples/trident_wordcount.py [--sentences 20000] [--workers 2]

loads sentences, runs the topology on local worker processes until every sentence is counted,
asks the DRPC function for the total of a few words, checks the counts and stops.
``dags/trident_wordcount.py`` runs the counting part on Spark from Airflow.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.wordcount import load_sentences, true_counts  # noqa: E402
from state.connection import connect  # noqa: E402
from topology_runtime.connectors import RedisStreamsOpaqueTransactionalSpout  # noqa: E402
from topology_runtime.trident import (  # noqa: E402
    Count,
    FilterNull,
    Function,
    MapGet,
    RedisMapState,
    Sum,
    TridentTopology,
)

STREAM = "trident:sentences"
TXID = "trident-wordcount"  # the spout's coordinator records, and the name the state is kept under
FUNCTION = "words"


class Split(Function):
    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit([word])


def build(stream: str = STREAM, txid: str = TXID, parallelism: int = 2, drpc: bool = True,
          stop_when_drained: bool = False):
    t = TridentTopology()
    spout = RedisStreamsOpaqueTransactionalSpout([stream], ["sentence"], max_entries=1000,
                                                 stop_when_drained=stop_when_drained)
    counts = (t.new_stream(txid, spout)
              .each(["sentence"], Split(), ["word"])
              .group_by(["word"])
              .persistent_aggregate(RedisMapState.opaque(), Count(), ["count"])
              .parallelism_hint(parallelism))
    if drpc:
        (t.new_drpc_stream(FUNCTION)
         .each(["args"], Split(), ["word"])
         .group_by(["word"])
         .state_query(counts, ["word"], MapGet(), ["count"])
         .each(["count"], FilterNull())
         .aggregate(["count"], Sum(), ["sum"]))
    return t.build()


def topology():
    """`examples.trident_wordcount:topology`: the count and the DRPC function (runs until killed)."""
    return build()


def counting_topology():
    """`examples.trident_wordcount:counting_topology`: the count alone, ending once the stream is
    read to its end and committed (what the DAG runs)."""
    return build(drpc=False, stop_when_drained=True)


def state_counts(url: str, txid: str = TXID, parallelism: int = 2) -> dict[str, int]:
    """Every word's committed count, read from the state's partitions."""
    out: dict[str, int] = {}
    factory = RedisMapState.opaque()
    for i in range(parallelism):
        part = factory.make_state({"redis.url": url, "trident.state.name": txid}, i, parallelism)
        for word, n in part.get_tuples():
            out[word] = n
        part.close()
    return out


def reset(url: str, stream: str = STREAM, txid: str = TXID, parallelism: int = 2) -> None:
    """Start afresh: the stream, the spout's transactions and the counts."""
    from state.recovery import reset as reset_records

    client = connect(url)
    client.delete(stream, *(RedisMapState.opaque().key(i, {"trident.state.name": txid}) for i in range(parallelism)))
    reset_records(txid, url)


def report(url: str, n: int = 10) -> dict[str, int]:
    counts = state_counts(url)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    print(f"{sum(counts.values())} words counted; top words:")
    for word, c in top:
        print(f"  {word:<10} {c}")
    return dict(top)


def main(argv: list[str] | None = None) -> int:
    from topology_runtime import LocalCluster
    from topology_runtime.control.redis_server import resolve_redis_url
    from topology_runtime.drpc import DRPCClient

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=20000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--redis", default=None, help="Redis URL (default: the project's Redis, started if needed)")
    args = p.parse_args(argv)
    url, _ = resolve_redis_url(args.redis)
    reset(url)
    truth = true_counts(load_sentences(connect(url), args.sentences, STREAM))
    with LocalCluster(workers=args.workers, redis_url=url) as cluster:
        run = cluster.submit("trident-wordcount", topology(), {"redis.url": url, "topology.max.spout.pending": 4})
        deadline = time.monotonic() + 300
        while state_counts(url) != truth:
            if time.monotonic() > deadline or run.status().state not in ("starting", "running"):
                print(f"the counts did not reach the truth: {run.status().state} {run.status().error or ''}")
                return 1
            time.sleep(0.5)
        client = DRPCClient(url)
        for query in ("the", "acker spout tree", "no-such-word"):
            expected = sum(truth.get(w, 0) for w in query.split())
            result = client.execute(FUNCTION, query, timeout=30)
            print(f"DRPC {FUNCTION}({query!r}) -> {result}  (expected [[{expected}]])")
            if result != f"[[{expected}]]":
                return 1
        run.kill()
    report(url)
    print(f"counts exact: {sum(truth.values())} words in {len(truth)} distinct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
