"""A Redis Cluster and a Redis Sentinel set as real processes on free loopback ports, and their
session fixtures (imported by conftest.py); every process started here is stopped by the
fixture (and at exit).

* ``RedisClusterSet``: 3 masters, no replicas (``redis-cli --cluster create``); URL
  ``redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``.
* ``RedisSentinelSet``: a master and a replica (both ``appendonly yes``, ``appendfsync
  always``) and one sentinel (quorum 1, down after 2 s, failover timeout 3 s); URL
  ``redis+sentinel://127.0.0.1:SP/mymaster``. ``kill_master()`` SIGKILLs the master,
  ``wait_failover`` waits for the sentinel to promote the replica (about 3 s), ``rejoin``
  starts the killed node again as a replica of the new master.

Down-after is 2 s, not 1: the sentinel pings every second and a fresh link to a just-promoted
master counts as unanswered from its creation, so at 1 s it flapped and failed over a second
time, to whatever replica was there (seen here: the rejoining node, still syncing).
"""

from __future__ import annotations

import atexit
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

from state.connection import connect
from topology_runtime.control.redis_server import find_redis_server_binary, free_port

SERVICE = "mymaster"


def _ping(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=0.3, socket_connect_timeout=0.3).ping())
    except (redis.RedisError, OSError):
        return False


def _wait(cond, timeout: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(step)
    raise TimeoutError(f"{what} not after {timeout}s")


class _Procs:
    """redis-server processes by port; each one's data directory under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.procs: dict[int, subprocess.Popen] = {}
        self.args: dict[int, list[str]] = {}
        atexit.register(self.stop)

    def spawn(self, port: int, *extra: str) -> None:
        d = self.root / str(port)
        d.mkdir(parents=True, exist_ok=True)
        args = [find_redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d),
                "--protected-mode", "no", "--save", "", *extra]
        self.args[port] = args
        self.start(port)

    def start(self, port: int, *extra: str) -> None:
        log = open(self.root / f"{port}.log", "ab")  # noqa: SIM115 - the child keeps it
        self.procs[port] = subprocess.Popen(self.args[port] + list(extra), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        _wait(lambda: self.procs[port].poll() is None and _ping(port), 10, f"redis on port {port}")

    def kill(self, port: int) -> None:
        p = self.procs.pop(port, None)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(5)

    def stop(self) -> None:
        for port in list(self.procs):
            p = self.procs.pop(port)
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)


def _cluster_port(taken: list[int]) -> int:
    """A free port P whose cluster bus port P + 10000 is free too (so P <= 55535)."""
    for _ in range(200):
        p = random.randint(20000, 55535)
        if p in taken or p + 10000 in taken:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 10000))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair for a cluster node")


class RedisClusterSet(_Procs):
    def __init__(self, root: Path, masters: int = 3) -> None:
        super().__init__(root)
        self.ports: list[int] = []
        for _ in range(masters):
            self.ports.append(_cluster_port(self.ports))

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start_all(self) -> RedisClusterSet:
        for p in self.ports:
            self.spawn(p, "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{p}.conf",
                       "--cluster-node-timeout", "2000", "--appendonly", "no")
        subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        _wait(lambda: all(redis.Redis(port=p).cluster("info")["cluster_state"] == "ok" for p in self.ports),
              30, "cluster_state:ok on every node", 0.1)
        client = connect(self.url)
        _wait(lambda: client.set("probe", 1) and client.delete("probe"), 10, "a write through the cluster client")
        client.close()
        return self

    def flush(self) -> None:
        for p in self.ports:
            redis.Redis(port=p).flushall()


class RedisSentinelSet(_Procs):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.master_port, self.replica_port, self.sentinel_port = free_port(), free_port(), free_port()

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{SERVICE}"

    def start_all(self) -> RedisSentinelSet:
        # a replica (re)joins at once: no wait for more replicas before a diskless full sync
        durable = ("--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0")
        self.spawn(self.master_port, *durable)
        self.spawn(self.replica_port, *durable, "--replicaof", "127.0.0.1", str(self.master_port))
        _wait(lambda: redis.Redis(port=self.replica_port).info("replication")["master_link_status"] == "up",
              20, "the replica in sync")
        conf = self.root / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.root}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 2000\n"
            f"sentinel failover-timeout {SERVICE} 3000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        log = open(self.root / "sentinel.log", "ab")  # noqa: SIM115
        self.procs[self.sentinel_port] = subprocess.Popen([find_redis_server_binary(), str(conf), "--sentinel"],
                                                          stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.wait_healthy()
        return self

    def sentinel(self) -> redis.Redis:
        return redis.Redis(port=self.sentinel_port, decode_responses=True, socket_timeout=2)

    def master(self) -> int:
        """The port of the master the sentinel reports now."""
        return int(self.sentinel().sentinel_get_master_addr_by_name(SERVICE)[1])

    def wait_healthy(self, timeout: float = 30) -> None:
        """The sentinel reports a master that has a replica online, and a write through the URL
        is acknowledged by it (WAIT)."""
        def ok() -> bool:
            info = redis.Redis(port=self.master(), socket_timeout=2).info("replication")
            if info.get("role") != "master" or not any(
                    isinstance(v, dict) and v.get("state") == "online" for k, v in info.items() if k.startswith("slave")):
                return False
            client = connect(self.url, socket_timeout=2)
            try:
                return bool(client.set("probe", 1)) and client.wait(1, 1000) >= 1
            finally:
                client.close()
        _wait(ok, timeout, "the sentinel set healthy (master, a replica in sync)", 0.1)

    def kill_master(self) -> int:
        port = self.master()
        self.kill(port)
        return port

    def wait_failover(self, old: int, timeout: float = 30) -> int:
        _wait(lambda: self.master() != old, timeout, "the sentinel's failover", 0.1)
        return self.master()

    def rejoin(self, port: int) -> None:
        """Start a killed node again, as a replica of the current master, never to be promoted
        itself (replica-priority 0: its data are stale until its sync is done)."""
        self.start(port, "--replicaof", "127.0.0.1", str(self.master()), "--replica-priority", "0")
        self.wait_healthy()

    def flush(self) -> None:
        client = connect(self.url)
        client.flushall()
        client.wait(1, 2000)
        client.close()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """A 3-master Redis Cluster for the session (``.url``: ``redis+cluster://...``)."""
    c = RedisClusterSet(tmp_path_factory.mktemp("redis-cluster")).start_all()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory):
    """A Sentinel-monitored master and replica for the session (``.url``: ``redis+sentinel://...``)."""
    s = RedisSentinelSet(tmp_path_factory.mktemp("redis-sentinel")).start_all()
    yield s
    s.stop()


@pytest.fixture
def cluster_url(redis_cluster):
    yield redis_cluster.url
    redis_cluster.flush()


@pytest.fixture
def sentinel_url(redis_sentinel):
    redis_sentinel.wait_healthy()
    yield redis_sentinel.url
    redis_sentinel.flush()
