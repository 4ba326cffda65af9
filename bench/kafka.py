"""The acked word count read from Kafka beside the same count read from a Redis stream, side by
side in one run (words/s, best of N): ``KafkaSpout`` through a consumer group on a
Kafka-protocol broker (Tansu, the tests' broker: tests/kafka_broker.py) against
``RedisStreamSpout`` through a consumer group on Redis.

    .venv/bin/python bench/kafka.py [--sentences 50000] [--repeat 3] [--partitions 2]

Both: the spout (2 tasks) -> split (2) -> count into a Redis hash (2), 2 workers, bounded runs
(wall time from submit to the last count, start-up included: the group's forming is part of a
Kafka run's cost). Tansu keeps everything in memory; a real Kafka writes to disk and replicates.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from examples.kafka_wordcount import build as kafka_build  # noqa: E402
from examples.wordcount import build as redis_build  # noqa: E402
from examples.wordcount import load_sentences, sample_sentences, true_counts  # noqa: E402
from topology_runtime import LocalCluster  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=50_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--partitions", type=int, default=2)
    args = p.parse_args(argv)
    import redis
    from kafka_broker import FAST_GROUP, TansuBroker

    from topology_runtime.control.redis_server import RedisServer

    tmp = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    rs = RedisServer(tmp / "redis")
    rs.start()
    broker = TansuBroker(tmp / "tansu.log")
    broker.start()
    try:
        client = redis.Redis.from_url(rs.url, decode_responses=True)
        sentences = sample_sentences(args.sentences)
        truth = true_counts(sentences)
        words = sum(truth.values())
        broker.create_topic("bench-sentences", args.partitions)
        broker.produce("bench-sentences", [(str(i), s) for i, s in enumerate(sentences)])
        best: dict[str, float] = {}
        for i in range(args.repeat):
            for source in ("redis", "kafka"):
                client.delete("bench:counts", "bench:sentences")
                if source == "redis":
                    load_sentences(client, args.sentences, stream="bench:sentences")
                    topo = redis_build("bench:sentences", "bench:counts")
                else:
                    topo = kafka_build(None, "bench-sentences", f"bench-{i}", "bench:counts", counts_topic=None,
                                       consumer_conf=FAST_GROUP)
                conf = {"redis.url": rs.url, "kafka.bootstrap.servers": broker.servers}
                t0 = time.monotonic()
                with LocalCluster(workers=2) as cluster:
                    status = cluster.run(f"bench-{source}-{i}", topo, conf, timeout=600)
                wall = time.monotonic() - t0
                got = {w: int(n) for w, n in client.hgetall("bench:counts").items()}
                assert status.state == "completed" and got == truth, (source, status.state)
                rate = words / wall
                best[source] = max(best.get(source, 0.0), rate)
                print(f"round {i + 1}: {source:5} {rate:>10,.0f} words/s ({wall:.2f} s wall)", flush=True)
    finally:
        broker.stop()
        rs.stop()
    print(f"\n| source ({args.sentences:,} sentences, 2 workers, acked) | words/s, wall (best of {args.repeat}) |"
          "\n|---|---:|")
    for source, label in (("redis", "Redis stream (RedisStreamSpout)"),
                          ("kafka", f"Kafka topic, {args.partitions} partitions (KafkaSpout, Tansu)")):
        print(f"| {label} | {best[source]:,.0f} |")
    print(f"\nKafka / Redis: {best['kafka'] / best['redis']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
