"""Trident topologies on LocalCluster (real worker processes, a real Redis): Storm's integration
tests T1-T7 (word count queried by DRPC while fed in steps, empty batches flowing, the whole
state dumped by broadcast, global aggregates, split and merge, two groupings merged, consecutive
repartitions), a join within a batch, chained aggregations, min_by / max_by, FirstN, and
FixedBatchSpout topologies persisting through every kind of updater that end by themselves,
with their readable component names in ``topology status``.

Several scenarios share one topology: a LocalCluster start costs a second or two."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest
from trident_components import CountAsAggregator, CountReducer, Split, StringLength, TrueFilter, TuplifyArgs

from topology_runtime import LocalCluster
from topology_runtime.connectors import RedisStreamsTransactionalSpout
from topology_runtime.drpc import DRPCClient
from topology_runtime.testing import wait_for
from topology_runtime.trident import (
    Count,
    FilterNull,
    FirstN,
    FixedBatchSpout,
    Function,
    MapGet,
    RedisMapState,
    ReducerAggregator,
    StateUpdater,
    Sum,
    TridentTopology,
    TupleCollectionGet,
)

pytestmark = pytest.mark.slow


class Upper(Function):
    def execute(self, tup, collector):
        collector.emit([tup[0].upper()])


class LongestReducer(ReducerAggregator):
    """The longest word seen (ties: the alphabetically smallest)."""

    def init(self):
        return ""

    def reduce(self, acc, tup):
        w = tup["word"]
        return min(acc, w, key=lambda x: (-len(x), x)) if acc else w


class LengthHistogram(StateUpdater):
    """Counts words per length in a map state keyed ``[length]``; emits ``[length, new count]``."""

    def update_state(self, state, tuples, collector):
        by_len = Counter(len(t["word"]) for t in tuples)
        keys = [[n] for n in by_len]
        news = state.multi_update(keys, [lambda old, k=k: (old or 0) + k for k in by_len.values()])
        for key, new in zip(keys, news):
            collector.emit([key[0], new])


class KeepLatest(StateUpdater):
    """Puts each row's second value under its first: the last value seen per key."""

    def update_state(self, state, tuples, collector):
        state.multi_put([[t[0]] for t in tuples], [t[1] for t in tuples])


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _rows(text: str) -> list:
    return json.loads(text)


def _multiset(rows: list) -> Counter:
    return Counter(json.dumps(r) for r in rows)


def _global_value(factory, url: str):
    """The value a non-grouped persistent aggregate keeps (one partition, its global key)."""
    state = factory.make_state({"redis.url": url}, 0, 1)
    try:
        return state.get()
    finally:
        state.close()


def _state_entries(factory, url: str, partitions: int, only: int | None = None) -> dict:
    """Every ``key -> value`` of a Redis map state, read from its partitions (or one)."""
    out = {}
    for i in range(partitions) if only is None else [only]:
        state = factory.make_state({"redis.url": url}, i, partitions)
        for *key, value in state.get_tuples():
            out[key[0] if len(key) == 1 else tuple(key)] = value
        state.close()
    return out


# --- T1, T2, T3: word count fed in steps, queried by DRPC ---------------------------------------------------
def test_word_count_fed_in_steps_answers_drpc_sums_and_the_whole_state(redis_url, redis_client):
    stream = _unique("sentences")
    prefix = _unique("wc")
    t = TridentTopology()
    spout = RedisStreamsTransactionalSpout([stream], ["sentence"], max_entries=50)
    counts = (t.new_stream(_unique("tx-wc"), spout).parallelism_hint(2)
              .each(["sentence"], Split(), ["word"]).group_by(["word"])
              .persistent_aggregate(RedisMapState.opaque(key_prefix=prefix), Count(), ["count"])
              .parallelism_hint(3))
    (t.new_drpc_stream("words").each(["args"], Split(), ["word"]).group_by(["word"])
     .state_query(counts, ["word"], MapGet(), ["count"]).each(["count"], FilterNull())
     .aggregate(["count"], Sum(), ["sum"]).project(["sum"]))
    (t.new_drpc_stream("all-tuples").broadcast()
     .state_query(counts, ["args"], TupleCollectionGet(), ["word", "count"]).project(["word", "count"]))
    topology = t.build()

    def feed(*sentences):
        for s in sentences:
            redis_client.xadd(stream, {"sentence": s})

    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit(_unique("trident-wc"), topology, {"redis.url": redis_url})
        drpc = DRPCClient(redis_url)

        def words(q):
            return _rows(drpc.execute("words", q, timeout=20))

        def everything():
            return {tuple(r) for r in _rows(drpc.execute("all-tuples", "ignored", timeout=20))}

        # T1 step 1
        feed("hello the man said", "the")
        assert wait_for(lambda: words("the") == [[2]], timeout=30), words("the")
        assert words("hello") == [[1]]
        # T3: the whole state, through every partition
        assert everything() == {("hello", 1), ("said", 1), ("the", 2), ("man", 1)}
        # T2's spirit: with no input, batches go on (empty) and queries keep answering
        coord = next(c for c in run.status().components if c.startswith("coord-"))
        started = run.status().components[coord].emitted
        for _ in range(10):
            assert words("the") == [[2]]
            time.sleep(0.1)
        assert wait_for(lambda: run.status().components[coord].emitted > started + 3, timeout=15), (
            "the coordinator stopped starting batches while the stream was empty")
        assert words("the") == [[2]]
        assert words("nothing") == [[0]]  # a missing word: FilterNull, then the sum of nothing
        # T1 step 2
        feed("the man on the moon", "where are you")
        assert wait_for(lambda: words("the") == [[4]], timeout=30), words("the")
        assert words("man") == [[2]]
        assert words("man where you the") == [[8]]
        # T3 step 2 (Storm's "the foo" fed after its first dump)
        feed("the foo")
        assert wait_for(lambda: words("the") == [[5]], timeout=30), words("the")
        assert everything() == {("hello", 1), ("said", 1), ("the", 5), ("man", 2), ("on", 1), ("moon", 1),
                                ("where", 1), ("are", 1), ("you", 1), ("foo", 1)}
        # T2's last steps
        feed("the the")
        assert wait_for(lambda: words("the") == [[7]], timeout=30), words("the")
        feed("the")
        assert wait_for(lambda: words("the") == [[8]], timeout=30), words("the")
        assert words("foo moon man") == [[4]]
        status = run.status()
        assert status.state == "running" and not status.errors, status.errors
        run.kill()
    # what the queries read is what the state holds
    assert _state_entries(RedisMapState.opaque(key_prefix=prefix), redis_url, 3) == {
        "hello": 1, "said": 1, "the": 8, "man": 2, "on": 1, "moon": 1, "where": 1, "are": 1, "you": 1, "foo": 1}


# --- T4-T7 and the other per-batch operations, on DRPC streams ---------------------------------------------
DEVICES = [[123, 2], [113, 54], [23, 28], [237, 37], [12, 23], [62, 17], [98, 42], [64, 18], [72, 54], [2, 28],
           [742, 71], [98, 45], [62, 12], [19, 174]]


def _per_batch_topology():
    t = TridentTopology()
    # T4: a global aggregate, exactly one row per batch
    (t.new_drpc_stream("numwords").each(["args"], Split(), ["word"])
     .aggregate(CountAsAggregator(), ["count"]).parallelism_hint(2).project(["count"]))
    # T5: split and merge
    d = t.new_drpc_stream("splitter")
    t.merge(d.each(["args"], Split(), ["word"]).project(["word"]),
            d.each(["args"], StringLength(), ["len"]).project(["len"]))
    # no repartition at all: the first segment's rows are the result
    t.new_drpc_stream("echo").each(["args"], Split(), ["word"]).each(["word"], StringLength(), ["len"])
    # a merge of a stream with a repartition of itself
    w = t.new_drpc_stream("both-cases").each(["args"], Split(), ["word"]).parallelism_hint(2)
    t.merge(w.project(["word"]), w.shuffle().each(["word"], Upper(), ["up"]).project(["up"]).parallelism_hint(3))
    # T6: two groupings of one stream, merged
    d = t.new_drpc_stream("tester").each(["args"], TrueFilter())
    t.merge(d.group_by(["args"]).aggregate(CountAsAggregator(), ["count"]),
            d.group_by(["args"]).aggregate(CountAsAggregator(), ["count"]))
    # T7: consecutive repartitions
    (t.new_drpc_stream("tester2").each(["args"], Split(), ["word"]).local_or_shuffle().shuffle()
     .aggregate(CountAsAggregator(), ["count"]))
    # a join within the batch: each word with its length and its upper case
    d = t.new_drpc_stream("joined")
    w = d.each(["args"], Split(), ["word"])
    t.join(w.each(["word"], StringLength(), ["len"]).project(["word", "len"]).parallelism_hint(2), ["word"],
           w.each(["word"], Upper(), ["up"]).project(["word", "up"]), ["word"], ["word", "len", "up"])
    # chained aggregations: count and sum in one pass, whole batch and per group
    w = t.new_drpc_stream("chained").each(["args"], Split(), ["word"]).each(["word"], StringLength(), ["len"])
    w.chained_agg().aggregate(Count(), ["count"]).aggregate(["len"], Sum(), ["sum"]).chain_end()
    (t.new_drpc_stream("chained-grouped").each(["args"], Split(), ["word"]).each(["word"], StringLength(), ["len"])
     .group_by(["word"]).chained_agg().aggregate(Count(), ["count"]).aggregate(["len"], Sum(), ["sum"])
     .chain_end().parallelism_hint(3))
    # min_by / max_by over one batch (moved to one partition first)
    devices = t.new_drpc_stream("devices").each(["args"], TuplifyArgs(), ["device", "count"]).project(
        ["device", "count"])
    devices.global_().min_by("count")
    t.new_drpc_stream("devices-max").each(["args"], TuplifyArgs(), ["device", "count"]).project(
        ["device", "count"]).shuffle().max_by("count").global_().max_by("count")
    # FirstN: the 3 largest, over partitions
    (t.new_drpc_stream("top3").each(["args"], TuplifyArgs(), ["device", "count"]).project(["device", "count"])
     .shuffle().parallelism_hint(2).apply_assembly(FirstN(3, "count", reverse=True)))
    return t.build()


def test_per_batch_operations_on_drpc_streams(redis_url):
    topology = _per_batch_topology()
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit(_unique("trident-batch"), topology, {"redis.url": redis_url})
        drpc = DRPCClient(redis_url)

        def q(function, args):
            return _rows(drpc.execute(function, args, timeout=30))

        # T4
        for _ in range(100):  # batch-global routing: every request counted once, on one task
            assert q("numwords", "the") == [[1]]
        assert q("numwords", "") == [[0]]
        assert q("numwords", "1 2 3 4 5 6 7 8") == [[8]]
        # T5
        assert _multiset(q("splitter", "the man")) == _multiset([[7], ["the"], ["man"]])
        assert _multiset(q("splitter", "hello")) == _multiset([[5], ["hello"]])
        assert _multiset(q("echo", "the cow the")) == _multiset(
            [["the cow the", "the", 3], ["the cow the", "cow", 3], ["the cow the", "the", 3]])
        assert q("echo", "") == []
        assert _multiset(q("both-cases", "the cow the")) == _multiset(
            [["the"], ["cow"], ["the"], ["THE"], ["COW"], ["THE"]])
        # T6
        assert _multiset(q("tester", "the")) == _multiset([["the", 1], ["the", 1]])
        assert _multiset(q("tester", "aaaaa")) == _multiset([["aaaaa", 1], ["aaaaa", 1]])
        # T7
        assert q("tester2", "the man") == [[2]]
        assert q("tester2", "aaa") == [[1]]
        # join: the cross product of matching rows, per key
        assert _multiset(q("joined", "the cow the")) == _multiset(
            [["the", 3, "THE"]] * 4 + [["cow", 3, "COW"]])
        assert q("joined", "") == []
        # chained aggregations
        assert q("chained", "the cow jumped") == [[3, 12]]
        assert q("chained", "") == [[0, 0]]
        assert _multiset(q("chained-grouped", "the cow the moon")) == _multiset(
            [["the", 2, 6], ["cow", 1, 3], ["moon", 1, 4]])
        # min_by / max_by
        assert q("devices", json.dumps(DEVICES)) == [[123, 2]]
        assert q("devices-max", json.dumps(DEVICES)) == [[19, 174]]
        assert q("devices", "[]") == []
        # FirstN
        assert q("top3", json.dumps(DEVICES)) == [[19, 174], [742, 71], [113, 54]]
        assert q("top3", json.dumps(DEVICES[:2])) == [[113, 54], [123, 2]]
        status = run.status()
        assert status.state == "running" and not status.errors, status.errors
        run.kill()


# --- FixedBatchSpout: bounded topologies, every persist kind, status --------------------------------------
SENTENCES = [["the cow jumped over the moon"], ["the man went to the store and bought some candy"],
             ["four score and seven years ago"], ["how many apples can you eat"],
             ["to be or not to be the person"]]


def _expected_words():
    return Counter(w for s in SENTENCES * 4 for w in s[0].split())


def test_fixed_batch_spout_topology_persists_every_kind_and_completes(redis_url):
    p = _unique("fixed")
    wc = RedisMapState.opaque(key_prefix=f"{p}-wc")
    reduced = RedisMapState.transactional(key_prefix=f"{p}-reduced")
    total = RedisMapState.opaque(key_prefix=f"{p}-total")
    longest = RedisMapState.transactional(key_prefix=f"{p}-longest")
    lengths = RedisMapState.opaque(key_prefix=f"{p}-lengths")
    local_lengths = RedisMapState.transactional(key_prefix=f"{p}-local-lengths")
    latest = RedisMapState.non_transactional(key_prefix=f"{p}-latest")
    latest_counts = RedisMapState.non_transactional(key_prefix=f"{p}-latest-counts")
    joined = RedisMapState.opaque(key_prefix=f"{p}-joined")
    merged = RedisMapState.opaque(key_prefix=f"{p}-merged")
    number_sum = RedisMapState.transactional(key_prefix=f"{p}-number-sum")

    t = TridentTopology()
    words = (t.new_stream(_unique("tx-fixed"), FixedBatchSpout(["sentence"], 3, SENTENCES * 4))
             .parallelism_hint(2).each(["sentence"], Split(), ["word"]))
    counts = words.group_by(["word"]).persistent_aggregate(wc, Count(), ["count"]).parallelism_hint(2)
    # the updated counts, as they commit: the last one seen per word is the final count
    counts.new_values_stream().partition_persist(latest_counts, ["word", "count"], KeepLatest())
    words.group_by(["word"]).persistent_aggregate(reduced, ["word"], CountReducer(), ["n"]).parallelism_hint(2)
    words.persistent_aggregate(total, Count(), ["total"])
    words.persistent_aggregate(longest, ["word"], LongestReducer(), ["longest"])
    # without a repartition: in the spout's segment (a committer then), one partition per task
    words.partition_persist(local_lengths, ["word"], LengthHistogram(), ["len", "n"])
    hist = words.global_().partition_persist(lengths, ["word"], LengthHistogram(), ["len", "n"])
    hist.new_values_stream().each(["n"], FilterNull()).partition_persist(latest, ["len", "n"], KeepLatest())
    # a join within each batch: per word, (its occurrences in the batch)^2 rows, counted per length
    lens = words.each(["word"], StringLength(), ["len"]).project(["word", "len"]).parallelism_hint(2)
    (t.join(words.project(["word"]), ["word"], lens, ["word"], ["word", "len"])
     .group_by(["len"]).persistent_aggregate(joined, Count(), ["count"]))
    # a merge of a local branch with a repartitioned one
    (t.merge(words.project(["word"]), words.each(["word"], Upper(), ["up"]).project(["up"]).shuffle())
     .group_by(["word"]).persistent_aggregate(merged, Count(), ["count"]).parallelism_hint(2))
    # a second spout: its own batch group; the run ends once both are exhausted
    numbers = t.new_stream(_unique("tx-numbers"), FixedBatchSpout(["n"], 4, [[i] for i in range(1, 51)]))
    numbers.persistent_aggregate(number_sum, ["n"], Sum(), ["sum"])
    topology = t.build()
    bolts = sorted((c for c in topology.components if c.startswith("b-")), key=lambda c: int(c.split("-")[1]))
    assert bolts == ["b-0-split-aggregate-persist", "b-1-persist", "b-2-persist", "b-3-aggregate-persist",
                     "b-4-persist", "b-5-persist-filter_null", "b-6-join-aggregate", "b-7-persist",
                     "b-8-aggregate", "b-9-persist", "b-10-aggregate", "b-11-aggregate-persist"]

    expected = _expected_words()
    by_len = Counter(len(w) for w in expected.elements())
    name = _unique("trident-fixed")
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        run = cluster.submit(name, topology, {"redis.url": redis_url})
        status = run.wait(120)
        assert status.state == "completed", (status.state, status.error, status.errors)
        components = status.components
    for c in bolts:
        assert c in components, (c, sorted(components))
        assert components[c].executed > 0, (c, components[c])

    assert _state_entries(wc, redis_url, 2) == dict(expected)
    assert _state_entries(latest_counts, redis_url, 2) == dict(expected)  # in the persist's tasks
    assert _state_entries(reduced, redis_url, 2) == dict(expected)
    assert _global_value(total, redis_url) == sum(expected.values())
    assert _global_value(longest, redis_url) == "apples"
    assert _global_value(number_sum, redis_url) == 50 * 51 // 2
    assert _state_entries(lengths, redis_url, 1) == dict(by_len)
    per_task = Counter()
    for i in range(2):
        per_task.update(_state_entries(local_lengths, redis_url, 2, only=i))
    assert per_task == by_len
    assert _state_entries(latest, redis_url, 1) == dict(by_len)

    joined_counts = Counter()
    for i in range(0, len(SENTENCES) * 4, 3):  # the spout's batches of 3 sentences
        in_batch = Counter(w for (sentence,) in (SENTENCES * 4)[i:i + 3] for w in sentence.split())
        for w, n in in_batch.items():
            joined_counts[len(w)] += n * n
    assert _state_entries(joined, redis_url, 1) == dict(joined_counts)
    assert _state_entries(merged, redis_url, 2) == {**expected, **{w.upper(): n for w, n in expected.items()}}

    # `topology status` shows the readable names, with what each executed
    out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "status", name, "--redis", redis_url],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "completed" in out.stdout
    table = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.strip()}
    for c in bolts:
        assert c in table, (c, out.stdout)
    out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "status", name, "--redis", redis_url,
                          "--json"], capture_output=True, text=True, timeout=60)
    rec = json.loads(out.stdout)
    assert rec["state"] == "completed"
    for c in bolts:
        assert rec["status"]["components"][c]["executed"] > 0, (c, rec["status"]["components"].get(c))
