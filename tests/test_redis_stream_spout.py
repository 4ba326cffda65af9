"""RedisStreamSpout driven directly (no runtime) against a real Redis: reads, batched XACK,
replay on fail, dead letters, redelivery after a crash, claiming from vanished consumers."""

from __future__ import annotations

import copy
import json
import logging
import pickle
import time

import pytest
import redis

from topology_runtime import TopologyContext
from topology_runtime.connectors import RedisStreamSpout


class Harness:
    """Binds emit/finish the way the runtime does and opens the spout as task ``task_index``."""

    def __init__(self, spout: RedisStreamSpout, url: str | None, task_index: int = 0, parallelism: int = 2,
                 ack_on_emit: bool = False) -> None:
        self.spout = spout
        self.emitted: list[tuple] = []
        self.finished = 0
        self.input_finished = 0

        def emit(values, msg_id=None, stream="default"):
            self.emitted.append((msg_id, values))
            if ack_on_emit:  # the runtime with no ackers calls ack inside emit
                spout.ack(msg_id)
            return [9]

        def finish():
            self.finished += 1

        def finish_input():
            self.input_finished += 1

        spout.emit = emit
        spout.finish = finish
        spout.finish_input = finish_input
        tasks = list(range(1, parallelism + 1))
        ctx = TopologyContext(task_id=tasks[task_index], component_id="sentences", task_index=task_index,
                              component_task_map={"sentences": tasks}, topology_id="t")
        spout.open({"redis.url": url} if url else {}, ctx)

    def pump(self, times: int = 1) -> list[tuple]:
        start = len(self.emitted)
        for _ in range(times):
            self.spout.next_tuple()
        return self.emitted[start:]


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _fill(r, n, stream="s"):
    return [r.xadd(stream, {"sentence": f"line {i}", "extra": f"x{i}"}) for i in range(n)]


def _calls(r, cmd: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{cmd}", {}).get("calls", 0))


def _pending(r, stream="s") -> int:
    return r.xpending(stream, "topology")["pending"]


def test_template_holds_no_connection_and_declares_fields():
    spout = RedisStreamSpout("s")
    assert spout.outputs == ["value"] and spout.dead_letter == "s:dead"
    two = RedisStreamSpout("s", fields=["a", "b"], dead_letter="dl")
    assert two.outputs == ["a", "b"] and two.dead_letter == "dl"
    pickle.loads(pickle.dumps(copy.deepcopy(two)))  # the runtime deep-copies and pickles templates
    with pytest.raises(ValueError, match="fields"):
        RedisStreamSpout("s", fields=[])


def test_reads_in_order_with_fields_mapped(redis_url, r):
    ids = [r.xadd("s", {"a": f"a{i}", "b": f"b{i}", "c": "unused"}) for i in range(5)]
    h = Harness(RedisStreamSpout("s", fields=["b", "a"], batch_size=2), redis_url)
    assert h.pump(3) == [(m, [f"b{i}", f"a{i}"]) for i, m in enumerate(ids)]


def test_acks_are_one_batched_xack_and_reads_one_call_per_next_tuple(redis_url, r):
    ids = _fill(r, 10)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], batch_size=4), redis_url)
    reads_before = _calls(r, "xreadgroup")
    got = h.pump(3)
    assert [m for m, _ in got] == ids and got[0][1] == ["line 0"]
    assert _calls(r, "xreadgroup") - reads_before == 3  # one read per next_tuple, not per entry
    assert _pending(r) == 10
    xack_before = _calls(r, "xack")
    for m, _ in got:
        h.spout.ack(m)
    assert _pending(r) == 10  # buffered, not one call per ack
    h.pump(1)  # flushes the buffered acks
    assert _pending(r) == 0
    assert _calls(r, "xack") - xack_before == 1, "acking 10 tuples must issue one XACK"


def test_close_flushes_buffered_acks(redis_url, r):
    ids = _fill(r, 3)
    h = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    h.pump()
    for m in ids:
        h.spout.ack(m)
    h.spout.close()
    assert _pending(r) == 0


def test_fail_replays_same_id_and_values_before_new_entries(redis_url, r):
    ids = _fill(r, 2)
    h = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    h.pump()
    h.spout.fail(ids[1])
    new = r.xadd("s", {"sentence": "later"})
    assert h.pump() == [(ids[1], ["line 1"]), (new, ["later"])]


def test_poison_entry_goes_to_dead_letter_and_is_acked_and_the_run_goes_on(redis_url, r, caplog):
    (poison,) = _fill(r, 1)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], max_fails=2), redis_url)
    h.pump()
    with caplog.at_level(logging.WARNING, logger="topology_runtime.connectors.redis_stream"):
        for _ in range(3):
            h.spout.fail(poison)
            h.pump()
    assert h.spout.dead_lettered == 1
    dead = [json.loads(x) for x in r.lrange("s:dead", 0, -1)]
    assert dead == [{"stream": "s", "id": poison, "fields": {"sentence": "line 0"}, "fails": 3,
                     "reason": "failed or timed out 3 times (max_fails 2)", "component": "sentences"}]
    # Registered under the topology id, so `topology dead-letters t` finds the list.
    assert json.loads(r.hget("topology:{t:ctl}:dead-letters", "sentences")) == {
        "stream": "s", "list": "s:dead", "spout": "RedisStreamSpout"}
    assert _pending(r) == 0
    assert [m for m, _ in h.emitted] == [poison] * 3  # first emit + 2 replays, then dead-lettered
    assert any("stream s" in m and poison in m and "3 times" in m for m in caplog.messages)
    nxt = r.xadd("s", {"sentence": "next"})
    assert h.pump() == [(nxt, ["next"])]
    h.spout.fail(poison)  # a late callback for a dead-lettered id is ignored
    assert h.pump() == []


def test_restarted_task_rereads_its_own_pending_entries_in_order(redis_url, r):
    ids = _fill(r, 5)
    h = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    h.pump()
    h.spout.ack(ids[0])
    h.pump()
    # The worker dies (no close): a new instance with the same task index redelivers the rest.
    h2 = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    assert h2.spout.redelivered == 4
    assert h2.pump() == [(m, [f"line {i}"]) for i, m in enumerate(ids) if i]
    for m in ids[1:]:
        h2.spout.ack(m)
    h2.pump()
    assert _pending(r) == 0


def test_entry_deleted_while_pending_is_acked_not_replayed(redis_url, r):
    ids = _fill(r, 2)
    Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url).pump()
    r.xdel("s", ids[0])
    h2 = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    assert h2.pump() == [(ids[1], ["line 1"])]
    assert r.llen("s:dead") == 0 and _pending(r) == 1


def test_idle_entries_of_a_vanished_consumer_are_claimed_at_open(redis_url, r):
    ids = _fill(r, 3)
    gone = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url, task_index=1)
    gone.pump()  # consumer "sentences-1" takes all 3, then disappears for good
    time.sleep(0.05)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], claim_idle_ms=10), redis_url, task_index=0)
    assert h.spout.claimed == 3
    assert sorted(m for m, _ in h.pump()) == sorted(ids)
    assert {c["name"]: c["pending"] for c in r.xinfo_consumers("s", "topology")}["sentences-0"] == 3


def test_recently_delivered_entries_of_a_live_consumer_are_not_claimed(redis_url, r):
    _fill(r, 3)
    Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url, task_index=1).pump()
    h = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url, task_index=0)  # 30 s idle
    assert h.spout.claimed == 0 and h.pump() == []


def test_consumer_beyond_the_parallelism_is_claimed_at_once(redis_url, r):
    ids = _fill(r, 3)
    # A previous run had parallelism 4; task 3 held these entries when the run stopped.
    Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url, task_index=3, parallelism=4).pump()
    h = Harness(RedisStreamSpout("s", fields=["sentence"], bounded=True), redis_url, task_index=0)
    assert h.spout.claimed == 3  # not idle long enough for XAUTOCLAIM, but its task is gone
    assert sorted(m for m, _ in h.pump()) == sorted(ids)


def test_consumer_that_vanishes_later_is_claimed_periodically(redis_url, r):
    ids = _fill(r, 3)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], claim_idle_ms=500, claim_interval_ms=0), redis_url)
    gone = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url, task_index=1)
    gone.pump()  # takes all 3 after h opened, then dies
    assert h.pump() == []
    time.sleep(0.6)
    assert sorted(m for m, _ in h.pump()) == sorted(ids)
    assert h.spout.claimed == 3


def test_live_task_keeps_its_slow_entries_fresh_so_they_are_not_claimed(redis_url, r):
    _fill(r, 2)
    slow = Harness(RedisStreamSpout("s", fields=["sentence"], claim_idle_ms=60000, claim_interval_ms=100),
                   redis_url, task_index=1)
    held = slow.pump()  # in flight longer than the claim_idle_ms of "other", but the task is alive
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        slow.pump()
        time.sleep(0.01)
    other = Harness(RedisStreamSpout("s", fields=["sentence"], claim_idle_ms=500), redis_url, task_index=0)
    assert other.spout.claimed == 0 and other.pump() == []
    for m, _ in held:
        slow.spout.ack(m)
    slow.pump()
    assert _pending(r) == 0


def test_bounded_finishes_only_when_everything_is_acked(redis_url, r):
    ids = _fill(r, 2)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], bounded=True), redis_url)
    h.pump(3)
    # Nothing new to read, two pending: input finished (windows may flush), not finished.
    assert not h.finished and h.input_finished
    h.spout.ack(ids[0])
    h.spout.fail(ids[1])
    assert h.pump() == [(ids[1], ["line 1"])] and not h.finished
    h.spout.ack(ids[1])
    h.pump()
    assert h.finished == 1 and _pending(r) == 0


def test_bounded_with_ack_on_emit_finishes_after_flushing(redis_url, r):
    _fill(r, 3)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], bounded=True), redis_url, ack_on_emit=True)
    h.pump()
    assert not h.finished
    h.pump()
    assert h.finished == 1 and _pending(r) == 0


def test_bounded_finishes_after_the_last_dead_letter(redis_url, r):
    (poison,) = _fill(r, 1)
    h = Harness(RedisStreamSpout("s", fields=["sentence"], bounded=True, max_fails=0), redis_url)
    h.pump()
    h.spout.fail(poison)
    h.pump()
    assert h.finished == 1 and _pending(r) == 0 and r.llen("s:dead") == 1


def test_emit_error_does_not_lose_the_entry(redis_url, r):
    (mid,) = _fill(r, 1)
    h = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    good_emit = h.spout.emit

    def broken(values, msg_id=None, stream="default"):
        raise RuntimeError("transport hiccup")

    h.spout.emit = broken
    with pytest.raises(RuntimeError):
        h.pump()
    h.spout.emit = good_emit
    assert h.pump() == [(mid, ["line 0"])]


def test_missing_field_is_a_clear_error_and_the_entry_is_dead_lettered(redis_url, r, caplog):
    bad = r.xadd("s", {"other": "x"})
    good = r.xadd("s", {"sentence": "fine"})
    h = Harness(RedisStreamSpout("s", fields=["sentence"]), redis_url)
    with caplog.at_level(logging.ERROR, logger="topology_runtime.connectors.redis_stream"):
        assert h.pump(2) == [(good, ["fine"])]
    assert any(f"stream 's' entry {bad}: no field 'sentence'" in m for m in caplog.messages)
    dead = json.loads(r.lindex("s:dead", 0))
    assert dead["id"] == bad and "no field 'sentence'" in dead["error"] and dead["raw"] == {"other": "x"}
    assert dead["reason"] == dead["error"] and dead["component"] == "sentences"
    h.spout.ack(good)
    h.pump()
    assert _pending(r) == 0 and h.spout.dead_lettered == 1


def test_missing_url_is_a_clear_error():
    spout = RedisStreamSpout("s")
    with pytest.raises(ValueError, match="needs Redis and no URL is set.*redis.url"):
        spout.open({}, TopologyContext(1, "src", 0, {"src": [1]}))
