"""Commits that outlive a failover: ``topology.state.redis.min.replicas`` (docs/redis.md).

Redis replicates asynchronously: a master can acknowledge a write and die before any replica
has it, and the replica Sentinel promotes then lacks it. With ``Replication(n)`` a commit is
sent as ``MULTI ... EXEC`` followed by ``WAIT n timeout`` in one round trip on one connection
to the master that owns the commit's hash slot, and it counts only when WAIT reports ``n``
replicas: fewer is ``NotReplicated``, a ``redis.RedisError``, so the caller's failure path
runs (a checkpoint is rolled back, a transactional commit is replayed).

WAIT counts the replicas that acknowledged every write made *on its connection*, which is why
the commit and its WAIT share one connection held for the exchange (never a pooled command
that might run elsewhere), and why a connection that breaks is never silently reconnected in
between: redis-py's own retries would re-run WAIT alone on a new connection (perhaps to the
newly promoted master) and report replicas for writes it never made. A retry here resends
the whole commit with its WAIT; every commit sent this way is idempotent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import redis

from .connection import is_cluster

Command = Sequence[Any]


@dataclass(frozen=True)
class Replication:
    """How many replicas must acknowledge a commit (0: do not wait), and how long WAIT may
    block (ms)."""

    replicas: int = 0
    timeout_ms: int = 2000

    def __bool__(self) -> bool:
        return self.replicas > 0


NO_WAIT = Replication()


class NotReplicated(redis.RedisError):
    """A commit reached its master but fewer replicas than required acknowledged it in time: it
    may be lost in a failover, so it does not count."""


def node_client(client: Any, key: str) -> redis.Redis:
    """The plain client of the master that holds ``key`` (the client itself unless a cluster)."""
    if is_cluster(client):
        return client.get_redis_connection(client.get_node_from_key(key))
    return client


class Session:
    """One connection to the master that owns ``key``'s slot, held until the ``with`` block
    ends: commands, WATCH, then ``commit`` (MULTI/EXEC and WAIT) on that very connection. Any
    error disconnects it (its state is unknown); nothing is retried inside."""

    def __init__(self, client: Any, key: str) -> None:
        self.node = node_client(client, key)
        self.pool = self.node.connection_pool
        self.conn = self.pool.get_connection()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.conn.disconnect()
        self.pool.release(self.conn)

    def call(self, *args: Any) -> Any:
        """One command, its reply parsed as ``redis.Redis`` would (HGETALL -> dict, ...)."""
        self.conn.send_command(*args)
        return self.node.parse_response(self.conn, args[0])

    def commit(self, commands: Sequence[Command], replication: Replication) -> list | None:
        """``MULTI commands EXEC`` and, when ``replication`` asks, ``WAIT``, in one round trip.
        Returns EXEC's replies (unparsed), or None when a WATCHed key changed (nothing written).
        Raises the first error reply, or NotReplicated."""
        wait = [("WAIT", replication.replicas, replication.timeout_ms)] if replication else []
        packet = [("MULTI",), *commands, ("EXEC",), *wait]
        self.conn.send_packed_command(self.conn.pack_commands(packet))
        replies: list[Any] = []
        for _ in packet:
            try:
                replies.append(self.conn.read_response())
            except redis.ResponseError as e:  # an error reply: read the rest before raising
                replies.append(e)
        errors = [r for r in replies if isinstance(r, redis.ResponseError)]
        execd = replies[len(commands) + 1]
        if isinstance(execd, list):
            errors += [r for r in execd if isinstance(r, redis.ResponseError)]
        if errors:
            raise errors[0]
        if execd is not None and replication:
            acked = int(replies[-1])
            if acked < replication.replicas:
                raise NotReplicated(f"WAIT: {acked} of {replication.replicas} replica(s) acknowledged the commit "
                                    f"within {replication.timeout_ms} ms; it does not count")
        return execd


def atomic(client: Any, key: str, commands: Sequence[Command], replication: Replication,
           retries: int = 1) -> list:
    """Run ``commands`` (all in ``key``'s hash slot) as one MULTI/EXEC on ``key``'s master, then
    WAIT as ``replication`` asks, on the same connection. A broken connection (a stale pooled
    one, a master that died) is retried ``retries`` times with the whole commit: the commands
    must be idempotent. Returns EXEC's replies."""
    for attempt in range(retries + 1):
        try:
            with Session(client, key) as s:
                return s.commit(commands, replication) or []
        except redis.ConnectionError:
            if attempt == retries:
                raise
    raise AssertionError("unreachable")
