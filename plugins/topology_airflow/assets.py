"""Airflow assets on committed data: DAGs scheduled on a topology's commits.

A topology run with ``topology.airflow.asset = NAME`` adds one entry to the Redis stream
``topology:{ID:ctl}:commits`` per committed checkpoint (stateful and exactly-once topologies)
and per transactional commit, in the same script as the commit itself (state/layout.py,
``commit_entry``). ``topology_asset`` declares the matching Airflow asset with an
``AssetWatcher`` whose trigger, ``TopologyCommitTrigger``, reads that stream in the triggerer
through a consumer group; every entry becomes an asset event (extra: topology, kind, txid), so a
DAG with ``schedule=[topology_asset(...)]`` runs after each commit:

    committed = topology_asset("wordcount-committed", topology_id="wordcount")

    @dag(schedule=[committed])
    def report(): ...

Delivery is at most once per entry: an entry is acknowledged when read, so a triggerer that dies
between reading it and Airflow storing the event loses that one event (the next commit's event
covers the data: a commit event means "committed up to txid"). Entries written before the watcher
first ran are not replayed (its group starts at the stream's end); the watcher never creates a
key: until the topology's first commit creates the stream it waits, then reads it from the start.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import redis.asyncio as aioredis
from airflow.sdk import Asset, AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from state.connection import connect_async
from state.layout import check_topology_id, ctl_key
from topology_runtime.api.names import name_list

KINDS = ("checkpoint", "transactional")


def _kinds(kinds: Sequence[str], owner: str) -> list[str]:
    out = name_list(kinds, "kinds", owner)
    unknown = sorted(set(out) - set(KINDS))
    if unknown:
        raise ValueError(f"{owner}: kinds must be among {list(KINDS)}, got {unknown}")
    return out


class TopologyCommitTrigger(BaseEventTrigger):
    """Yields one event per commit announced by topology (or transactional id) ``topology_id``:
    ``{"topology", "kind", "txid", "asset"}``; ``kinds`` filters checkpoint/transactional."""

    def __init__(self, topology_id: str, redis_url: str | None = None, group: str | None = None,
                 kinds: Sequence[str] = KINDS, block_ms: int = 5000) -> None:
        super().__init__()
        self.topology_id = check_topology_id(topology_id)
        self.redis_url = redis_url
        self.group = group or f"airflow:{topology_id}"
        self.kinds = _kinds(kinds, "TopologyCommitTrigger")
        self.block_ms = block_ms

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("topology_airflow.assets.TopologyCommitTrigger", {
            "topology_id": self.topology_id, "redis_url": self.redis_url, "group": self.group,
            "kinds": self.kinds, "block_ms": self.block_ms,
        })

    def _url(self) -> str:
        if self.redis_url:
            return self.redis_url
        from topology_runtime.control.redis_server import resolve_redis_url

        return resolve_redis_url(None)[0]  # $TOPOLOGY_REDIS_URL, else the project-local Redis

    async def _ensure_group(self, client: Any, stream: str, start: str) -> bool:
        """The consumer group on ``stream``, if the stream exists (a watcher never creates keys:
        it must not write to a Redis the topology has not used yet). False: no stream yet."""
        if not await client.exists(stream):
            return False
        try:
            await client.xgroup_create(stream, self.group, id=start)
        except aioredis.ResponseError as e:
            if "BUSYGROUP" not in str(e):  # BUSYGROUP: created before (this watcher ran earlier)
                raise
        return True

    async def run(self) -> AsyncIterator[TriggerEvent]:
        stream = ctl_key(self.topology_id, "commits")
        client = connect_async(self._url(), decode_responses=True, socket_timeout=self.block_ms / 1000 + 10)
        # A stream that exists when the watcher starts: from now on (older commits are not
        # replayed). One that appears later (the first commit, or after a reset): all of it.
        start = "$"
        grouped = False
        try:
            while True:
                try:
                    if not grouped:
                        grouped = await self._ensure_group(client, stream, start)
                        if not grouped:
                            start = "0"
                            await asyncio.sleep(self.block_ms / 1000)
                            continue
                    got = await client.xreadgroup(self.group, "triggerer", {stream: ">"}, count=100,
                                                  block=self.block_ms)
                except aioredis.ResponseError as e:
                    if "NOGROUP" not in str(e):
                        raise
                    grouped, start = False, "0"  # the stream was deleted (a reset): wait for the next one
                    continue
                except aioredis.RedisError as e:  # an outage is not the end: keep watching
                    self.log.warning("topology %r commits: Redis unreachable (%s); retrying", self.topology_id, e)
                    await asyncio.sleep(2)
                    continue
                for _, entries in got or []:
                    if entries:
                        await client.xack(stream, self.group, *(i for i, _ in entries))
                    for _, fields in entries:
                        if fields.get("kind") in self.kinds:
                            yield TriggerEvent({"topology": fields.get("topology"), "kind": fields.get("kind"),
                                                "txid": int(fields.get("txid", -1)), "asset": fields.get("asset")})
        finally:
            await client.aclose()


def topology_asset(name: str, topology_id: str, redis_url: str | None = None, kinds: Sequence[str] = KINDS,
                   uri: str | None = None) -> Asset:
    """The Airflow asset updated by each commit of ``topology_id`` (run it with
    ``topology.airflow.asset`` set, e.g. to ``name``); ``redis_url`` defaults to the run's Redis
    as the triggerer finds it ($TOPOLOGY_REDIS_URL or the project-local one)."""
    trigger = TopologyCommitTrigger(topology_id, redis_url, kinds=_kinds(kinds, "topology_asset"))
    return Asset(name=name, uri=uri or f"topology://{topology_id}/{name}",
                 watchers=[AssetWatcher(name=f"{topology_id}-commits", trigger=trigger)])
