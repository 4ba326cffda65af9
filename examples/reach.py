"""Storm-starter's ReachTopology as a linear DRPC function (docs/drpc.md).

The reach of a URL: how many distinct people follow someone who tweeted it. The social graph
lives in Redis (``load_graph``): ``reach:tweeters:URL`` and ``reach:followers:USER`` sets.

    .venv/bin/python examples/reach.py            # loads the graph, runs the topology, asks for each URL
    topology drpc reach foo.com/blog/1           # from any shell, while the topology runs
"""

from __future__ import annotations

import sys

from state.connection import connect
from topology_runtime import BasicBolt
from topology_runtime.api.config import redis_url
from topology_runtime.drpc import LinearDRPCTopologyBuilder
from topology_runtime.transactional import BatchBolt

TWEETERS = {
    "foo.com/blog/1": ["sally", "bob", "tim", "george", "nathan"],
    "engineering.twitter.com/blog/5": ["adam", "david", "sally", "nathan"],
    "tech.backtype.com/blog/123": ["tim", "mike", "john"],
}
FOLLOWERS = {
    "sally": ["bob", "tim", "alice", "adam", "jim", "chris", "jai"],
    "bob": ["sally", "nathan", "jim", "mary", "david", "vivian"],
    "tim": ["alex"],
    "nathan": ["sally", "bob", "adam", "harry", "chris", "vivian", "emily", "jordan"],
    "adam": ["david", "carissa"],
    "mike": ["john", "bob"],
    "john": ["alice", "nathan", "jim", "mike", "bob"],
}


def load_graph(url: str, tweeters: dict = TWEETERS, followers: dict = FOLLOWERS) -> None:
    """Write the social graph to Redis (replacing what the example wrote before)."""
    r = connect(url)
    pipe = r.pipeline(transaction=False)
    for kind, graph in (("tweeters", tweeters), ("followers", followers)):
        for k, members in graph.items():
            pipe.delete(f"reach:{kind}:{k}")
            if members:
                pipe.sadd(f"reach:{kind}:{k}", *members)
    pipe.execute()
    r.close()


def expected_reach(url: str, tweeters: dict = TWEETERS, followers: dict = FOLLOWERS) -> int:
    return len({f for t in tweeters.get(url, []) for f in followers.get(t, [])})


class _Graph(BasicBolt):
    def prepare(self, conf, context):
        self.redis = connect(redis_url(conf, needed_for="the reach example"), decode_responses=True)


class GetTweeters(_Graph):
    outputs = ["id", "tweeter"]

    def execute(self, tup):
        request, url = tup.values
        for tweeter in sorted(self.redis.smembers(f"reach:tweeters:{url}")):
            self.emit([request, tweeter])


class GetFollowers(_Graph):
    outputs = ["id", "follower"]

    def execute(self, tup):
        request, tweeter = tup.values
        for follower in sorted(self.redis.smembers(f"reach:followers:{tweeter}")):
            self.emit([request, follower])


class PartialUniquer(BatchBolt):
    """One instance per request and task: the distinct followers this task saw."""

    outputs = ["id", "partial-count"]

    def prepare(self, conf, context, batch_id):
        self.id, self.followers = batch_id, set()

    def execute(self, tup):
        self.followers.add(tup.values[1])

    def finish_batch(self):
        self.emit([self.id, len(self.followers)])


class CountAggregator(BatchBolt):
    outputs = ["id", "reach"]

    def prepare(self, conf, context, batch_id):
        self.id, self.count = batch_id, 0

    def execute(self, tup):
        self.count += tup.values[1]

    def finish_batch(self):
        self.emit([self.id, self.count])


def topology(parallelism: tuple[int, int, int, int] = (2, 4, 3, 2)):
    builder = LinearDRPCTopologyBuilder("reach")
    builder.add_bolt(GetTweeters(), parallelism[0])
    builder.add_bolt(GetFollowers(), parallelism[1]).shuffle_grouping()
    builder.add_bolt(PartialUniquer(), parallelism[2]).fields_grouping(["id", "follower"])
    builder.add_bolt(CountAggregator(), parallelism[3]).fields_grouping(["id"])
    return builder.create_topology()


def main() -> int:
    from topology_runtime import LocalCluster
    from topology_runtime.control.redis_server import resolve_redis_url
    from topology_runtime.drpc import DRPCClient

    url, _ = resolve_redis_url(None)
    load_graph(url)
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("reach", topology(), {"redis.url": url, "topology.message.timeout.secs": 10})
        with DRPCClient(url) as client:
            for u in [*TWEETERS, "nobody.example/none"]:
                print(f"reach of {u}: {client.execute('reach', u, timeout=30)} (expected {expected_reach(u)})")
        run.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
