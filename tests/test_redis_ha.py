"""Redis Sentinel and Redis Cluster (docs/redis.md), on real processes (tests/redis_clusters.py):
every multi-key transaction and script in one hash slot on a 3-master Cluster (state, control
plane, recovery, CLI, the Airflow trigger and app), commits acknowledged by a replica (WAIT)
under Sentinel, exact counts on both, and exact counts across a Sentinel failover."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time

import pytest
import redis
from spark_topologies import exactly_once_wordcount

from examples.redis_streams_count import fill, streams_word_count
from examples.stateful_wordcount import counts_in_state
from examples.transactional_count import word_count
from examples.wordcount import load_sentences, true_counts
from state import RedisKeyValueState, recover, reset
from state.checkpoint import COMMITTED, COMMITTING, PREPARING, CheckPointState, load_checkpoint, save_checkpoint
from state.connection import connect, connect_async
from state.layout import REGISTRY, ctl_key, state_key
from state.namespaces import register_namespaces
from state.replication import NotReplicated, Replication, atomic
from state.transactional import TransactionalState, current_key
from state.values import ValueMap
from topology_runtime import LocalCluster
from topology_runtime.api.status import RunStatus
from topology_runtime.cli.main import main as cli
from topology_runtime.control.control_plane import ControlPlane, LeaseLost, RunAlreadyLive
from topology_runtime.testing import wait_for

EO_CONF = {"topology.state.provider": "redis", "topology.state.exactly.once": True,
           "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 3,
           "topology.max.spout.pending": 100}
ONE_REPLICA = {"topology.state.redis.min.replicas": 1}


def _nodes(client, keys) -> set[str]:
    return {client.get_node_from_key(k).name for k in keys}


def _waits(port: int) -> int:
    """WAIT commands the Redis on ``port`` has run."""
    return int(redis.Redis(port=port).info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


# --- Cluster: one hash slot per transaction ------------------------------------------------------
def test_state_records_on_a_cluster(cluster_url):
    client = connect(cluster_url)
    keys = [state_key("kv", "count", t, "state") for t in range(6)]
    assert len(_nodes(client, keys)) >= 2  # a topology's task state spreads over the masters
    register_namespaces(client, "kv", "count", 6)
    for t in range(6):
        st = RedisKeyValueState(client, "kv", "count", t)
        st.put("w", t)
        st.prepare_commit(1)
        st.commit(1)
        st.put("w", 100)
        st.prepare_commit(2)
        st.rollback()
    assert [dict(RedisKeyValueState(client, "kv", "count", t)) for t in range(6)] == [{"w": t} for t in range(6)]
    for k in keys:  # atomic() goes to the master of the key's slot (no MOVED)
        assert atomic(client, k, [("HSET", k, "x", 1), ("HDEL", k, "x")], Replication(0)) == [1, 1]

    tx = TransactionalState(connect(cluster_url, decode_responses=True), "ctx")
    tx.record_batch(1, {0: ["a", 1], 1: ["b", 2]})
    assert tx.read_batch(1, [0, 1]) == (None, [(True, ["a", 1]), (True, ["b", 2])])
    tx.commit(1, 2)
    assert tx.current_txid() == 2 and tx.last_metas() == {0: ["a", 1], 1: ["b", 2]}
    tx.record_opaque_batch(2, {0: [7, "m", None]})
    assert tx.commit_opaque(2, lambda entries, committed: {p: [2, e[0], e[1]] for p, e in entries.items()})
    assert tx.current_txid() == 3 and tx.opaque_metas([])[0] == {0: [2, 7, "m"]}
    assert tx.commit_opaque(2, lambda *a: pytest.fail("decided again"))  # committed already: no replay loop

    # an opaque map WATCHes its key and its writers record together: one slot
    m = ValueMap(client, "wc", opaque=True)
    m.multi_update(1, {"a": lambda v: (v or 0) + 2, "b": lambda v: (v or 0) + 1}, writer="w0")
    m.multi_update(1, {"a": lambda v: (v or 0) + 3}, writer="w0")  # replay without "b": b reset
    assert {k: v.curr for k, v in m.get(["a", "b"]).items()} == {"a": 3, "b": None}
    assert ValueMap(client, "sums").multi_add(1, {"x": 2, "y": 3}) == 2


def test_control_plane_and_cli_on_a_cluster(cluster_url, capsys):
    client = connect(cluster_url)
    assert client.keyslot(REGISTRY) != client.keyslot(ctl_key("cpx", "run"))  # one MULTI could not hold both
    cp = ControlPlane(cluster_url)
    token = cp.register("cpx", "local", 2)
    with pytest.raises(RunAlreadyLive):
        cp.register("cpx", "local", 2)
    client.delete(ctl_key("cpx", "lease"))  # its renewals lost in a failover: expired, nobody took it
    cp.renew("cpx", token)  # taken again
    assert cp.is_live("cpx")
    client.set(ctl_key("cpx", "lease"), token + 1)
    with pytest.raises(LeaseLost):
        cp.renew("cpx", token)  # another run holds it
    client.set(ctl_key("cpx", "lease"), token)
    cp.publish("cpx", token, RunStatus(name="cpx", state="running"), {0: {"pid": 1}})
    rec = cp.get("cpx")
    assert rec.live and rec.state == "running" and [r.name for r in cp.list()] == ["cpx"]
    assert cli(["status", "cpx", "--redis", cluster_url]) == 0 and cli(["list", "--redis", cluster_url]) == 0

    def the_run():  # stops when asked, as a live run does
        assert wait_for(lambda: cp.kill_request("cpx") == "kill", 10)
        cp.finish("cpx", token, RunStatus(name="cpx", state="killed"))

    stopper = threading.Thread(target=the_run)
    stopper.start()
    assert cli(["kill", "cpx", "--redis", cluster_url]) == 0
    stopper.join()
    assert not cp.is_live("cpx") and cp.get("cpx").state == "killed"
    out = capsys.readouterr().out
    assert "cpx: running (local, 2 workers" in out and out.rstrip().endswith("cpx: killed")
    client.delete(ctl_key("cpx", "run"), ctl_key("cpx", "status"))  # as if they expired
    assert cp.list() == [] and client.zcard(REGISTRY) == 0  # list() drops the name


def test_recovery_on_a_cluster(cluster_url, capsys):
    client = connect(cluster_url)
    tasks = list(range(1, 7))  # the values; indexes t - 1
    register_namespaces(client, "rc", "count", len(tasks))
    for t in tasks:
        st = RedisKeyValueState(client, "rc", "count", t - 1)
        st.put("n", t)
        st.prepare_commit(1)
        st.commit(1)
        st.put("n", 10 * t)
        st.prepare_commit(2)
    RedisKeyValueState(client, "rc", "count", 0).commit(2)  # one task committed 2 before the crash
    save_checkpoint(client, "rc", CheckPointState(2, COMMITTING))
    report = recover("rc", cluster_url)
    assert report.decision == "commit" and report.checkpoint_after == "COMMITTED(2)"
    assert [dict(RedisKeyValueState(client, "rc", "count", t - 1)) for t in tasks] == [{"n": 10 * t} for t in tasks]
    for t in tasks:  # a new PREPARING checkpoint, then a crash: rolled back everywhere
        st = RedisKeyValueState(client, "rc", "count", t - 1)
        st.put("n", -1)
        st.prepare_commit(3)
    save_checkpoint(client, "rc", CheckPointState(3, PREPARING))
    assert cli(["recover", "rc", "--redis", cluster_url]) == 0
    assert "checkpoint after: COMMITTED(2)" in capsys.readouterr().out
    assert load_checkpoint(client, "rc") == CheckPointState(2, COMMITTED)
    assert [dict(RedisKeyValueState(client, "rc", "count", t - 1)) for t in tasks] == [{"n": 10 * t} for t in tasks]
    assert reset("rc", cluster_url) == 2 * len(tasks) + 2  # state and txid of each task, on every master
    assert list(client.scan_iter(match="topology:{rc:*")) == []


def test_airflow_trigger_and_app_on_cluster_and_sentinel(cluster_url, sentinel_url):
    from topology_airflow.app import list_topologies, topology_detail
    from topology_airflow.triggers import TopologyTrigger

    async def first(trigger):
        async for event in trigger.run():
            return event

    for url in (cluster_url, sentinel_url):
        cp = ControlPlane(url)
        token = cp.register("af", "spark", 1, log="/nonexistent/driver.log")
        cp.finish("af", token, RunStatus(name="af", state="completed"))
        trigger = TopologyTrigger("af", url, "/nonexistent/driver.log", poll_interval=0.1)
        event = asyncio.run(asyncio.wait_for(first(trigger), 30))
        assert event.payload["state"] == "completed"
        assert [t["name"] for t in list_topologies(cp)] == ["af"] and topology_detail(cp, "af") is not None

    async def poll(url):  # the trigger's client: every URL form
        client = connect_async(url, decode_responses=True, socket_timeout=10)
        try:
            pipe = client.pipeline(transaction=False)
            pipe.hgetall(ctl_key("af", "run"))
            pipe.exists(ctl_key("af", "lease"))
            return await pipe.execute()
        finally:
            await client.aclose()

    assert [asyncio.run(poll(u))[1] for u in (cluster_url, sentinel_url)] == [0, 0]


# --- Sentinel: a commit counts once a replica has it -----------------------------------------------
def test_commits_wait_for_a_replica(redis_sentinel, sentinel_url):
    client = connect(sentinel_url)
    master, replica = redis_sentinel.master(), redis.Redis(port=redis_sentinel.replica_port)
    before = _waits(master)
    st = RedisKeyValueState(client, "w", "count", 0, Replication(1))
    st.put("a", 1)
    st.prepare_commit(1)
    st.commit(1)
    save_checkpoint(client, "w", CheckPointState(1, COMMITTED), Replication(1))
    tx = TransactionalState(connect(sentinel_url, decode_responses=True), "wtx", Replication(1))
    tx.record_batch(1, {0: ["a"]})
    tx.commit(1, 2)
    tx.record_opaque_batch(2, {0: [5, "m", None]})
    assert tx.commit_opaque(2, lambda entries, committed: {p: [2, e[0], e[1]] for p, e in entries.items()})
    assert tx.commit_opaque(2, lambda *a: pytest.fail("decided again"))
    assert _waits(master) - before >= 7
    # acknowledged means on the replica
    assert replica.hget(state_key("w", "count", 0, "txid"), "commit") == b"1" and replica.get(current_key("wtx")) == b"3"
    with pytest.raises(redis.ResponseError, match="boom"):  # an error inside EXEC is raised ...
        atomic(client, "k", [("SET", "k", 1), ("EVAL", "return redis.error_reply('boom')", 0)], Replication(1))
    assert atomic(client, "k", [("INCR", "k")], Replication(1)) == [2]  # ... and the connection stays usable
    with pytest.raises(NotReplicated, match="1 of 2 replica"):
        save_checkpoint(client, "w", CheckPointState(2, PREPARING), Replication(2, 100))
    proc = redis_sentinel.procs[redis_sentinel.replica_port]
    os.kill(proc.pid, signal.SIGSTOP)  # the replica stops acknowledging
    try:
        short = Replication(1, 300)
        st = RedisKeyValueState(client, "w", "count", 0, short)
        st.put("a", 2)
        t0 = time.monotonic()
        with pytest.raises(NotReplicated):
            st.prepare_commit(2)
        with pytest.raises(NotReplicated):
            TransactionalState(tx.client, "wtx", short).commit(3, 4)
        assert time.monotonic() - t0 < 2  # each bounded by the WAIT timeout
    finally:
        os.kill(proc.pid, signal.SIGCONT)


# --- end to end: exact counts -----------------------------------------------------------------------
def _eo_run(url, name, n, conf=None, during=None):
    truth = true_counts(load_sentences(connect(url, decode_responses=True), n))
    with LocalCluster(workers=2, redis_url=url) as cluster:
        run = cluster.submit(name, exactly_once_wordcount(), {"redis.url": url, **EO_CONF, **(conf or {})})
        if during is not None:
            during(run)
        status = run.wait(240)
    assert status.state == "completed", status.error
    assert counts_in_state(url, name, "count") == truth
    return status


@pytest.mark.slow
@pytest.mark.parametrize("where", ["cluster", "sentinel"])
def test_exactly_once_count_is_exact(where, request):
    url = request.getfixturevalue(f"{where}_url")
    sentinel = request.getfixturevalue("redis_sentinel") if where == "sentinel" else None
    before = _waits(sentinel.master()) if sentinel else 0
    _eo_run(url, f"eo-{where}", 1000, ONE_REPLICA if sentinel else None)
    if sentinel:
        assert _waits(sentinel.master()) - before > 10  # every checkpoint step waited for the replica


@pytest.mark.slow
def test_a_keyed_count_rescales_live_on_a_cluster(cluster_url):
    """Key groups on a Redis Cluster: each group is its own hash slot (the groups spread over the
    masters); the keyed count goes 2 -> 3 tasks live, its groups change hands, counts exact."""
    def rescale(run):
        assert wait_for(lambda: run.status().components["split"].executed > 100, 60), run.status()
        run.rebalance(parallelism={"count": 3})
        assert wait_for(lambda: run.status().parallelism["count"] == 3 and run.status().state == "running", 60)

    status = _eo_run(cluster_url, "rs-cluster", 1500, during=rescale)
    assert status.parallelism["count"] == 3
    client = connect(cluster_url)
    groups = [k for k in client.scan_iter(match="topology:{rs-cluster:count#*}:state", count=1000)]
    assert len(groups) >= 10 and len({client.cluster_keyslot(k) for k in groups}) == len(groups)
    assert len({client.get_node_from_key(k).name for k in groups}) > 1  # spread over the masters


def _tx_truth(data):
    truth: dict[str, int] = {}
    for rows in data.values():
        for (w,) in rows:
            truth[w] = truth.get(w, 0) + 1
    return truth


@pytest.mark.slow
@pytest.mark.parametrize("where", ["cluster", "sentinel"])
def test_transactional_counts_are_exact(where, request):
    url = request.getfixturevalue(f"{where}_url")
    conf = {"redis.url": url, "topology.max.spout.pending": 3, **(ONE_REPLICA if where == "sentinel" else {})}
    rng = random.Random(5)
    data = {p: [[rng.choice(["apple", "cat", "dog", "fig"])] for _ in range(300)] for p in range(3)}
    client = connect(url)
    streams = [f"words:{p}" for p in range(3)]  # three slots: read one stream per command
    stream_truth = fill(client, streams, 200)
    with LocalCluster(workers=2, redis_url=url) as cluster:
        status = cluster.run("txwc", word_count(data, take=20, name="txwc"), conf, timeout=120)
        assert status.state == "completed", status.error
        status = cluster.run("stwc", streams_word_count(streams, opaque=True, name="stwc"),
                             {**conf, "count.key": "stream-counts"}, timeout=120)
        assert status.state == "completed", status.error
    got = ValueMap(client, "word-counts").get(sorted(_tx_truth(data)))
    assert {w: v.value for w, v in got.items()} == _tx_truth(data)
    got = ValueMap(client, "stream-counts", opaque=True).get(sorted(stream_truth))
    assert {w: v.curr for w, v in got.items()} == stream_truth


@pytest.mark.slow
def test_sentinel_failover_mid_run_keeps_exactly_once_counts_exact(tmp_path):
    """SIGKILL of the master while the exactly-once count runs with min.replicas=1: the sentinel
    promotes the replica, the run rolls back to its last checkpoint (which the replica has, by
    WAIT), and ends with exact counts once the old master is back as a replica. Before the kill
    the replica is stopped and its link cut for 1.5 s, so the master dies holding writes no
    replica has: the checkpoint of that time failed its WAIT, and the runtime never acted on it."""
    from redis_clusters import RedisSentinelSet

    sentinels = RedisSentinelSet(tmp_path).start_all()
    try:
        first = sentinels.master()

        def failover(run):
            assert wait_for(lambda: run.status().components["split"].executed > 1000, 60)
            replica = sentinels.procs[sentinels.replica_port]
            master = redis.Redis(port=sentinels.master())
            os.kill(replica.pid, signal.SIGSTOP)  # it cannot reconnect ...
            assert master.client_kill_filter(_type="replica") == 1  # ... once cut
            cut = master.info("replication")["master_repl_offset"]
            time.sleep(1.5)
            assert master.info("replication")["master_repl_offset"] > cut  # writes only the master has
            old = sentinels.kill_master()
            os.kill(replica.pid, signal.SIGCONT)
            sentinels.wait_failover(old)
            sentinels.rejoin(old)

        status = _eo_run(sentinels.url, "eo-failover", 3000, ONE_REPLICA, during=failover)
        assert sentinels.master() != first and status.restarts >= 1
    finally:
        sentinels.stop()
