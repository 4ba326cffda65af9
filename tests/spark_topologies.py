"""Topologies the Spark tests submit by reference ("tests.spark_topologies:NAME"); every
executor imports this module. They read their Redis URL from the ``redis.url`` config key."""

from __future__ import annotations

import time

from examples.wordcount import COUNTS, STREAM, SplitSentence, WordCount
from topology_runtime import BasicBolt, Spout, TopologyBuilder
from topology_runtime.connectors import RedisStreamSpout


class SlowSplit(SplitSentence):
    def execute(self, tup):
        time.sleep(0.003)  # long enough to kill a worker mid-run
        super().execute(tup)


def wordcount(slow: bool = False):
    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamSpout(STREAM, fields=["sentence"], bounded=True, batch_size=50), 1)
    b.set_bolt("split", SlowSplit() if slow else SplitSentence(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", WordCount(COUNTS, flush_every=200), 2).fields_grouping("split", ["word"]) \
        .add_configuration("topology.tick.tuple.freq.secs", 0.2)
    return b.create_topology()


def slow_wordcount():
    return wordcount(slow=True)


class Forever(Spout):
    """An unbounded spout: ticks forever until the run is killed."""

    outputs = ["n"]

    def open(self, conf, context):
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.emit([self.n], msg_id=self.n)
        time.sleep(0.001)


class Sink(BasicBolt):
    outputs: list[str] = []

    def execute(self, tup):
        pass


def unbounded():
    b = TopologyBuilder()
    b.set_spout("ticks", Forever(), 1)
    b.set_bolt("sink", Sink(), 2).shuffle_grouping("ticks")
    return b.create_topology()


class BrokenSpout(Spout):
    outputs = ["n"]

    def open(self, conf, context):
        raise ConnectionError("cannot reach the source (planted failure)")


def broken():
    b = TopologyBuilder()
    b.set_spout("source", BrokenSpout(), 1)
    b.set_bolt("sink", Sink(), 1).shuffle_grouping("source")
    return b.create_topology()


def slow_stateful_wordcount():
    from examples.stateful_wordcount import StatefulWordCount

    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamSpout(STREAM, fields=["sentence"], bounded=True, batch_size=50), 1)
    b.set_bolt("split", SlowSplit(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulWordCount(), 2).fields_grouping("split", ["word"])
    return b.create_topology()


def exactly_once_wordcount(slow: bool = True, bounded: bool = True):
    """Stateful word count over the replayable stream spout (topology.state.exactly.once)."""
    from examples.stateful_wordcount import StatefulWordCount
    from topology_runtime.connectors import RedisStreamReplaySpout

    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamReplaySpout(STREAM, fields=["sentence"], bounded=bounded, batch_size=50), 2)
    b.set_bolt("split", SlowSplit() if slow else SplitSentence(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulWordCount(), 2).fields_grouping("split", ["word"])
    return b.create_topology()


def exactly_once_wordcount_v2(bounded: bool = True):
    """The exactly-once word count's next version: a second stateful counter beside the first."""
    from examples.stateful_wordcount import StatefulWordCount
    from topology_runtime.connectors import RedisStreamReplaySpout

    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamReplaySpout(STREAM, fields=["sentence"], bounded=bounded, batch_size=50), 2)
    b.set_bolt("split", SlowSplit(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulWordCount(), 2).fields_grouping("split", ["word"])
    b.set_bolt("count2", StatefulWordCount(), 1).fields_grouping("split", ["word"])
    return b.create_topology()


def unbounded_v2():
    """The next version reading its stream until killed, as a service does (the upgrade DAG's
    new version in tests/test_airflow_upgrade.py)."""
    return exactly_once_wordcount_v2(bounded=False)


class FailOnceSplit(SplitSentence):
    """Raises once (the first time any task sees a sentence with "fox"): in exactly-once mode
    that tuple's failure must roll every task back, not replay one tuple."""

    def prepare(self, conf, context):
        import redis

        self.r = redis.Redis.from_url(conf["redis.url"])

    def execute(self, tup):
        if "fox" in tup["sentence"] and self.r.set("test:failed-once", 1, nx=True):
            raise RuntimeError("planted failure")
        super().execute(tup)


def exactly_once_failing_wordcount():
    from examples.stateful_wordcount import StatefulWordCount
    from topology_runtime.connectors import RedisStreamReplaySpout

    b = TopologyBuilder()
    b.set_spout("sentences", RedisStreamReplaySpout(STREAM, fields=["sentence"], bounded=True, batch_size=50), 2)
    b.set_bolt("split", FailOnceSplit(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulWordCount(), 2).fields_grouping("split", ["word"])
    return b.create_topology()


def executor_import_error():
    """Imports on the driver (TOPOLOGY_TEST_DRIVER=1), not on the executors: the spout's class
    comes from tests.driver_only, which raises ImportError there."""
    from tests.driver_only import DriverOnlySpout

    b = TopologyBuilder()
    b.set_spout("source", DriverOnlySpout(), 1)
    b.set_bolt("sink", Sink(), 1).shuffle_grouping("source")
    return b.create_topology()
