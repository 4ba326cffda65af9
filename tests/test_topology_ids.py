"""Topology ids are key prefixes and SCAN patterns: only [A-Za-z0-9][A-Za-z0-9_.-]{0,127} gets in,
and `reset` deletes exactly one topology's keys, whatever other ids share its prefix."""

from __future__ import annotations

import pytest
import redis

from state import reset
from state.layout import InvalidTopologyId, check_topology_id, ctl_key, owner_of, state_key
from topology_runtime import LocalCluster, Spout, TopologyBuilder
from topology_runtime.control.control_plane import ControlPlane

BAD = ["", "acct:1", "bk\\", "a*", "x{y}", "-lead", ".hidden", "a b", "é", "a" * 129, "a/b", "a?b", "[ab]", None, 7]


@pytest.mark.parametrize("good", ["a", "acct", "acct.1", "acct-1", "acct_1", "A9", "9a", "a" * 128])
def test_valid_ids_pass(good):
    assert check_topology_id(good) == good


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_invalid_ids_are_refused_naming_the_id(bad):
    with pytest.raises(InvalidTopologyId, match="invalid topology id"):
        check_topology_id(bad)
    with pytest.raises(InvalidTopologyId):
        ctl_key(bad, "run")


def test_owner_of_reads_exactly_the_layout():
    assert owner_of(state_key("acct", "count", 3, "state")) == ("acct", "count/3")
    assert owner_of(state_key("acct", "a/b:c}", 0, "state")) == ("acct", "a%2Fb:c%7D/0")
    assert owner_of("topology:{acct:3}:state") == ("acct", "3")  # the earlier layout: reset still finds it
    assert owner_of(ctl_key("acct.1", "lease")) == ("acct.1", "ctl")
    assert owner_of("topology:{acct:1:ctl}:lease") is None  # a legacy id with ':': not acct's
    assert owner_of("other:{acct:1}:state") is None


def test_reset_deletes_exactly_that_topologys_keys(redis_url):
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    ids = ["acct", "acct.1", "acct-1", "acct_x", "acctx", "bk"]
    for tid in ids:
        r.hset(state_key(tid, "count", 0, "state"), "k", "v")
        r.hset(ctl_key(tid, "checkpoint"), mapping={"txid": 1, "state": "COMMITTED"})
    r.set(ctl_key("bk", "lease"), 1)  # bk is live
    r.set("topology:{acct:1:ctl}:lease", 1)  # a live run named 'acct:1' from before ids were checked
    r.hset("topology:{acct:1:2}:state", "k", "v")
    r.hset("topology:{acct:4}:state", "k", "v")  # a task of the earlier, numbered layout
    before = set(r.keys("*"))
    assert reset("acct", redis_url) == 3
    gone = before - set(r.keys("*"))
    assert gone == {state_key("acct", "count", 0, "state"), "topology:{acct:4}:state", ctl_key("acct", "checkpoint")}
    with pytest.raises(InvalidTopologyId):
        reset("bk\\", redis_url)
    assert r.exists(ctl_key("bk", "lease"))


class Idle(Spout):
    outputs = ["x"]

    def next_tuple(self):
        self.finish()


def test_bad_ids_are_refused_before_anything_is_written(redis_url):
    r = redis.Redis.from_url(redis_url)
    b = TopologyBuilder()
    b.set_spout("idle", Idle())
    with LocalCluster(workers=1, redis_url=redis_url) as cluster:
        for bad in ("acct:1", "bk\\", "x*"):
            with pytest.raises(InvalidTopologyId):
                cluster.submit(bad, b.create_topology())
    with pytest.raises(InvalidTopologyId):
        ControlPlane(redis_url).register("acct:1", "local", 1)
    assert r.dbsize() == 0
