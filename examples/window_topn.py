"""Sliding-window top-N pages over a Redis stream (docs/windowing.md).

    pageviews (Redis stream: page, ts)
      -> "views":  RedisStreamSpout (consumer group; an entry is XACKed once its tuple tree is acked)
      -> "count":  PageCounts, a WindowedBolt: 6 s window sliding every 2 s on event time (ts),
                   fields-grouped by page; each task emits its own top N of each window
      -> "rank":   Rankings (one task): each window's top N in Redis, sorted set topn:<end ms>,
                   the newest window's end in topn:latest

A page is counted on one task only, so the global top N of a window is among the tasks' top N.
Tuples are acked as they leave the window (Storm's rule), so a crashed worker's windows are
rebuilt from the stream's replays. A producer thread writes pageviews stamped with the wall
clock while the topology runs; the example prints each window's ranking as it completes.

    .venv/bin/python examples/window_topn.py [--seconds 20] [--top 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from state.connection import connect  # noqa: E402
from topology_runtime import Bolt, LocalCluster, TopologyBuilder  # noqa: E402
from topology_runtime.api.config import redis_url  # noqa: E402
from topology_runtime.connectors import RedisStreamSpout  # noqa: E402
from topology_runtime.windowing import Duration, WindowedBolt  # noqa: E402

STREAM = "example:pageviews"
PREFIX = "topn"


class PageCounts(WindowedBolt):
    """Views per page in the window; emits this task's top ``n`` as ``[end, page, views]``."""

    outputs = ["end", "page", "views"]

    def __init__(self, n: int = 3) -> None:
        self.n = n

    def execute(self, window):
        views = Counter(t["page"] for t in window.get())
        for page, count in sorted(views.items(), key=lambda kv: (-kv[1], kv[0]))[:self.n]:
            self.emit([window.end_ts, page, count])


class Rankings(Bolt):
    """Merges the tasks' top N into ``<prefix>:<end>`` (a sorted set, kept an hour)."""

    outputs: list = []

    def prepare(self, conf, context):
        self.redis = connect(redis_url(conf, needed_for="the top-N example"))
        self.prefix = conf.get("topn.prefix", PREFIX)
        self.latest = 0

    def execute(self, tup):
        end, page, views = tup["end"], tup["page"], tup["views"]
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(f"{self.prefix}:{end}", {page: views})
        pipe.expire(f"{self.prefix}:{end}", 3600)
        if end > self.latest:
            self.latest = end
            pipe.set(f"{self.prefix}:latest", end)
        pipe.execute()
        self.ack(tup)


def topn_topology(stream: str = STREAM, top: int = 3, length: float = 6, sliding: float = 2,
                  lag: float = 0.5, parallelism: int = 2, bounded: bool = False):
    b = TopologyBuilder()
    b.set_spout("views", RedisStreamSpout(stream, fields=["page", "ts"], group="topn", bounded=bounded))
    counts = (PageCounts(top).with_window(Duration(length), Duration(sliding)).with_timestamp_field("ts")
              .with_lag(Duration(lag)).with_watermark_interval(Duration(min(1.0, sliding / 2))))
    b.set_bolt("count", counts, parallelism).fields_grouping("views", ["page"])
    b.set_bolt("rank", Rankings()).global_grouping("count")
    return b.create_topology()


def top_n(client, end: int, n: int = 3, prefix: str = PREFIX) -> list[tuple[str, int]]:
    """The window ending at ``end`` (ms): its ``n`` most viewed pages, most first (ties by name)."""
    rows = client.zrange(f"{prefix}:{end}", 0, -1, withscores=True)
    rows = [(p.decode() if isinstance(p, bytes) else p, int(s)) for p, s in rows]
    return sorted(rows, key=lambda r: (-r[1], r[0]))[:n]


def pageview(rng: random.Random, pages: int = 40) -> str:
    """A page drawn with Zipf-like weights: a few pages take most views."""
    return f"/page/{min(pages - 1, int(rng.paretovariate(1.2)) - 1)}"


def produce(url: str, stop: threading.Event, rate: int = 300, stream: str = STREAM) -> None:
    """Writes ~``rate`` pageviews a second, stamped with the wall clock, until ``stop``."""
    client = connect(url)
    rng = random.Random(42)
    while not stop.is_set():
        pipe = client.pipeline(transaction=False)
        now = int(time.time() * 1000)
        for _ in range(rate // 10):
            pipe.xadd(stream, {"page": pageview(rng), "ts": now}, maxlen=100_000, approximate=True)
        pipe.execute()
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    from topology_runtime.control.redis_server import resolve_redis_url

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20, help="how long to run (default 20)")
    ap.add_argument("--top", type=int, default=3, help="pages per window (default 3)")
    ap.add_argument("--redis", help="Redis URL (default: TOPOLOGY_REDIS_URL or the project-local Redis)")
    args = ap.parse_args(argv)
    url, where = resolve_redis_url(args.redis)
    print(f"Redis: {where}")
    client = connect(url, decode_responses=True)
    client.delete(STREAM, f"{PREFIX}:latest")
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(url, stop), daemon=True)
    shown = newest = 0
    with LocalCluster(workers=2) as cluster:
        # A tuple stays pending until it leaves the window: ~rate x (length + sliding) trees in
        # flight, which the spout's pending limit must allow (docs/windowing.md, "Acking").
        conf = {"redis.url": url, "topology.max.spout.pending": 5000}
        run = cluster.submit("window-topn", topn_topology(top=args.top), conf)
        producer.start()
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            time.sleep(0.5)
            latest = int(client.get(f"{PREFIX}:latest") or 0)
            if latest > newest:
                # Another task may still report the newest window: show the one before it.
                if newest:
                    stamp = time.strftime("%H:%M:%S", time.localtime(newest / 1000))
                    ranking = ", ".join(f"{page} {views}" for page, views in top_n(client, newest, args.top))
                    print(f"window ending {stamp}: {ranking}", flush=True)
                    shown += 1
                newest = latest
        stop.set()
        status = run.kill()
    print(status.table())
    return 0 if shown else 1


if __name__ == "__main__":
    sys.exit(main())
