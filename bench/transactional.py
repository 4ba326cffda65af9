"""What pipelining buys a transactional topology: tuples/s and commits/s of the transactional
word count for max.spout.pending = 1, 2, 4, 8 on 2 workers, with the committer writing to Redis
as is and with 20 ms more per commit (a slow sink), side by side in one run.

    python bench/transactional.py [--rows N] [--take K] [--repeat R] [--redis URL]

Rates are steady state: commits from the end of the first commit to the end of the last one
(worker start-up and shutdown excluded), best of R interleaved runs, with the spread.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from examples.transactional_count import KeyedCount, UpdateWordCounts  # noqa: E402
from state.values import ValueMap  # noqa: E402
from topology_runtime import LocalCluster  # noqa: E402
from topology_runtime.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder  # noqa: E402


class SlowSink(UpdateWordCounts):
    def finish_batch(self):
        time.sleep(float(self.delay_ms) / 1000.0)
        super().finish_batch()
        # When the first and the last commit ended: a write only then, none in between, so the
        # measurement adds nothing to the serial commit path it measures.
        if self.id.txid == 1:
            self.values.redis.set(f"{self.clock}:first", time.time())
        elif self.id.txid == self.last_txid:
            self.values.redis.set(f"{self.clock}:last", time.time())

    def prepare(self, conf, context, batch_id):
        super().prepare(conf, context, batch_id)
        self.delay_ms = conf.get("bench.commit.delay.ms", 0)
        self.clock = conf["bench.clock.key"]
        self.last_txid = conf["bench.batches"]


def build(data, take, name):
    b = TransactionalTopologyBuilder(name, "spout", MemoryTransactionalSpout(data, ["word"], take), 2)
    b.set_bolt("count", KeyedCount(), 2).fields_grouping("spout", ["word"])
    b.set_committer_bolt("update", SlowSink(), 1).fields_grouping("count", ["word"])
    return b.create_topology()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000, help="rows per partition (3 partitions)")
    p.add_argument("--take", type=int, default=200, help="rows per partition per batch")
    p.add_argument("--repeat", type=int, default=3, help="runs per configuration (interleaved); best is reported")
    p.add_argument("--pending", default="1,2,4,8", help="max.spout.pending values (1 first: the baseline)")
    p.add_argument("--delays", default="0,20", help="extra ms per commit (0: the sink as is)")
    p.add_argument("--redis", default=None)
    args = p.parse_args(argv)
    url = args.redis
    if not url:
        from topology_runtime.redis_server import resolve_redis_url

        url = resolve_redis_url(None)[0]
    rng = random.Random(42)
    vocab = [f"w{i}" for i in range(1000)]
    data = {q: [[rng.choice(vocab)] for _ in range(args.rows)] for q in range(3)}
    total = 3 * args.rows
    batches = -(-args.rows // args.take)
    client = redis.Redis.from_url(url)
    truth: dict[str, int] = {}
    for part in data.values():
        for (w,) in part:
            truth[w] = truth.get(w, 0) + 1
    pendings = sorted({1, *(int(x) for x in args.pending.split(","))})
    configs = [(int(delay), pending) for delay in args.delays.split(",") for pending in pendings]
    runs: dict[tuple[int, int], list[float]] = {c: [] for c in configs}  # commits/s per run
    walls: dict[tuple[int, int], list[float]] = {c: [] for c in configs}
    for rep in range(args.repeat):
        for delay, pending in configs:
            name = f"bench-tx-{delay}-{pending}"
            clock = f"bench:{name}:clock"
            client.delete("word-counts", f"{clock}:first", f"{clock}:last", *client.keys(f"topology:{{{name}:*"))
            conf = {"redis.url": url, "topology.max.spout.pending": pending, "bench.commit.delay.ms": delay,
                    "bench.clock.key": clock, "bench.batches": batches}
            t0 = time.monotonic()
            with LocalCluster(workers=2) as cluster:
                status = cluster.run(name, build(data, args.take, name), conf, timeout=1800)
            wall = time.monotonic() - t0
            if status.state != "completed":
                print(f"run {name} ended {status.state}: {status.error}", file=sys.stderr)
                return 1
            got = ValueMap(client, "word-counts").get(list(truth))
            if {w: v.value for w, v in got.items()} != truth:
                print(f"run {name}: the counts are not exact", file=sys.stderr)
                return 1
            window = float(client.get(f"{clock}:last")) - float(client.get(f"{clock}:first"))
            cps = (batches - 1) / window
            runs[(delay, pending)].append(cps)
            walls[(delay, pending)].append(wall)
            print(f"  run {rep + 1}: commit +{delay} ms, pending {pending}: {cps:.1f} commits/s, "
                  f"{cps * total / batches:,.0f} tuples/s ({wall:.1f} s with start-up)", file=sys.stderr, flush=True)
    print(f"\ntransactional word count, {total:,} tuples in {batches} batches of {total // batches} "
          f"({args.take} from each of 3 partitions, 1,000 distinct words), 2 workers, best of {args.repeat}\n")
    print("| extra commit ms | max.spout.pending | tuples/s | commits/s | spread commits/s | x pending 1 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for delay, pending in configs:
        cps = runs[(delay, pending)]
        base = max(runs[(delay, 1)])
        print(f"| {delay} | {pending} | {max(cps) * total / batches:,.0f} | {max(cps):.1f} | "
              f"{min(cps):.1f}-{max(cps):.1f} | {max(cps) / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
