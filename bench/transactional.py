"""What pipelining buys a transactional topology: tuples/s and commits/s of the transactional
word count for max.spout.pending = 1, 2, 4, 8 on 2 workers, with the committer writing to Redis
as is and with 20 ms more per commit (a slow sink), side by side in one run.

    python bench/transactional.py [--rows N] [--take K] [--redis URL]
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
from topology_runtime import LocalCluster  # noqa: E402
from topology_runtime.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder  # noqa: E402


class SlowSink(UpdateWordCounts):
    def finish_batch(self):
        time.sleep(float(self.delay_ms) / 1000.0)
        super().finish_batch()

    def prepare(self, conf, context, batch_id):
        super().prepare(conf, context, batch_id)
        self.delay_ms = conf.get("bench.commit.delay.ms", 0)


def build(data, take, name):
    b = TransactionalTopologyBuilder(name, "spout", MemoryTransactionalSpout(data, ["word"], take), 2)
    b.set_bolt("count", KeyedCount(), 2).fields_grouping("spout", ["word"])
    b.set_committer_bolt("update", SlowSink(), 1).fields_grouping("count", ["word"])
    return b.create_topology()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000, help="rows per partition (3 partitions)")
    p.add_argument("--take", type=int, default=200, help="rows per partition per batch")
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
    rows = []
    for delay in (0, 20):
        for pending in (1, 2, 4, 8):
            name = f"bench-tx-{delay}-{pending}"
            client.delete("word-counts", *client.keys(f"topology:{{{name}:*"))
            conf = {"redis.url": url, "topology.max.spout.pending": pending, "bench.commit.delay.ms": delay}
            t0 = time.monotonic()
            with LocalCluster(workers=2) as cluster:
                status = cluster.run(name, build(data, args.take, name), conf, timeout=1800)
            dt = time.monotonic() - t0
            ok = status.state == "completed"
            rows.append((delay, pending, total / dt, batches / dt, ok))
            print(f"  commit +{delay} ms, pending {pending}: {total / dt:,.0f} tuples/s", file=sys.stderr, flush=True)
    print(f"\ntransactional word count, {total:,} tuples in {batches} batches, 2 workers\n")
    print("| extra commit ms | max.spout.pending | tuples/s | commits/s | x pending 1 |")
    print("|---:|---:|---:|---:|---:|")
    for delay, pending, tps, cps, _ in rows:
        base = next(r[2] for r in rows if r[0] == delay and r[1] == 1)
        print(f"| {delay} | {pending} | {tps:,.0f} | {cps:,.1f} | {tps / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
