"""`topology dead-letters`: a bounded run on LocalCluster whose bolt fails poison entries until
RedisStreamSpout dead-letters them; the command then finds them from the topology id alone,
lists them with reason and failure count, filters by component, and `--replay` puts each back
into its stream exactly once (run twice, or after a crash between its two steps)."""

from __future__ import annotations

import json

import pytest
import redis

from topology_runtime import Bolt, LocalCluster, StatefulBolt, TopologyBuilder
from topology_runtime.cli.main import main
from topology_runtime.connectors import RedisStreamSpout

TID = "dlt"


class FailPoison(Bolt):
    """Fails every tuple whose value starts with "poison", acks the rest."""

    def execute(self, tup) -> None:
        if tup.values[0].startswith("poison"):
            self.fail(tup)
        else:
            self.ack(tup)


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _cli(capsys, redis_url, *args):
    rc = main(["dead-letters", *args, "--redis", redis_url])
    out, err = capsys.readouterr()
    return int(rc), out, "\n".join(ln for ln in err.splitlines() if not ln.startswith("Redis:"))


@pytest.fixture
def dead(redis_url, r):
    """Run the topology once: events has one poison entry among good ones, orders one too."""
    for i in range(20):
        r.xadd("dl:events", {"value": "poison" if i == 7 else f"e{i}"})
    for i in range(5):
        r.xadd("dl:orders", {"value": "poison-order" if i == 2 else f"o{i}"})
    poison = r.xrange("dl:events")[7][0]
    b = TopologyBuilder()
    b.set_spout("events", RedisStreamSpout("dl:events", url=redis_url, max_fails=2, bounded=True))
    b.set_spout("orders", RedisStreamSpout("dl:orders", url=redis_url, max_fails=1, bounded=True))
    b.set_bolt("check", FailPoison(), 2).shuffle_grouping("events").shuffle_grouping("orders")
    with LocalCluster(workers=1, redis_url=redis_url) as cluster:
        status = cluster.run(TID, b.create_topology(), {"redis.url": redis_url}, timeout=60)
    assert status.components["events"].acked == 19 and status.components["orders"].acked == 4
    assert r.llen("dl:events:dead") == 1 and r.llen("dl:orders:dead") == 1
    return poison


def test_list_filter_replay_once(capsys, redis_url, r, dead):
    rc, out, err = _cli(capsys, redis_url, TID)
    assert rc == 0, err
    assert "events: RedisStreamSpout on stream 'dl:events', dead-letter list 'dl:events:dead': 1 dead letter" in out
    assert f'{dead}  fails 3  failed or timed out 3 times (max_fails 2)  {{"value": "poison"}}' in out
    assert 'fails 2  failed or timed out 2 times (max_fails 1)  {"value": "poison-order"}' in out
    assert _cli(capsys, redis_url, TID)[1] == out  # listing changes nothing

    rc, out, _ = _cli(capsys, redis_url, TID, "--component", "orders")
    assert rc == 0 and "poison-order" in out and '"poison"' not in out and "events:" not in out

    rc, _, err = _cli(capsys, redis_url, TID, "--component", "nope")
    assert rc == 4 and "no spout component 'nope'" in err and "(components with dead letters: events, orders)" in err
    rc, _, err = _cli(capsys, redis_url, "nosuch")
    assert rc == 6 and "no topology 'nosuch' in Redis (known: " in err and TID in err

    before = r.xlen("dl:events")
    rc, out, _ = _cli(capsys, redis_url, TID, "--replay", "--component", "events")
    assert rc == 0 and "events: put 1 dead letter back into stream 'dl:events'" in out
    assert r.xlen("dl:events") == before + 1
    new_id, fields = r.xrange("dl:events")[-1]
    assert fields == {"value": "poison"} and f"{dead} -> {new_id}" in out
    assert r.llen("dl:events:dead") == 0 and r.llen("dl:orders:dead") == 1  # orders untouched

    rc, out, _ = _cli(capsys, redis_url, TID, "--replay", "--component", "events")  # again: nothing more
    assert rc == 0 and "put 0 dead letters back" in out and r.xlen("dl:events") == before + 1


def test_replay_after_a_crash_between_its_steps_adds_nothing(capsys, redis_url, r, dead):
    raw = r.lindex("dl:events:dead", 0)
    assert json.loads(raw)["reason"] == "failed or timed out 3 times (max_fails 2)"
    assert _cli(capsys, redis_url, TID, "--replay")[0] == 0
    n = r.xlen("dl:events")
    r.rpush("dl:events:dead", raw)  # as if the replay died after its XADD, before removing the entry
    rc, out, _ = _cli(capsys, redis_url, TID, "--replay")
    assert rc == 0 and "put 0 dead letters back" in out and "removed 1 put back by an earlier replay" in out
    assert r.xlen("dl:events") == n and r.llen("dl:events:dead") == 0
    # A malformed entry stays listed with its error and is never replayed; non-JSON is shown, not parsed.
    r.rpush("dl:events:dead", json.dumps({"stream": "dl:events", "id": "1-1", "error": "no field 'value'",
                                          "raw": {"x": "y"}, "reason": "no field 'value'"}), b"\x80\x04garbage")
    rc, out, _ = _cli(capsys, redis_url, TID, "--replay", "--component", "events")
    assert rc == 0 and "2 left in 'dl:events:dead'" in out and "left 1-1: no field 'value'" in out
    assert r.xlen("dl:events") == n and r.llen("dl:events:dead") == 2


def test_reset_removes_the_registration_not_the_lists(capsys, redis_url, r, dead):
    assert sorted(r.hkeys(f"topology:{{{TID}:ctl}}:dead-letters")) == ["events", "orders"]
    assert main(["reset", TID, "--redis", redis_url]) == 0
    assert not r.exists(f"topology:{{{TID}:ctl}}:dead-letters") and r.llen("dl:events:dead") == 1
    capsys.readouterr()
    rc, out, _ = _cli(capsys, redis_url, TID)
    assert rc == 0 and "no spout registered a dead-letter list" in out


def test_replay_once_on_a_cluster_with_stream_and_list_on_different_masters(capsys, cluster_url):
    """No transaction spans the stream's and the list's slots: the marker beside the stream keeps
    the replay once-only there too."""
    from state.connection import connect
    from topology_runtime.connectors.dead_letters import register

    client = connect(cluster_url)
    stream = next(s for s in (f"c{i}:in" for i in range(100))
                  if client.get_node_from_key(s).name != client.get_node_from_key(f"{s}:dead").name)
    first = client.xadd(stream, {"value": "poison"}).decode()
    client.rpush(f"{stream}:dead", json.dumps({"stream": stream, "id": first, "fields": {"value": "poison"},
                                               "fails": 6, "reason": "failed or timed out 6 times (max_fails 5)",
                                               "component": "src"}))
    register(client, "dlc", "src", stream, f"{stream}:dead", "RedisStreamSpout")
    rc, out, err = _cli(capsys, cluster_url, "dlc")
    assert rc == 0 and f"{first}  fails 6  failed or timed out 6 times (max_fails 5)" in out, err
    for _ in range(2):
        assert _cli(capsys, cluster_url, "dlc", "--replay")[0] == 0
    assert client.xlen(stream) == 2 and client.llen(f"{stream}:dead") == 0
    client.close()


class CountOrRaise(StatefulBolt):
    """Counts events by value in its state, with a bug: raises on a malformed event (in
    exactly-once mode a failure: a rollback of every task)."""

    def init_state(self, state) -> None:
        self.state = state

    def execute(self, tup) -> None:
        value = tup.values[0]
        if value.startswith("poison"):
            raise ValueError(f"cannot parse {value!r}")
        self.state.put(value, self.state.get(value, 0) + 1)
        self.ack(tup)


@pytest.mark.slow  # ten rollbacks of a live run: a fault run
def test_exactly_once_gives_up_on_a_poison_entry_and_goes_on(capsys, redis_url, r):
    """One malformed event among good ones, read by position in exactly-once mode: each failure
    rolls the topology back and is counted in Redis; past max_fails the entry is dead-lettered and
    skipped, the run completes (three rollbacks, not the restart limit) with every good event
    counted exactly once; `topology dead-letters`
    lists it and `--replay` puts it back once."""
    from state.keyed_state import component_state
    from state.layout import replay_fails
    from topology_runtime.connectors import RedisStreamReplaySpout

    for i in range(300):
        r.xadd("eo:events", {"value": "poison" if i == 150 else f"e{i}"})
    poison = r.xrange("eo:events")[150][0]
    b = TopologyBuilder()
    b.set_spout("events", RedisStreamReplaySpout("eo:events", url=redis_url, max_fails=2, bounded=True,
                                                 batch_size=20), 2)
    b.set_bolt("parse", CountOrRaise(), 2).fields_grouping("events", ["value"])
    conf = {"redis.url": redis_url, "topology.state.provider": "redis", "topology.state.exactly.once": True,
            "topology.state.checkpoint.interval.ms": 200}
    with LocalCluster(workers=2, redis_url=redis_url) as cluster:
        status = cluster.run("eo-poison", b.create_topology(), conf, timeout=120)
    assert status.state == "completed", status.error
    counts = dict(component_state(redis.Redis.from_url(redis_url), "eo-poison", "parse"))
    assert counts == {f"e{i}": 1 for i in range(300) if i != 150}  # every good event counted once
    assert r.hget(replay_fails("eo:events", "eo-poison", "events"), poison) == "3"  # 2 replays, then given up
    dead = [json.loads(x) for x in r.lrange("eo:events:dead", 0, -1)]
    assert [(d["id"], d["fields"], d["fails"]) for d in dead] == [(poison, {"value": "poison"}, 3)]
    rc, out, err = _cli(capsys, redis_url, "eo-poison")
    assert rc == 0, err
    assert "events: RedisStreamReplaySpout on stream 'eo:events'" in out and f"{poison}  fails 3" in out
    for _ in range(2):
        assert _cli(capsys, redis_url, "eo-poison", "--replay")[0] == 0
    assert r.xlen("eo:events") == 301 and r.llen("eo:events:dead") == 0


def test_a_bare_string_where_a_stream_goes_is_refused():
    from topology_runtime.connectors import RedisStreamReplaySpout

    with pytest.raises(ValueError, match="one stream key"):
        RedisStreamReplaySpout(["a", "b"])
    with pytest.raises(ValueError, match="max_fails must be None or an integer >= 0"):
        RedisStreamReplaySpout("s", max_fails=-1)
