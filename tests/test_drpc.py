"""Linear DRPC end to end: real worker processes (LocalCluster, 2 workers), requests and replies
through the session Redis. Two topologies run for the whole module (started once: the suite's
time budget): the reach example and ``probe`` (tests/drpc_topologies.py), whose args choose what
its middle stage does."""

from __future__ import annotations

import os
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from drpc_topologies import probe_topology

from examples import reach
from topology_runtime import LocalCluster
from topology_runtime.drpc import DRPCClient, DRPCExecutionException, DRPCTimeoutException
from topology_runtime.testing import wait_for

TIMEOUT_SECS = 3  # topology.message.timeout.secs of both runs


@pytest.fixture(scope="module")
def drpc(redis_server):
    """(url, probe run, client): both topologies running. Not the ``redis_url`` fixture: its
    FLUSHALL after each test would drop the request streams' consumer groups under the runs."""
    if redis_server.proc is None:
        redis_server.start()
    url = redis_server.url
    reach.load_graph(url)
    conf = {"redis.url": url, "topology.message.timeout.secs": TIMEOUT_SECS}
    cluster = LocalCluster(workers=2)
    probe = cluster.submit("drpc-probe", probe_topology(), conf)
    reach_run = cluster.submit("drpc-reach", reach.topology((1, 2, 2, 1)), {**conf, "topology.workers": 1})
    client = DRPCClient(url)
    try:
        assert client.execute("probe", "ok:1", timeout=30) == "1/0"  # both are up
        assert client.execute("reach", "tech.backtype.com/blog/123", timeout=30) == "7"
        yield url, probe, client
    finally:
        client.close()
        probe.kill(timeout=10)
        reach_run.kill(timeout=10)
        cluster.shutdown()
        redis.Redis.from_url(url).flushall()


def _probe_answer(k: int) -> str:
    return f"{k}/{k * (k - 1) // 2}"


def test_concurrent_requests_are_answered_correctly(drpc):
    """60 requests from 8 threads over both functions, with 0-40 tuples fanned out each: every
    one gets its own answer (a reach or COUNT/SUM), none another request's."""
    url, _, client = drpc
    urls = [*reach.TWEETERS, "nobody.example/x"]
    calls = [("probe", f"ok:{i % 41}") for i in range(40)] + [("reach", urls[i % len(urls)]) for i in range(20)]

    def call(c):
        return client.execute(c[0], c[1], timeout=20)

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(call, calls))
    want = [_probe_answer(int(a.split(":")[1])) if f == "probe" else str(reach.expected_reach(a)) for f, a in calls]
    assert got == want


def test_a_middle_stage_that_emits_nothing_still_finishes(drpc):
    """Middle drops every tuple: Sum hears 0 from each Middle task and finishes with 0/0; a request
    whose first stage emits nothing is answered the same way."""
    _, _, client = drpc
    assert client.execute("probe", "empty:6", timeout=10) == "0/0"
    assert client.execute("probe", "ok:0", timeout=10) == "0/0"


def test_a_failed_tuple_fails_the_request_at_once(drpc):
    """A tuple failed in the middle stage: the spout's fail() answers with an error, long before
    the message timeout."""
    _, _, client = drpc
    t0 = time.monotonic()
    with pytest.raises(DRPCExecutionException, match="failed in the topology"):
        client.execute("probe", "fail:3", timeout=10)
    assert time.monotonic() - t0 < TIMEOUT_SECS


@pytest.mark.slow
def test_timeouts(drpc):
    """A request held in the topology: the client gives up at its own timeout (DRPCTimeout); its
    tree then times out in the topology, whose error reply expires unread. A function nobody
    serves times out the same way, and its request is dropped unread once its deadline passed."""
    url, _, client = drpc
    r = redis.Redis.from_url(url)
    t0 = time.monotonic()
    with pytest.raises(DRPCTimeoutException, match="timed out after 1 s"):
        client.execute("probe", f"hold:4:{uuid.uuid4().hex}:*", timeout=1)
    assert 1 <= time.monotonic() - t0 < 3  # its own timeout, not the topology's
    with pytest.raises(DRPCTimeoutException):
        client.execute("nobody-serves-this", "x", timeout=0.2)
    assert wait_for(lambda: r.keys("drpc:{probe}:reply:*"), TIMEOUT_SECS * 2 + 3)  # the late error reply...
    assert all(0 < r.ttl(k) <= 120 for k in r.keys("drpc:{probe}:reply:*"))  # ...expires
    assert client.execute("probe", "ok:5", timeout=10) == _probe_answer(5)  # the function still serves
    # answered and failed requests are deleted (once the tree's ack reached the spout)
    assert wait_for(lambda: r.xlen("drpc:{probe}:requests") == 0, 5)


def test_malformed_and_expired_requests_are_dropped(drpc):
    """Entries written by hand: a bad id, a bad deadline, a missing field, a deadline already
    past. None reaches the stages or gets a reply; all leave the stream; the function serves on."""
    url, _, client = drpc
    r = redis.Redis.from_url(url)
    stream = "drpc:{probe}:requests"
    r.xadd(stream, {"id": "../../x", "args": "ok:1", "deadline": time.time() + 60})
    r.xadd(stream, {"id": "ab" * 8, "args": "ok:1", "deadline": "nan"})
    r.xadd(stream, {"id": "cd" * 8, "args": "ok:1"})
    r.xadd(stream, {"id": "ef" * 8, "args": "ok:1", "deadline": time.time() - 1})
    assert client.execute("probe", "ok:2", timeout=10) == _probe_answer(2)
    assert wait_for(lambda: r.xlen(stream) == 0, 5)
    assert not any(r.exists(f"drpc:{{probe}}:reply:{x * 8}") for x in ("ab", "cd", "ef"))
    assert r.llen("drpc:{probe}:requests:dead") == 1  # the entry without a deadline field


@pytest.mark.slow  # a SIGKILLed worker: a fault run
def test_sigkilled_worker_mid_request(drpc):
    """A request waits on a tuple held by the worker we SIGKILL. If that worker does not host the
    spout, the tree times out and the client gets DRPCExecutionException (Storm's behaviour);
    if it hosts the spout, the restarted spout rereads the request and re-runs it: the client
    gets the answer. Both happen here, and the function serves normally after each."""
    url, run, client = drpc
    r = redis.Redis.from_url(url, decode_responses=True)
    spout_worker = run.plan.task_worker[run.plan.component_tasks["spout"][0]]
    pids = run.pids
    assert len(pids) == 2
    other = next(i for i in pids if i != spout_worker)
    for victim, expect_answer in ((other, False), (spout_worker, True)):
        wait_for(lambda: len(run.pids) == 2, 20)
        pid = run.pids[victim]
        token = uuid.uuid4().hex
        with ThreadPoolExecutor(1) as pool:
            t0 = time.monotonic()
            pending = pool.submit(client.execute, "probe", f"hold:24:{token}:{pid}", 15)
            assert wait_for(lambda t=token, p=pid: r.lrange(f"probe:held:{t}", 0, -1) == [str(p)], 10)
            os.kill(pid, signal.SIGKILL)
            if expect_answer:
                assert pending.result(20) == _probe_answer(24)
            else:
                with pytest.raises(DRPCExecutionException, match="failed in the topology"):
                    pending.result(20)
            assert time.monotonic() - t0 < 15  # answered before the client's own timeout
        assert wait_for(lambda v=victim, p=pid: run.pids.get(v) not in (None, p), 20)
        assert client.execute("probe", "ok:7", timeout=15) == _probe_answer(7)


def test_cli_drpc(drpc, capsys):
    from topology_runtime.cli.main import main

    url, _, _ = drpc
    assert main(["drpc", "reach", "foo.com/blog/1", "--redis", url, "--timeout", "10"]) == 0
    assert capsys.readouterr().out.strip() == str(reach.expected_reach("foo.com/blog/1"))
    assert main(["drpc", "probe", "fail:2", "--redis", url, "--timeout", "10"]) == 10
    assert "failed in the topology" in capsys.readouterr().err
    assert main(["drpc", "nobody-serves-this", "x", "--redis", url, "--timeout", "0.3"]) == 11
    assert main(["drpc", "bad name!", "x", "--redis", url]) == 4
    assert "function: invalid DRPC function name 'bad name!'" in capsys.readouterr().err


def test_drpc_operator_returns_the_result_for_xcom(drpc):
    from airflow.sdk.exceptions import AirflowException
    from topology_airflow import DRPCOperator

    url, _, _ = drpc
    op = DRPCOperator(task_id="reach", function="reach", args="engineering.twitter.com/blog/5", redis_url=url,
                      timeout=10)
    assert op.execute({}) == str(reach.expected_reach("engineering.twitter.com/blog/5"))
    with pytest.raises(AirflowException, match="failed in the topology"):
        DRPCOperator(task_id="f", function="probe", args="fail:1", redis_url=url, timeout=10).execute({})


def test_coordinated_bolts_in_an_ordinary_topology(drpc):
    """CoordinatedBolt outside DRPC: requests from a spout, 3 coordinated stages wired by
    coordinate(builder), no id stream, so every task of the last stage finishes each id and its
    BatchBolt emits its part: per id, one part per last-stage task, summing to the tuples sent."""
    from drpc_topologies import CountBatch, CreateTuples, PassOn, Record

    from topology_runtime import TopologyBuilder
    from topology_runtime.drpc import CoordinatedBolt, coordinate
    from topology_runtime.testing import FixedTupleSpout

    url, _, _ = drpc
    b = TopologyBuilder()
    b.set_spout("requests", FixedTupleSpout([[f"r{i}", str(i)] for i in range(20)], fields=["id", "n"]))
    b.set_bolt("first", CoordinatedBolt(CreateTuples()), 2).fields_grouping("requests", ["id"])
    b.set_bolt("middle", CoordinatedBolt(PassOn()), 3).shuffle_grouping("first")
    b.set_bolt("last", CoordinatedBolt(CountBatch()), 2).fields_grouping("middle", ["id"])
    b.set_bolt("out", Record()).shuffle_grouping("last")
    coordinate(b)
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("coordinated-plain", b.create_topology(),
                             {"redis.url": url, "test.key": "coordinated:out", "topology.message.timeout.secs": 5},
                             timeout=30)
    assert status.state == "completed" and status.components["requests"].acked == 20
    parts: dict[str, list[int]] = {}
    for item in redis.Redis.from_url(url, decode_responses=True).lrange("coordinated:out", 0, -1):
        rid, n = item.split("=")
        parts.setdefault(rid, []).append(int(n))
    assert {rid: (len(p), sum(p)) for rid, p in parts.items()} == {f"r{i}": (2, i) for i in range(20)}


def test_on_redis_cluster(cluster_url):
    """Requests and replies through a 3-master Redis Cluster (a function's keys share one slot):
    the reach answers, and a client timeout longer than the client's BLPOP slices still ends
    as DRPCTimeoutException, not a socket timeout."""
    reach.load_graph(cluster_url)
    with LocalCluster(workers=1) as cluster, DRPCClient(cluster_url) as client:
        run = cluster.submit("drpc-reach-cluster", reach.topology((1, 1, 1, 1)),
                             {"redis.url": cluster_url, "topology.message.timeout.secs": TIMEOUT_SECS})
        try:
            assert client.execute("reach", "foo.com/blog/1", timeout=20) == str(reach.expected_reach("foo.com/blog/1"))
            t0 = time.monotonic()
            with pytest.raises(DRPCTimeoutException):
                client.execute("nobody-serves-this", "x", timeout=1.5)
            assert 1.5 <= time.monotonic() - t0 < 3.5
        finally:
            run.kill(timeout=10)
