"""What pipelining buys a transactional topology: tuples/s and commits/s of the transactional
word count for max.spout.pending = 1, 2, 4, 8 on 2 workers, with the committer writing to Redis
as is and with 20 ms more per commit (a slow sink), side by side in one run.

    python bench/transactional.py [--batches N] [--take K[,K2...]] [--repeat R] [--redis URL]

Rates are steady state: the commits of the middle two thirds of each run (start-up, pipeline
fill and drain excluded); the median of R interleaved runs, with the spread (on a shared
2-core machine single runs vary by ±20%, so a best-of ratio would flatter or punish by luck).
The speed-up over pending 1 is paired: each round's run against that round's pending-1 run,
median and range over the rounds.

What pipelining can buy is bounded: with pending 1 a batch costs its processing P plus its
commit C; pipelined, commits stay serial, so the period is at best max(C, the busiest worker's
share of P). With P < C the speed-up is below 1 + P/C, so --take (rows per partition per batch)
is a list: small batches (P < C) and batches whose processing is as long as the slow commit.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.cpu_window import CpuSampler  # noqa: E402
from examples.transactional_count import KeyedCount, KeyedCountUpdater, UpdateWordCounts  # noqa: E402
from state.values import ValueMap  # noqa: E402
from topology_runtime import LocalCluster  # noqa: E402
from topology_runtime.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder  # noqa: E402


class _Clocked:
    """Adds ``bench.commit.delay.ms`` to each commit and stamps the timed window's ends."""

    def finish_batch(self):
        time.sleep(float(self.delay_ms) / 1000.0)
        super().finish_batch()
        # When the window's first and last commits ended: a write only then, none in between,
        # so the measurement adds nothing to the serial commit path it measures.
        if self.id.txid in self.window:
            self.values.redis.set(f"{self.clock}:{self.id.txid}", time.time())

    def prepare(self, conf, context, batch_id):
        super().prepare(conf, context, batch_id)
        self.delay_ms = conf.get("bench.commit.delay.ms", 0)
        self.clock = conf["bench.clock.key"]
        self.window = conf["bench.window"]


class SlowSink(_Clocked, UpdateWordCounts):
    pass


class SlowCountingSink(_Clocked, KeyedCountUpdater):
    pass


def build(data, take, name, emitters, committers=1):
    """``committers`` 2: a committer task per count task, grouped on the same field, so each count
    task's rows go to the committer task beside it on its worker (the plan places task i of both
    on the same worker) and the second hop never leaves the process. ``committers`` 0: no count
    bolt; two committer tasks count the words themselves (Storm's TransactionalWords shape)."""
    b = TransactionalTopologyBuilder(name, "spout", MemoryTransactionalSpout(data, ["word"], take), emitters)
    if committers == 0:
        b.set_committer_bolt("update", SlowCountingSink(), 2).fields_grouping("spout", ["word"])
        return b.create_topology()
    b.set_bolt("count", KeyedCount(), 2).fields_grouping("spout", ["word"])
    b.set_committer_bolt("update", SlowSink(), committers).fields_grouping("count", ["word"])
    return b.create_topology()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=60,
                   help="batches per run; the rate is measured over the middle two thirds")
    p.add_argument("--partitions", type=int, default=3, help="spout partitions")
    p.add_argument("--emitters", type=int, default=0, help="emitter tasks (default: one per partition)")
    p.add_argument("--take", default="200,1000,3000,6000", help="rows per partition per batch, one table row set per value")
    p.add_argument("--repeat", type=int, default=5, help="runs per configuration (interleaved); the median is reported")
    p.add_argument("--pending", default="1,2,4,8", help="max.spout.pending values (1 first: the baseline)")
    p.add_argument("--delays", default="0,20", help="extra ms per commit (0: the sink as is)")
    p.add_argument("--redis", default=None)
    args = p.parse_args(argv)
    url = args.redis
    if not url:
        from topology_runtime.control.redis_server import resolve_redis_url

        url = resolve_redis_url(None)[0]
    n = args.partitions
    takes = [int(x) for x in args.take.split(",")]
    rng = random.Random(42)
    vocab = [f"w{i}" for i in range(1000)]
    rows = args.batches * max(takes)
    full = {q: [[rng.choice(vocab)] for _ in range(rows)] for q in range(n)}
    client = redis.Redis.from_url(url)
    pendings = sorted({1, *(int(x) for x in args.pending.split(","))})
    # Steady state only: the first sixth of the commits fill the pipeline (up to max.spout.pending
    # batches are processed before the first commit) and the last sixth drain it (the last
    # batches were processed ahead and commit back to back), so neither is counted.
    skip = max(args.batches // 6, max(pendings))
    lo, hi = skip + 1, args.batches - skip
    if hi - lo < 5:
        p.error(f"--batches {args.batches} leaves no steady-state window for pending {max(pendings)}")
    configs = [(take, int(delay), pending) for take in takes for delay in args.delays.split(",")
               for pending in pendings]
    runs: dict[tuple[int, int, int], list[float]] = {c: [] for c in configs}  # commits/s per run
    # Per run, inside the timed window: both workers' CPU per batch (ms) and the busiest worker's
    # share of a core. They show what bounds the speed-up: pipelining can only fill cores that a
    # single batch leaves idle (bench/README.md).
    cpu: dict[tuple[int, int, int], list[tuple[float, float, float]]] = {c: [] for c in configs}
    redis_pid = int(client.info("server")["process_id"])
    for rep in range(args.repeat):
        for take, delay, pending in configs:
            data = {q: part[:args.batches * take] for q, part in full.items()}
            truth: dict[str, int] = {}
            for part in data.values():
                for (w,) in part:
                    truth[w] = truth.get(w, 0) + 1
            name = f"bench-tx-{take}-{delay}-{pending}"
            clock = f"bench:{name}:clock"
            client.delete("word-counts", f"{clock}:{lo}", f"{clock}:{hi}", *client.keys(f"topology:{{{name}:*"))
            conf = {"redis.url": url, "topology.max.spout.pending": pending, "bench.commit.delay.ms": delay,
                    "bench.clock.key": clock, "bench.window": [lo, hi]}
            t0 = time.monotonic()
            with LocalCluster(workers=2) as cluster:
                run = cluster.submit(name, build(data, take, name, args.emitters or n), conf)

                def pids(run=run):
                    return {"redis": redis_pid, **{f"worker {i}": pid for i, pid in run.pids.items()}}
                with CpuSampler(pids) as sampler:
                    status = run.wait(1800)
            wall = time.monotonic() - t0
            if status.state != "completed":
                print(f"run {name} ended {status.state}: {status.error}", file=sys.stderr)
                return 1
            got = ValueMap(client, "word-counts").get(list(truth))
            if {w: v.value for w, v in got.items()} != truth:
                print(f"run {name}: the counts are not exact", file=sys.stderr)
                return 1
            w0, w1 = float(client.get(f"{clock}:{lo}")), float(client.get(f"{clock}:{hi}"))
            cps = (hi - lo) / (w1 - w0)
            runs[(take, delay, pending)].append(cps)
            used = sampler.between(w0, w1)
            workers = [v for k, v in used.items() if k.startswith("worker")]
            per_batch = 1000 * sum(workers) / (hi - lo)
            busiest = max(workers, default=0.0) / (w1 - w0)
            cpu[(take, delay, pending)].append((per_batch, busiest, used.get("redis", 0.0) / (w1 - w0)))
            print(f"  run {rep + 1}: batch {n * take}, commit +{delay} ms, pending {pending}: {cps:.1f} commits/s, "
                  f"{cps * n * take:,.0f} tuples/s, workers {per_batch:.1f} ms CPU a batch, busiest at "
                  f"{busiest:.0%} of a core ({wall:.1f} s with start-up)", file=sys.stderr, flush=True)
    print(f"\ntransactional word count, {args.batches} batches per run ({n} partitions, 1,000 distinct words), "
          f"commits {lo}-{hi} timed, 2 workers, median of {args.repeat}\n")
    # The machine's speed drifts between runs (a shared host: ±20% over minutes), so the speed-up
    # is taken per repetition, against the pending-1 run of the same round, and its median and
    # range reported: drift common to a round cancels out.
    print("| batch tuples | extra commit ms | max.spout.pending | tuples/s | commits/s | spread commits/s "
          "| x pending 1 | spread x | workers' CPU ms a batch | busiest worker | Redis |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for take, delay, pending in configs:
        cps, base = runs[(take, delay, pending)], runs[(take, delay, 1)]
        mid = statistics.median(cps)
        ratios = [c / b for c, b in zip(cps, base)]
        per_batch, busiest, red = (statistics.median(x) for x in zip(*cpu[(take, delay, pending)]))
        print(f"| {n * take} | {delay} | {pending} | {mid * n * take:,.0f} | {mid:.1f} | "
              f"{min(cps):.1f}-{max(cps):.1f} | {statistics.median(ratios):.2f} | "
              f"{min(ratios):.2f}-{max(ratios):.2f} | {per_batch:.1f} | {busiest:.0%} | {red:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
