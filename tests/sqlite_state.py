"""A state provider written outside the project, over the standard library's SQLite, for
tests/test_state_providers.py: ``topology.state.provider: "sqlite_state:SQLiteStateProvider"``
with ``topology.state.provider.config: {"path": "/some/file.db"}``. Every worker imports this
module (tests/ is on PYTHONPATH) and opens the same database file.

Storm's contract as RedisKeyValueState keeps it: writes are buffered; ``prepare_commit`` stores
them (and the txid) as prepared in one transaction, ``commit`` merges them into the committed
rows in one transaction, ``rollback`` drops them. A task that starts again sees its committed
rows overlaid with what is prepared, until the checkpoint protocol commits or rolls it back.
Keys and values are JSON."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any

from state import KeyValueState, StateError

SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (ns TEXT, k TEXT, v TEXT, PRIMARY KEY (ns, k));
CREATE TABLE IF NOT EXISTS prepared (ns TEXT, k TEXT, v TEXT, PRIMARY KEY (ns, k));  -- v NULL: deleted
CREATE TABLE IF NOT EXISTS txids (ns TEXT PRIMARY KEY, committed INTEGER, prepared INTEGER);
"""
_DELETED = object()


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)  # transactions spelled out below
    conn.execute("PRAGMA journal_mode=WAL")  # several worker processes write the same file
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(SCHEMA)
    return conn


class SQLiteKeyValueState(KeyValueState):
    def __init__(self, conn: sqlite3.Connection, namespace: str) -> None:
        self.conn = conn
        self.ns = namespace
        row = conn.execute("SELECT committed, prepared FROM txids WHERE ns = ?", (namespace,)).fetchone()
        self.committed_txid, self.prepared_txid = (row if row else (-1, None))
        self._pending: dict = {}
        self._view: dict | None = None

    def _load(self) -> dict:
        if self._view is None:
            rows = self.conn.execute("SELECT k, v FROM kv WHERE ns = ?", (self.ns,)).fetchall()
            view = {json.loads(k): json.loads(v) for k, v in rows}
            for k, v in self.conn.execute("SELECT k, v FROM prepared WHERE ns = ?", (self.ns,)):
                if v is None:
                    view.pop(json.loads(k), None)
                else:
                    view[json.loads(k)] = json.loads(v)
            for k, v in self._pending.items():
                if v is _DELETED:
                    view.pop(k, None)
                else:
                    view[k] = v
            self._view = view
        return self._view

    def get(self, key: Any, default: Any = None) -> Any:
        return self._load().get(key, default)

    def put(self, key: Any, value: Any) -> None:
        json.dumps(key), json.dumps(value)  # a value JSON cannot carry fails here, in the bolt
        self._pending[key] = value
        self._load()[key] = value

    def delete(self, key: Any) -> None:
        self._pending[key] = _DELETED
        self._load().pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._load().items()))

    def _tx(self, statements: list[tuple[str, tuple]]) -> None:
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            for sql, args in statements:
                cur.execute(sql, args)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def _txids(self, committed: int, prepared: int | None) -> tuple[str, tuple]:
        return ("INSERT OR REPLACE INTO txids (ns, committed, prepared) VALUES (?, ?, ?)",
                (self.ns, committed, prepared))

    def prepare_commit(self, txid: int) -> None:
        if txid <= self.committed_txid:
            raise StateError(f"{self.ns}: prepare_commit({txid}) but txid {self.committed_txid} is committed")
        rows = [("INSERT OR REPLACE INTO prepared (ns, k, v) VALUES (?, ?, ?)",
                 (self.ns, json.dumps(k), None if v is _DELETED else json.dumps(v))) for k, v in self._pending.items()]
        self._tx([*rows, self._txids(self.committed_txid, txid)])
        self._pending = {}
        self.prepared_txid = txid

    def commit(self, txid: int) -> None:
        if self.prepared_txid != txid:
            if self.committed_txid == txid:
                return  # committed already (a re-sent COMMIT)
            raise StateError(f"{self.ns}: commit({txid}) but the prepared txid is {self.prepared_txid}")
        self._tx([
            ("DELETE FROM kv WHERE ns = ? AND k IN (SELECT k FROM prepared WHERE ns = ? AND v IS NULL)",
             (self.ns, self.ns)),
            ("INSERT OR REPLACE INTO kv (ns, k, v) SELECT ns, k, v FROM prepared WHERE ns = ? AND v IS NOT NULL",
             (self.ns,)),
            ("DELETE FROM prepared WHERE ns = ?", (self.ns,)),
            self._txids(txid, None),
        ])
        self.committed_txid, self.prepared_txid = txid, None

    def rollback(self) -> None:
        self._tx([("DELETE FROM prepared WHERE ns = ?", (self.ns,)), self._txids(self.committed_txid, None)])
        self._pending = {}
        self._view = None
        self.prepared_txid = None


class SQLiteStateProvider:
    """Deliberately not a subclass of state.providers.StateProvider: any class with
    ``new_state`` is a provider. One connection per worker process."""

    def __init__(self) -> None:
        self.conn: sqlite3.Connection | None = None

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - {"path"})
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; the SQLite provider takes 'path'")
        if not isinstance(config.get("path"), str):
            raise ValueError("'path' (the database file) is required")

    def new_state(self, namespace: str, conf: Mapping[str, Any], context: Any) -> SQLiteKeyValueState:
        if self.conn is None:
            self.conn = connect(conf["topology.state.provider.config"]["path"])
        return SQLiteKeyValueState(self.conn, namespace)


def committed(path: str, topology_id: str) -> dict[str, dict]:
    """Namespace -> its committed key/values, for the tests' checks."""
    out: dict[str, dict] = {}
    with sqlite3.connect(path) as conn:
        for ns, k, v in conn.execute("SELECT ns, k, v FROM kv WHERE ns LIKE ?", (f"{topology_id}:%",)):
            out.setdefault(ns, {})[json.loads(k)] = json.loads(v)
    return out


def prepared_rows(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM prepared").fetchone()[0]
