"""Storm's TransactionalState: a transactional topology's records in Redis behind named
accessors, so nothing else spells their keys or their stored format.

All records share the Cluster hash tag ``{TX:ctl}`` (``layout.tx_key``; TX is the
transactional id), so a commit's MULTI runs on one node. Metadata values are stored as JSON:

    tx:current           string  the next txid to commit (the last committed is one less)
    tx:meta:TXID         hash    partition -> the batch's metadata (partitioned spouts)
    tx:last-meta         hash    partition -> the newest batch's metadata (partitioned spouts)
    tx:ometa:TXID        hash    partition -> [attempt_id, meta, base] (opaque spouts)
    tx:committed-meta    hash    partition -> [txid, attempt_id, meta] (opaque spouts)
    tx:gmeta             hash    txid -> the batch's metadata (generic spouts: made by the
                                 coordinator; the last committed one stays, as the next's prev)
    tx:spout-state       hash    key -> value: a generic spout's own records (its ``tx_state``)
    tx:failures          hash    txid -> {attempt, component, task, error}: the last failure of an
                                 uncommitted txid, for the coordinator's log and its final error

A method that touches several records pipelines them, so each batch and each commit costs
the round trips it did before the records had accessors (reads and writes are one each; the
start-up scan and the WATCH/MULTI commit are what they must be). With ``replication``
(``topology.state.redis.min.replicas``) the current txid, each batch's metadata and each commit
count only once enough replicas have them (state/replication.py). Never imports the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import redis

from . import fencing
from .connection import connect
from .layout import commit_entry, tx_key
from .replication import NO_WAIT, Replication, Session, atomic

# decide(entries, committed) -> the committed entries to write, or None to refuse the commit
OpaqueDecision = Callable[[dict[int, Any], dict[int, Any]], dict[int, Any] | None]


def current_key(tx_id: str) -> str:
    """The key of the next txid to commit: for a caller reading it in its own pipeline."""
    return tx_key(tx_id, "current")


def parse_txid(raw: Any) -> int | None:
    """A txid as read from Redis (str or bytes), None when absent."""
    return int(raw) if raw else None


def current_txid(client: redis.Redis, tx_id: str) -> int | None:
    """The next txid transactional topology ``tx_id`` commits, None before its first commit
    was recorded (the last committed txid is one less)."""
    return parse_txid(client.get(current_key(tx_id)))


def _txid_of_key(key: str) -> int | None:
    tail = key.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _load(raw: str | bytes | None) -> Any:
    return json.loads(raw) if raw else None


def _loads(entries: dict) -> dict[int, Any]:
    return {int(p): json.loads(v) for p, v in entries.items()}


def _dumps(entries: dict[int, Any]) -> dict[str, str]:
    return {str(p): json.dumps(v) for p, v in entries.items()}


class TransactionalState:
    """The records of transactional id ``tx_id`` on ``client`` (decode_responses=True)."""

    def __init__(self, client: redis.Redis, tx_id: str, replication: Replication = NO_WAIT,
                 token: int | None = None, announce: str | None = None) -> None:
        """``token``: the run's fencing token (state/fencing.py): the records' slot is claimed
        for it now, and every write is refused (Fenced) once a newer run claimed it.
        ``announce``: an asset name; each commit then adds an entry to the commits stream in the
        same script (layout.commit_entry)."""
        self.client = client
        self.tx_id = tx_id
        self.replication = replication
        self.token = token
        self.announce = announce
        # keys used on every batch, formatted once
        self._current = current_key(tx_id)
        self._last = tx_key(tx_id, "last-meta")
        self._committed = tx_key(tx_id, "committed-meta")
        self._gmeta = tx_key(tx_id, "gmeta")
        self._spout_state = tx_key(tx_id, "spout-state")
        self._failures = tx_key(tx_id, "failures")
        fencing.claim(client, self._current, token)

    @classmethod
    def from_url(cls, url: str, tx_id: str, replication: Replication = NO_WAIT,
                 token: int | None = None, announce: str | None = None) -> TransactionalState:
        return cls(connect(url, decode_responses=True), tx_id, replication, token, announce)

    def _announced(self, txid: int) -> list[tuple]:
        return [commit_entry(self.tx_id, "transactional", txid, self.announce)] if self.announce else []

    def _write(self, commands: list[tuple]) -> None:
        """``commands`` (all in the records' slot) as one fenced script, waited for as
        ``replication`` asks."""
        if not commands:
            return
        if self.replication:
            cmd = fencing.fenced(commands, self._current, self.token)
            fencing.guarded(self._current, atomic, self.client, self._current, [cmd], self.replication)
        else:
            fencing.run(self.client, self._current, commands, self.token)

    def meta_key(self, txid: int) -> str:
        return tx_key(self.tx_id, f"meta:{txid}")

    def ometa_key(self, txid: int) -> str:
        return tx_key(self.tx_id, f"ometa:{txid}")

    # --- the current txid --------------------------------------------------------------------
    def current_txid(self) -> int | None:
        return parse_txid(self.client.get(self._current))

    def set_current_txid(self, txid: int) -> None:
        self._write([("SET", self._current, txid)])

    # --- partitioned spouts: per-txid batch metadata -----------------------------------------
    def read_batch(self, txid: int, partitions: list[int]) -> tuple[int | None, list[tuple[bool, Any]]]:
        """One round trip: ``(current txid, [(recorded, meta) per partition, in order])``.
        ``recorded``: ``meta`` is what ``txid`` emitted before (replay exactly that batch); else
        ``meta`` is the partition's newest batch (``last-meta``, None at the start): a new batch
        starts after it."""
        if not partitions:
            return self.current_txid(), []
        ps = [str(p) for p in partitions]
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self._current)
        pipe.hmget(self.meta_key(txid), ps)
        pipe.hmget(self._last, ps)
        cur, metas, lasts = pipe.execute()
        return parse_txid(cur), [(True, json.loads(m)) if m is not None else (False, _load(last))
                                 for m, last in zip(metas, lasts)]

    def record_batch(self, txid: int, metas: dict[int, Any], committed: int | None = None) -> None:
        """One MULTI: the new batches' metadata becomes ``meta:TXID`` and the partitions'
        ``last-meta``; with ``committed`` (the last committed txid) the metadata before it is
        deleted (Storm's cleanupBefore)."""
        flat = [x for kv in _dumps(metas).items() for x in kv]
        commands = [("HSET", self.meta_key(txid), *flat), ("HSET", self._last, *flat)] if metas else []
        if committed and committed > 1:
            commands.append(("DEL", self.meta_key(committed - 1)))
        self._write(commands)

    def last_metas(self) -> dict[int, Any]:
        """Per partition, the newest batch's metadata (partitioned spouts)."""
        return _loads(self.client.hgetall(self._last))

    def commit(self, txid: int, current: int) -> None:
        """One MULTI: ``current`` becomes the current txid and committed ``txid``'s metadata goes
        (a committed batch never replays)."""
        self._write([("SET", self._current, current), ("DEL", self.meta_key(txid)), *self._dropped(txid),
                     *self._announced(txid)])

    def _dropped(self, txid: int) -> list[tuple]:
        """What a commit of ``txid`` ends: its failure record, and the generic metadata before it
        (``txid``'s own stays: the next batch's ``prev_meta``, also after a restart)."""
        return [("HDEL", self._failures, txid), ("HDEL", self._gmeta, txid - 1)]

    # --- generic spouts: the coordinator's per-txid metadata ----------------------------------
    def generic_metas(self) -> dict[int, Any]:
        """txid -> metadata recorded by a generic spout's coordinator (uncommitted ones and the
        last committed one)."""
        return {int(t): json.loads(v) for t, v in self.client.hgetall(self._gmeta).items()}

    def record_generic_meta(self, txid: int, meta: Any, spout_state: dict[str, Any] | None = None) -> None:
        """One fenced write: ``meta`` becomes txid's metadata, with the spout's own records it
        changed while making it (``spout_state``), so both or neither survive a crash."""
        commands: list[tuple] = [("HSET", self._gmeta, txid, json.dumps(meta))]
        if spout_state:
            commands.append(("HSET", self._spout_state, *(x for k, v in spout_state.items()
                                                          for x in (k, json.dumps(v)))))
        self._write(commands)

    def spout_state(self) -> dict[str, Any]:
        raw = cast("dict[str, str]", self.client.hgetall(self._spout_state))  # decode_responses=True
        return {k: json.loads(v) for k, v in raw.items()}

    # --- failures: why a txid does not commit --------------------------------------------------
    def record_failure(self, txid: int, record: dict[str, Any]) -> None:
        self._write([("HSET", self._failures, txid, json.dumps(record))])

    def failure(self, txid: int) -> dict[str, Any] | None:
        return _load(self.client.hget(self._failures, str(txid)))

    # --- opaque spouts: per-attempt metadata, committed with the txid ------------------------
    def read_opaque_batch(self, txid: int, partitions: list[int]) -> tuple[int, list, list]:
        """One MULTI (a snapshot consistent with ``commit_opaque``): ``(current txid, committed,
        previous)``, per partition (in order) its committed entry and the entry of ``txid - 1``
        (None where there is none)."""
        ps = [str(p) for p in partitions]
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self._current)
        pipe.hmget(self._committed, ps)
        pipe.hmget(self.ometa_key(txid - 1), ps)
        cur, committed, prev = pipe.execute()
        current = parse_txid(cur)
        return 1 if current is None else current, [_load(c) for c in committed], [_load(p) for p in prev]

    def record_opaque_batch(self, txid: int, entries: dict[int, Any]) -> None:
        """Per partition, what this attempt of ``txid`` read (``ometa:TXID``)."""
        if entries:
            self._write([("HSET", self.ometa_key(txid), *(x for kv in _dumps(entries).items() for x in kv))])

    def opaque_metas(self, txids: list[int]) -> tuple[dict[int, Any], list[dict[int, Any]]]:
        """One round trip: the committed entries, and the entries of each of ``txids``."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self._committed)
        for t in txids:
            pipe.hgetall(self.ometa_key(t))
        committed, *inflight = pipe.execute()
        return _loads(committed), [_loads(e) for e in inflight]

    def commit_opaque(self, txid: int, decide: OpaqueDecision) -> bool:
        """Atomically: ``decide(entries of txid, committed entries)`` says what becomes committed
        and the current txid moves to ``txid + 1``, in one MULTI watched on the records, so a
        SIGKILL anywhere leaves either both or neither. False (nothing written) when ``decide``
        returns None. True without deciding when ``txid`` is committed already (a commit whose
        reply or WAIT was lost, replayed)."""
        if self.replication:
            return self._commit_opaque_replicated(txid, decide)
        key_o = self.ometa_key(txid)
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key_o, self._committed, self._current)
                    if (parse_txid(pipe.get(self._current)) or 1) > txid:
                        pipe.unwatch()
                        return True
                    new = decide(_loads(pipe.hgetall(key_o)), _loads(pipe.hgetall(self._committed)))
                    if new is None:
                        pipe.unwatch()
                        return False
                    pipe.multi()
                    pipe.execute_command(*fencing.fenced(self._opaque_commands(txid, new), self._current, self.token))
                    fencing.guarded(self._current, pipe.execute)
                    return True
                except redis.WatchError:
                    continue  # a record changed between the reads and the MULTI: decide again

    def _opaque_commands(self, txid: int, new: dict[int, Any]) -> list[tuple]:
        flat = [x for kv in _dumps(new).items() for x in kv]
        return [*([("HSET", self._committed, *flat)] if new else []), ("SET", self._current, txid + 1),
                ("DEL", self.ometa_key(txid)), *self._dropped(txid), *self._announced(txid)]

    def _commit_opaque_replicated(self, txid: int, decide: OpaqueDecision, retries: int = 1) -> bool:
        """``commit_opaque`` on one held connection, WATCH to WAIT (state/replication.py)."""
        key_o = self.ometa_key(txid)
        for attempt in range(retries + 1):
            try:
                with Session(self.client, self._current) as s:
                    while True:
                        s.call("WATCH", key_o, self._committed, self._current)
                        current = parse_txid(s.call("GET", self._current)) or 1
                        if current > txid:  # committed already: make sure the replicas have it
                            s.call("UNWATCH")
                            fencing.guarded(self._current, s.commit, [fencing.fenced(
                                [("SET", self._current, current)], self._current, self.token)], self.replication)
                            return True
                        new = decide(_loads(s.call("HGETALL", key_o)), _loads(s.call("HGETALL", self._committed)))
                        if new is None:
                            s.call("UNWATCH")
                            return False
                        cmd = fencing.fenced(self._opaque_commands(txid, new), self._current, self.token)
                        if fencing.guarded(self._current, s.commit, [cmd], self.replication) is not None:
                            return True
            except redis.ConnectionError:
                if attempt == retries:
                    raise
        raise AssertionError("unreachable")

    # --- leftovers ---------------------------------------------------------------------------
    def scan_metas(self) -> Iterator[tuple[str, int, str]]:
        """Every per-txid record present: ``(kind, txid, key)``, kind ``"meta"`` or ``"ometa"``."""
        for kind in ("meta", "ometa"):
            for k in self.client.scan_iter(match=tx_key(self.tx_id, f"{kind}:*"), count=1000):
                t = _txid_of_key(k)
                if t is not None:
                    yield kind, t, k

    def cleanup(self, current: int) -> list[int]:
        """At start-up, with ``current`` the current txid: deletes the per-txid records a previous
        run left behind (a crash between writing and deleting) from before ``current - 1``, and
        returns the uncommitted txids whose batch an emitter recorded (partitioned spouts)."""
        old, recorded = [], []
        for kind, t, k in self.scan_metas():
            if t < current - 1:
                old.append(k)
            elif t >= current and kind == "meta":
                recorded.append(t)
        self.delete(old)
        pipe = self.client.pipeline(transaction=False)
        pipe.hkeys(self._gmeta)
        pipe.hkeys(self._failures)
        gmeta, failures = pipe.execute()
        stale = [("HDEL", key, *fs) for key, fs in ((self._gmeta, [f for f in gmeta if int(f) < current - 1]),
                                                    (self._failures, [f for f in failures if int(f) < current]))
                 if fs]
        self._write(stale)
        return sorted(recorded)

    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for i in range(0, len(keys), 500):
            self._write([("DEL", *keys[i:i + 500])])
