"""Cost of checkpointed state, side by side in one run.

1. Word count throughput (the throughput.py workload) with the count bolt keeping a plain dict
   vs a StatefulBolt whose KeyValueState in Redis is checkpointed every second.
2. Checkpoint latency (prepare + commit, one task, real Redis) as the number of keys changed
   per checkpoint grows: 1k, 10k, 100k.

    python bench/state.py [--sentences N] [--redis URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.throughput import CountBolt, SentenceSpout, SplitBolt, make_sentences  # noqa: E402
from state import RedisKeyValueState, reset  # noqa: E402
from topology_runtime import LocalCluster, StatefulBolt, TopologyBuilder  # noqa: E402


class StatefulCount(StatefulBolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context):
        self.out = Path(conf["bench.outdir"], f"count-{context.task_index}")
        self.n = 0
        self.last = time.time()

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        w = tup.values[0]
        self.counts.put(w, self.counts.get(w, 0) + 1)
        self.ack(tup)
        self.n += 1
        if not self.n & 255:
            self.last = time.time()

    def cleanup(self):
        self.out.write_text(json.dumps({"total": self.n, "last": self.last}))


def run_wordcount(sentences, stateful: bool, url: str) -> dict:
    outdir = tempfile.mkdtemp(prefix="bench-state-")
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout(sentences), 2)
    b.set_bolt("split", SplitBolt(), 2).local_or_shuffle_grouping("sentences")
    b.set_bolt("count", StatefulCount() if stateful else CountBolt(), 2).fields_grouping("split", ["word"])
    conf = {"bench.outdir": outdir, "redis.url": url, "topology.message.timeout.secs": 30,
            "topology.state.provider": "redis", "topology.state.checkpoint.interval.ms": 1000}
    name = "bench-state" if stateful else "bench-nostate"
    reset(name, url)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run(name, b.create_topology(), conf, timeout=1800)
    marks = [json.loads(p.read_text()) for p in Path(outdir).glob("spout-*")]
    counts = [json.loads(p.read_text()) for p in Path(outdir).glob("count-*")]
    first = min(m["first_emit"] for m in marks)
    # End of processing = the last word counted. Acks of a stateful bolt wait for the next
    # commit by design (up to one interval): that shows in the complete latency, not here.
    last = max(c["last"] for c in counts)
    words = len(sentences) * 10
    return {"stateful": stateful, "words_per_sec": round(words / (last - first)), "state": status.state,
            "p50_ms": status.components["sentences"].complete_latency_p50_ms,
            "p99_ms": status.components["sentences"].complete_latency_p99_ms,
            "counted_ok": sum(c["total"] for c in counts) == words}


def commit_latency(url: str, keys: int, rounds: int) -> dict:
    client = redis.Redis.from_url(url)
    reset("bench-commit", url)
    st = RedisKeyValueState(client, "bench-commit", "count", 0)
    st.get("warm")
    prep, comm = [], []
    for txid in range(rounds):
        for i in range(keys):
            st.put(f"key{i}", txid * keys + i)
        t0 = time.perf_counter()
        st.prepare_commit(txid)
        t1 = time.perf_counter()
        st.commit(txid)
        t2 = time.perf_counter()
        prep.append((t1 - t0) * 1000)
        comm.append((t2 - t1) * 1000)
    total = sorted(p + c for p, c in zip(prep, comm))
    reset("bench-commit", url)
    return {"keys": keys, "rounds": rounds, "prepare_p50_ms": round(statistics.median(prep), 2),
            "commit_p50_ms": round(statistics.median(comm), 2),
            "checkpoint_p50_ms": round(statistics.median(total), 2),
            "checkpoint_p99_ms": round(total[min(len(total) - 1, int(len(total) * 0.99))], 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=100_000)
    p.add_argument("--redis", default=None)
    args = p.parse_args(argv)
    url = args.redis
    if not url:
        from topology_runtime.control.redis_server import resolve_redis_url

        url = resolve_redis_url(None)[0]
    sentences = make_sentences(args.sentences)
    plain = run_wordcount(sentences, False, url)
    stateful = run_wordcount(sentences, True, url)
    print(f"\nword count, {args.sentences:,} sentences, 2 workers, acking on, checkpoints every 1 s\n")
    print("| count bolt | words/s | complete p50 ms | complete p99 ms | counts |")
    print("|---|---:|---:|---:|---|")
    for r in (plain, stateful):
        print(f"| {'StatefulBolt, KeyValueState in Redis' if r['stateful'] else 'plain dict'} | "
              f"{r['words_per_sec']:,} | {r['p50_ms']} | {r['p99_ms']} | {'OK' if r['counted_ok'] else 'MISMATCH'} |")
    cost = 1 - stateful["words_per_sec"] / plain["words_per_sec"]
    print(f"\nthroughput cost of state: {cost:.0%} (target <= 20%)")
    print("\ncheckpoint latency, one task, keys changed per checkpoint\n")
    print("| keys changed | prepare p50 ms | commit p50 ms | checkpoint p50 ms | checkpoint p99 ms |")
    print("|---:|---:|---:|---:|---:|")
    for keys, rounds in ((1000, 50), (10_000, 20), (100_000, 5)):
        r = commit_latency(url, keys, rounds)
        print(f"| {keys:,} | {r['prepare_p50_ms']} | {r['commit_p50_ms']} | {r['checkpoint_p50_ms']} | "
              f"{r['checkpoint_p99_ms']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
