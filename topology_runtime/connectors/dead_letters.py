"""Dead letters: what the streams spouts gave up on, found from the topology id alone, listed and
put back into their source stream once.

A spout that dead-letters records at ``open``, in the topology's control slot, where its dead
letters go (``register``): ``topology:{ID:ctl}:dead-letters`` maps its component to JSON
``{"stream", "list", "spout"}``. The list holds one JSON object per entry: ``stream``, ``id``,
``fields`` and ``fails`` for an entry that failed ``max_fails`` times, ``error`` and ``raw`` for
one that could not become a tuple; ``reason`` and ``component`` in both. Nothing is unpickled.

``replay`` puts each failed entry back exactly once, on a Redis Cluster too, although the stream
and the list may live on different nodes: one script in the stream's slot XADDs the fields and
records the entry in a marker zset beside the stream (``dead_letter_replayed``), or does nothing
when the marker is there; the entry is then removed from the list. A crash between the two
leaves the entry listed, and the next replay only removes it. Markers are kept
``REPLAYED_KEEP_MS``: past that, an entry left by such a crash would be put back a second time.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from state.layout import dead_letter_replayed, dead_letter_sources

REPLAYED_KEEP_MS = 7 * 24 * 3600 * 1000
_PAGE = 500

# KEYS: stream, marker zset (one slot). ARGV: marker member, now ms, keep ms, field, value, ...
# Returns the new entry's id, or false when this entry was put back already.
_REPLAY_ONE = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (tonumber(ARGV[2]) - tonumber(ARGV[3])))
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return false end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return id
"""


@dataclass(frozen=True)
class Source:
    """Where one spout component's dead letters go."""

    component: str
    stream: str
    list_key: str
    spout: str = ""


@dataclass
class DeadLetter:
    """One entry of a dead-letter list, as read (``raw``: its exact bytes, to remove it)."""

    raw: bytes
    stream: str | None = None
    id: str | None = None
    fields: dict[str, str] | None = None
    fails: int | None = None
    reason: str = ""
    component: str | None = None

    @property
    def replayable(self) -> bool:
        """A failed entry with its fields; malformed ones would only be dead-lettered again."""
        return (bool(self.stream) and bool(self.id) and bool(self.fields)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in (self.fields or {}).items()))

    def marker(self) -> str:
        """Its identity in the marker zset: the original id and a digest of its fields (a stream
        deleted and recreated reuses ids)."""
        digest = hashlib.sha1(json.dumps(self.fields, sort_keys=True).encode()).hexdigest()[:16]
        return f"{self.id} {digest}"


@dataclass
class ReplayReport:
    source: Source
    replayed: list[tuple[str, str]] = field(default_factory=list)  # (dead id, new id)
    already: list[str] = field(default_factory=list)  # put back before; only removed now
    kept: list[tuple[str, str]] = field(default_factory=list)  # (id, why) left in the list


def failure_reason(fails: int, max_fails: int | None) -> str:
    """What a spout knows when it gives up: its ``fail`` callback does not say whether the tree
    failed or timed out."""
    return f"failed or timed out {fails} times (max_fails {max_fails})"


def register(client: redis.Redis, topology_id: str, component: str, stream: str, list_key: str,
             spout: str) -> None:
    """Record where ``component``'s dead letters go. Every task of the component writes the same
    record, so the write is idempotent; it is a description, not fenced state."""
    client.hset(dead_letter_sources(topology_id), component,
                json.dumps({"stream": stream, "list": list_key, "spout": spout}))


def sources(client: redis.Redis, topology_id: str) -> dict[str, Source]:
    """The registered spout components of ``topology_id``, by component id."""
    out = {}
    for comp, raw in client.hgetall(dead_letter_sources(topology_id)).items():
        name = comp.decode() if isinstance(comp, bytes) else comp
        try:
            rec = json.loads(raw)
            out[name] = Source(name, str(rec["stream"]), str(rec["list"]), str(rec.get("spout", "")))
        except (ValueError, KeyError, TypeError):
            continue  # not written by register(): ignored rather than guessed at
    return dict(sorted(out.items()))


def parse(raw: bytes | str) -> DeadLetter:
    """A list entry as a DeadLetter; an entry that is not a JSON object keeps only its bytes."""
    raw_b = raw.encode() if isinstance(raw, str) else raw
    try:
        d: Any = json.loads(raw_b)
    except ValueError:
        return DeadLetter(raw_b, reason="not a JSON dead letter")
    if not isinstance(d, dict):
        return DeadLetter(raw_b, reason="not a JSON dead letter")
    fails = d.get("fails")
    fields = d.get("fields")
    reason = d.get("reason") or d.get("error") or (
        f"failed or timed out {fails} times" if isinstance(fails, int) else "unknown")
    return DeadLetter(raw_b, stream=d.get("stream"), id=d.get("id"),
                      fields=fields if isinstance(fields, dict) else None,
                      fails=fails if isinstance(fails, int) else None, reason=str(reason),
                      component=d.get("component"))


def _belongs(entry: DeadLetter, source: Source) -> bool:
    """An entry of ``source``: its stream (lists may be shared) and, when recorded, its component;
    an unreadable entry is shown with every source of its list."""
    if entry.stream is None:
        return True
    return entry.stream == source.stream and entry.component in (None, source.component)


def entries(client: redis.Redis, source: Source) -> Iterator[DeadLetter]:
    """The dead letters of ``source``, oldest first (paged: a list can be long)."""
    start = 0
    while True:
        page = client.lrange(source.list_key, start, start + _PAGE - 1)
        for raw in page:
            entry = parse(raw)
            if _belongs(entry, source):
                yield entry
        if len(page) < _PAGE:
            return
        start += _PAGE


def replay(client: redis.Redis, source: Source) -> ReplayReport:
    """Put each replayable dead letter of ``source`` back into its stream once and remove it from
    the list; malformed and unreadable entries stay, with the reason. Safe to run twice, and
    beside a live run (its spout reads what is put back like any new entry)."""
    report = ReplayReport(source)
    script = client.register_script(_REPLAY_ONE)
    marker_key = dead_letter_replayed(source.stream)
    start = 0  # entries before this index are kept: removals shift the rest down
    while True:
        page = client.lrange(source.list_key, start, start + _PAGE - 1)
        kept = 0
        for raw in page:
            entry = parse(raw)
            if not _belongs(entry, source):
                kept += 1
                continue
            if not entry.replayable:
                kept += 1
                report.kept.append((entry.id or "?", entry.reason))
                continue
            assert entry.fields is not None and entry.id is not None
            args: list[Any] = [entry.marker(), int(time.time() * 1000), REPLAYED_KEEP_MS]
            for k, v in entry.fields.items():
                args += [k, v]
            new_id = script(keys=[source.stream, marker_key], args=args)
            client.lrem(source.list_key, 1, entry.raw)
            if new_id is None:
                report.already.append(entry.id)
            else:
                report.replayed.append((entry.id, new_id.decode() if isinstance(new_id, bytes) else str(new_id)))
        if len(page) < _PAGE:
            return report
        start += kept
