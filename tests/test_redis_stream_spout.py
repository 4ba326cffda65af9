"""RedisStreamSpout driven directly (no runtime) against a real Redis: reads, batched XACK,
replay on fail, dead letters, redelivery after a crash, claiming from vanished consumers."""

from __future__ import annotations

import json
import time

import pytest
import redis

from topology_runtime import TopologyContext
from topology_runtime.spouts import RedisStreamSpout


class Harness:
    def __init__(self, spout: RedisStreamSpout, url: str, task_index: int = 0) -> None:
        self.spout = spout
        self.emitted: list[tuple] = []
        self.finished = False
        spout.emit = lambda values, msg_id=None, stream="default": self.emitted.append((msg_id, values)) or [9]
        spout.finish = lambda: setattr(self, "finished", True)
        ctx = TopologyContext(task_id=1 + task_index, component_id="sentences", task_index=task_index,
                              component_task_map={"sentences": [1, 2]}, topology_id="t")
        spout.open({"redis.url": url}, ctx)

    def pump(self, times: int = 1) -> list[tuple]:
        start = len(self.emitted)
        for _ in range(times):
            self.spout.next_tuple()
        return self.emitted[start:]


@pytest.fixture
def r(redis_url):
    return redis.Redis.from_url(redis_url, decode_responses=True)


def _fill(r, n, stream="s"):
    return [r.xadd(stream, {"sentence": f"line {i}", "extra": "x"}) for i in range(n)]


def test_reads_in_order_and_acks_with_one_batched_xack(redis_url, r):
    ids = _fill(r, 10)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], batch_size=4), redis_url)
    got = h.pump(3)
    assert [m for m, _ in got] == ids
    assert got[0][1] == ["line 0"]
    assert r.xpending("s", "topology")["pending"] == 10
    calls_before = int(r.info("commandstats").get("cmdstat_xack", {}).get("calls", 0))
    for m, _ in got:
        h.spout.ack(m)
    h.pump(1)  # flushes the buffered acks
    assert r.xpending("s", "topology")["pending"] == 0
    calls = int(r.info("commandstats")["cmdstat_xack"]["calls"]) - calls_before
    assert calls == 1, f"{calls} XACK calls for 10 acks"


def test_fail_replays_same_id_and_values(redis_url, r):
    ids = _fill(r, 2)
    h = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    h.pump()
    h.spout.fail(ids[1])
    again = h.pump()
    assert again == [(ids[1], ["line 1"])]


def test_poison_entry_goes_to_dead_letter_and_is_acked(redis_url, r):
    (poison,) = _fill(r, 1)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], max_fails=2), redis_url)
    h.pump()
    for _ in range(3):
        h.spout.fail(poison)
        h.pump()
    assert h.spout.dead_lettered == 1
    dead = [json.loads(x) for x in r.lrange("s:dead", 0, -1)]
    assert dead == [{"stream": "s", "id": poison, "fields": {"sentence": "line 0"}, "fails": 3}]
    assert r.xpending("s", "topology")["pending"] == 0
    assert [m for m, _ in h.emitted] == [poison] * 3  # first emit + 2 replays, then dead-lettered


def test_restarted_task_rereads_its_own_pending_entries(redis_url, r):
    ids = _fill(r, 5)
    h = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    h.pump()
    h.spout.ack(ids[0])
    h.pump()
    # The worker dies (no close): a new instance with the same task index redelivers the rest.
    h2 = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    assert sorted(m for m, _ in h2.pump()) == sorted(ids[1:])


def test_idle_entries_of_a_vanished_consumer_are_claimed(redis_url, r):
    ids = _fill(r, 3)
    gone = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url, task_index=1)
    gone.pump()  # consumer "sentences-1" takes all 3, then disappears for good
    time.sleep(0.05)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], claim_idle_ms=10), redis_url, task_index=0)
    assert sorted(m for m, _ in h.pump()) == sorted(ids)


def test_bounded_finishes_only_when_everything_is_acked(redis_url, r):
    ids = _fill(r, 2)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], bounded=True), redis_url)
    h.pump(3)
    assert not h.finished
    for m in ids:
        h.spout.ack(m)
    h.pump()
    assert h.finished and r.xpending("s", "topology")["pending"] == 0


def test_malformed_entry_is_dead_lettered_with_the_reason_and_the_run_goes_on(redis_url, r):
    bad = r.xadd("s", {"other": "x"})
    good = r.xadd("s", {"sentence": "fine"})
    h = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    assert h.pump(2) == [(good, ["fine"])]
    dead = json.loads(r.lindex("s:dead", 0))
    assert dead["id"] == bad and "no field 'sentence'" in dead["error"] and dead["raw"] == {"other": "x"}
    h.spout.ack(good)
    h.pump()
    assert r.xpending("s", "topology")["pending"] == 0


def test_missing_url_is_a_clear_error():
    spout = RedisStreamSpout("s")
    with pytest.raises(ValueError, match="no Redis URL"):
        spout.open({}, TopologyContext(1, "src", 0, {"src": [1]}))
