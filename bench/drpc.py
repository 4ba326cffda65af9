"""Linear DRPC: requests/s and request latency (client call to answer) on 2 workers.

    python bench/drpc.py [--requests N] [--concurrency 1,8,32] [--repeat R] [--redis URL]

Two functions, each its own topology on LocalCluster(workers=2), run one after the other:
``echo`` (one BasicBolt stage: the framework's cost: spout, prepare-request, coordination,
join-result, return-results) and ``reach`` (examples/reach.py, 4 stages with the graph in Redis,
requests cycling over its 3 URLs). Clients are threads of this process calling
``DRPCClient.execute`` back to back; latency is measured per call. A private Redis is started
unless --redis is given. Rows: the best of R rounds by requests/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples import reach  # noqa: E402
from topology_runtime import BasicBolt, LocalCluster  # noqa: E402
from topology_runtime.drpc import DRPCClient, LinearDRPCTopologyBuilder  # noqa: E402


class Echo(BasicBolt):
    outputs = ["id", "result"]

    def execute(self, tup):
        self.emit([tup.values[0], tup.values[1]])


def echo_topology():
    b = LinearDRPCTopologyBuilder("echo")
    b.add_bolt(Echo(), 2)
    return b.create_topology()


def measure(client: DRPCClient, function: str, args: list[str], n: int, threads: int) -> dict:
    lat: list[float] = []
    lock = threading.Lock()
    counter = iter(range(n))

    def worker() -> None:
        mine = []
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            t0 = time.perf_counter()
            client.execute(function, args[i % len(args)], timeout=60)
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    lat.sort()
    return {"rps": n / elapsed, "p50": statistics.median(lat) * 1000, "p99": lat[int(len(lat) * 0.99) - 1] * 1000}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--redis", default=None)
    a = p.parse_args()
    server = None
    url = a.redis
    if url is None:
        from topology_runtime.control.redis_server import RedisServer

        server = RedisServer(tempfile.mkdtemp(prefix="bench-drpc-"))
        server.start()
        url = server.url
    levels = [int(x) for x in a.concurrency.split(",")]
    rows = []
    try:
        reach.load_graph(url)
        conf = {"redis.url": url, "topology.message.timeout.secs": 30}
        for function, topo, args in (("echo", echo_topology(), ["hello", "world"]),
                                     ("reach", reach.topology((2, 4, 3, 2)), list(reach.TWEETERS))):
            with LocalCluster(workers=2) as cluster, DRPCClient(url) as client:
                run = cluster.submit(f"bench-{function}", topo, conf)
                measure(client, function, args, 200, 8)  # warm up
                for threads in levels:
                    n = a.requests if threads > 1 else max(200, a.requests // 4)
                    best = max((measure(client, function, args, n, threads) for _ in range(a.repeat)),
                               key=lambda r: r["rps"])
                    rows.append((function, threads, n, best))
                    print(f"{function} x{threads}: {best['rps']:,.0f} req/s, p50 {best['p50']:.1f} ms, "
                          f"p99 {best['p99']:.1f} ms", flush=True)
                run.kill()
    finally:
        if server is not None:
            server.stop()
    print("\n| function | concurrent clients | requests | requests/s | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|")
    for function, threads, n, r in rows:
        print(f"| {function} | {threads} | {n} | {r['rps']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
