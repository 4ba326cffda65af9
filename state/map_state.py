"""Trident's map-state stack (Storm's ``trident/state/map``), pure Python:

    SnapshottableMap( OpaqueMap | TransactionalMap | NonTransactionalMap ( BackingMap ), global_key )

A store adapter writes only a ``BackingMap`` (``multi_get`` / ``multi_put`` of wrapped values);
the maps above it apply the exactly-once rules:

* ``NonTransactionalMap`` stores the raw value; a replayed batch is applied again (at-least-once).
* ``TransactionalMap`` stores ``TransactionalValue(txid, value)``; a key already carrying the
  batch's txid is skipped (the replay of an identical batch is already in it).
* ``OpaqueMap`` stores ``OpaqueValue(curr_txid, curr, prev)``; a replay recomputes from ``prev``
  (the value as of the previous txid), so a replay with different content is exact too.

Keys are lists: the values of the group fields. A txid of None is a batch without a
transaction (DRPC): opaque reads ``curr`` and writes ``prev = curr``; transactional never skips.

Each ``multi_get`` / ``multi_update`` makes one ``multi_get`` on the backing map and each
``multi_update`` / ``multi_put`` at most one ``multi_put`` (of the keys that changed), so a
backing map over a remote store costs one round trip each.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, cast, runtime_checkable

from .values import OpaqueValue, TransactionalValue

Key = Sequence[Any]
Updater = Callable[[Any], Any]

GLOBAL_KEY: list[Any] = ["$GLOBAL"]


class StateType:
    """How a state treats a replayed batch (Storm's ``StateType``)."""

    NON_TRANSACTIONAL = "non-transactional"
    TRANSACTIONAL = "transactional"
    OPAQUE = "opaque"
    ALL = (NON_TRANSACTIONAL, TRANSACTIONAL, OPAQUE)


@runtime_checkable
class BackingMap(Protocol):
    """The store adapter: wrapped values by key, None for a missing key."""

    def multi_get(self, keys: list[list]) -> list: ...

    def multi_put(self, keys: list[list], values: list) -> None: ...


@runtime_checkable
class MapState(Protocol):
    def begin_commit(self, txid: int | None) -> None: ...

    def commit(self, txid: int | None) -> None: ...

    def multi_get(self, keys: list[list]) -> list: ...

    def multi_update(self, keys: list[list], updaters: Sequence[Updater]) -> list: ...

    def multi_put(self, keys: list[list], values: list) -> None: ...


@runtime_checkable
class StateFactory(Protocol):
    """Shipped to the workers with the topology (so picklable); ``make_state`` runs once per
    task of the state's bolt and is where any connection is made."""

    state_type: str

    def make_state(self, conf: dict[str, Any] | None, partition_index: int, num_partitions: int) -> Any: ...


_SCALARS = frozenset((str, int, float, bytes, bool, type(None)))


def freeze(key: Any) -> Hashable:
    """A hashable form of a key (a list of group values, which may hold lists or dicts)."""
    if isinstance(key, list | tuple):
        if all(type(k) in _SCALARS for k in key):  # the usual key: scalars, once per key per batch
            return tuple(key)
        return tuple(freeze(k) for k in key)
    if isinstance(key, dict):
        return ("$dict", frozenset((freeze(k), freeze(v)) for k, v in key.items()))
    if isinstance(key, set | frozenset):
        return ("$set", frozenset(freeze(k) for k in key))
    return cast(Hashable, key)


def _checked(keys: Sequence[Key], values: Sequence[Any], what: str) -> None:
    if len(keys) != len(values):
        raise ValueError(f"{what}: {len(keys)} keys but {len(values)} values")


class _BatchReads:
    """Storm's CachedBatchReadsMap: what was written during the current commit, so that a
    second update of a key in the same batch builds on the first instead of being skipped
    (transactional) or recomputed from ``prev`` (opaque). Every key is still read from the
    backing map, which keeps it to one read per call."""

    def __init__(self, delegate: BackingMap) -> None:
        self.delegate = delegate
        self._written: dict[Hashable, Any] = {}

    def reset(self) -> None:
        self._written.clear()

    def multi_get(self, keys: list[list]) -> list[tuple[Any, bool]]:
        """(wrapped value, written during this commit) per key."""
        if not keys:
            return []
        stored = self.delegate.multi_get(keys)
        _checked(keys, stored, "backing map multi_get returned")
        if not self._written:  # the commit's first call: nothing to look up
            return [(v, False) for v in stored]
        out = []
        for k, v in zip(keys, stored):
            f = freeze(k)
            out.append((self._written[f], True) if f in self._written else (v, False))
        return out

    def multi_put(self, keys: list[list], values: list) -> None:
        if not keys:
            return
        self.delegate.multi_put(keys, values)
        for k, v in zip(keys, values):
            self._written[freeze(k)] = v


class NonTransactionalMap:
    """Raw values; ``multi_update`` puts ``u(stored)`` every time, replays included."""

    def __init__(self, backing: BackingMap) -> None:
        self.backing = backing

    def begin_commit(self, txid: int | None) -> None:
        pass

    def commit(self, txid: int | None) -> None:
        pass

    def multi_get(self, keys: list[list]) -> list:
        return self.backing.multi_get(keys) if keys else []

    def multi_update(self, keys: list[list], updaters: Sequence[Updater]) -> list:
        _checked(keys, updaters, "multi_update")
        if not keys:
            return []
        new = [u(v) for u, v in zip(updaters, self.backing.multi_get(keys))]
        self.backing.multi_put(keys, new)
        return new

    def multi_put(self, keys: list[list], values: list) -> None:
        _checked(keys, values, "multi_put")
        if keys:
            self.backing.multi_put(keys, list(values))


class TransactionalMap:
    """``TransactionalValue(txid, value)`` per key. Unlike ``TransactionalValue.update`` this is
    Trident's rule exactly: a key is skipped only when its stored txid is the batch's and it was
    not written during this commit, and an older batch is applied rather than refused."""

    def __init__(self, backing: BackingMap) -> None:
        self.backing = backing
        self._reads = _BatchReads(backing)
        self._txid: int | None = None

    def begin_commit(self, txid: int | None) -> None:
        self._txid = txid
        self._reads.reset()

    def commit(self, txid: int | None) -> None:
        self._txid = None
        self._reads.reset()

    def multi_get(self, keys: list[list]) -> list:
        return [None if v is None else v.value for v, _ in self._reads.multi_get(keys)]

    def multi_update(self, keys: list[list], updaters: Sequence[Updater]) -> list:
        _checked(keys, updaters, "multi_update")
        txid = self._txid
        out: list[Any] = []
        changed_keys: list[list] = []
        changed: list[TransactionalValue] = []
        for k, u, (stored, cached) in zip(keys, updaters, self._reads.multi_get(keys)):
            if stored is not None and txid is not None and stored.txid == txid and not cached:
                out.append(stored.value)  # this batch is in it already
                continue
            new = TransactionalValue(cast(int, txid), u(None if stored is None else stored.value))
            out.append(new.value)
            changed_keys.append(k)
            changed.append(new)
        self._reads.multi_put(changed_keys, changed)
        return out

    def multi_put(self, keys: list[list], values: list) -> None:
        _checked(keys, values, "multi_put")
        self._reads.multi_put(keys, [TransactionalValue(cast(int, self._txid), v) for v in values])


def opaque_visible(stored: OpaqueValue, txid: int | None) -> Any:
    """The value batch ``txid`` builds on: ``curr`` for a newer batch, ``prev`` for a replay.
    A value written without a txid counts as older than any batch."""
    if cast("int | None", stored.curr_txid) is None:
        return stored.curr
    return stored.get(txid)


def opaque_next(stored: OpaqueValue | None, txid: int | None, new: Any) -> OpaqueValue:
    """What batch ``txid`` writes when its result is ``new``: ``prev`` stays on a replay and
    becomes the old ``curr`` otherwise."""
    if stored is None:
        return OpaqueValue(cast(int, txid), new, None)
    if txid is None or cast("int | None", stored.curr_txid) is None:
        return OpaqueValue(cast(int, txid), new, stored.curr)
    return stored.update(txid, lambda _: new)


LAST_TXID_KEY: list[Any] = ["$last-txid"]  # an opaque partition's record: the txid it last wrote


class OpaqueMap:
    """``OpaqueValue(curr_txid, curr, prev)`` per key: a replay recomputes from ``prev``; a key
    written earlier in the same commit builds on its ``curr``.

    Beyond Storm's: a replay of a txid whose earlier attempt wrote this partition and then failed
    (a commit-phase crash) may leave out keys that attempt wrote; those keep the abandoned
    attempt's value, and the tuples it counted come again in a later batch. So each partition
    records the txid it last wrote (under ``LAST_TXID_KEY``, in the same backing write as the
    values: one read and one write per call still), and at the commit of a txid it had written
    before, the entries that txid wrote and this attempt did not are set back to their ``prev``.
    That needs a backing map with ``items()``, and the commit of an empty batch partition too
    (``commits_empty_batches``): one read of the record."""

    commits_empty_batches = True

    def __init__(self, backing: BackingMap) -> None:
        self.backing = backing
        self._reads = _BatchReads(backing)
        self._txid: int | None = None
        self._items = getattr(backing, "items", None)
        self._scan = callable(self._items)
        self._replay: bool | None = None  # does this commit rewrite a txid this partition wrote before?
        self._touched: set[Hashable] = set()

    def begin_commit(self, txid: int | None) -> None:
        self._txid = txid
        self._reads.reset()
        self._replay, self._touched = None, set()

    def commit(self, txid: int | None) -> None:
        if self._scan and txid is not None:
            if self._replay is None:  # nothing was written in this commit
                rec = self.backing.multi_get([LAST_TXID_KEY])[0]
                self._replay = rec is not None and rec.curr_txid == txid
            if self._replay:
                self._undo_abandoned(txid)
        self._txid = None
        self._reads.reset()

    def _undo_abandoned(self, txid: int) -> None:
        keys, values = [], []
        for k, v in self._items():  # type: ignore[misc]  # only after a failed commit: rare
            if (isinstance(v, OpaqueValue) and v.curr_txid == txid and freeze(k) not in self._touched
                    and list(k) != LAST_TXID_KEY and v.curr != v.prev):
                keys.append(list(k))
                values.append(OpaqueValue(txid, v.prev, v.prev))
        if keys:
            self.backing.multi_put(keys, values)

    def _base(self, stored: OpaqueValue | None, cached: bool) -> Any:
        if stored is None:
            return None
        return stored.curr if cached else opaque_visible(stored, self._txid)

    def multi_get(self, keys: list[list]) -> list:
        return [self._base(v, cached) for v, cached in self._reads.multi_get(keys)]

    def multi_update(self, keys: list[list], updaters: Sequence[Updater]) -> list:
        _checked(keys, updaters, "multi_update")
        if not keys:
            return []
        track = self._scan and self._txid is not None
        first = track and self._replay is None
        got = self._reads.multi_get(list(keys) + [LAST_TXID_KEY] if first else keys)
        if first:
            rec = got.pop()[0]
            self._replay = rec is not None and rec.curr_txid == self._txid
        out: list[Any] = []
        written: list[OpaqueValue] = []
        for u, (stored, cached) in zip(updaters, got):
            new = u(self._base(stored, cached))
            out.append(new)
            written.append(opaque_next(stored, self._txid, new))
        if track:
            self._touched.update(freeze(k) for k in keys)
        if first:  # the record goes with the values: a crash leaves both or neither
            self._reads.multi_put(list(keys) + [LAST_TXID_KEY], written + [OpaqueValue(cast(int, self._txid), None)])
        else:
            self._reads.multi_put(list(keys), written)
        return out

    def multi_put(self, keys: list[list], values: list) -> None:
        _checked(keys, values, "multi_put")
        # Storm's ReplaceUpdater: a put follows the same prev/curr rule as an update.
        self.multi_update(keys, [_replace(v) for v in values])


def _replace(value: Any) -> Updater:
    return lambda _: value


class SnapshottableMap:
    """A map state plus ``get`` / ``update`` / ``set`` of one fixed key: where a global
    (non-grouped) aggregation keeps its value."""

    def __init__(self, delegate: MapState, global_key: Sequence[Any] | None = None) -> None:
        self.delegate = delegate
        self.global_key: list[Any] = list(GLOBAL_KEY if global_key is None else global_key)

    def begin_commit(self, txid: int | None) -> None:
        self.delegate.begin_commit(txid)

    def commit(self, txid: int | None) -> None:
        self.delegate.commit(txid)

    @property
    def commits_empty_batches(self) -> bool:
        """Whether the state wants ``begin_commit``/``commit`` for a batch partition without rows."""
        return bool(getattr(self.delegate, "commits_empty_batches", False))

    def multi_get(self, keys: list[list]) -> list:
        return self.delegate.multi_get(keys)

    def multi_update(self, keys: list[list], updaters: Sequence[Updater]) -> list:
        return self.delegate.multi_update(keys, updaters)

    def multi_put(self, keys: list[list], values: list) -> None:
        self.delegate.multi_put(keys, values)

    def get(self) -> Any:
        return self.multi_get([self.global_key])[0]

    def update(self, fn: Updater) -> Any:
        return self.multi_update([self.global_key], [fn])[0]

    def set(self, value: Any) -> None:
        self.multi_put([self.global_key], [value])


# Memory backings by (factory id, partition index): they outlive a state object, as Storm's
# static map does, so a state made again in the same process sees what was committed.
_MEMORY: dict[tuple[str, int], dict[Hashable, tuple[list, Any]]] = {}


class MemoryBackingMap:
    """A dict of wrapped values (Storm's MemoryBackingMap / MemoryMapStateBacking)."""

    def __init__(self, db: dict[Hashable, tuple[list, Any]] | None = None) -> None:
        self.db: dict[Hashable, tuple[list, Any]] = {} if db is None else db

    def multi_get(self, keys: list[list]) -> list:
        out = []
        for k in keys:
            hit = self.db.get(freeze(k))
            out.append(None if hit is None else hit[1])
        return out

    def multi_put(self, keys: list[list], values: list) -> None:
        for k, v in zip(keys, values):
            self.db[freeze(k)] = (list(k), v)

    def multi_remove(self, keys: list[list]) -> None:
        for k in keys:
            self.db.pop(freeze(k), None)

    def items(self) -> list[tuple[list, Any]]:
        """(key, wrapped value) of every entry."""
        return list(self.db.values())


class MemoryMap(SnapshottableMap):
    """The state ``MemoryMapState`` makes: an opaque map over a memory backing, with Storm's
    ``multi_remove`` and ``get_tuples``."""

    def __init__(self, backing: MemoryBackingMap, global_key: Sequence[Any] | None = None) -> None:
        super().__init__(OpaqueMap(backing), global_key)
        self.backing = backing
        self._removed: list[list] = []
        self._txid: int | None = None

    def begin_commit(self, txid: int | None) -> None:
        super().begin_commit(txid)
        # Removed keys were written as None; they go only once a different txid begins,
        # because a replay of the removing txid must still see their prev.
        if txid is None or txid != self._txid:
            self.backing.multi_remove(self._removed)
        self._removed = []
        self._txid = txid

    def multi_remove(self, keys: list[list]) -> None:
        self.multi_put(keys, [None] * len(keys))
        self._removed.extend(list(k) for k in keys)

    def get_tuples(self) -> list[list]:
        """``[key values..., current value]`` per entry of this partition."""
        return [[*k, v.curr] for k, v in self.backing.items() if v.curr is not None and list(k) != LAST_TXID_KEY]


class MemoryMapState:
    """Storm's testing ``MemoryMapState.Factory``: opaque map state in this process's memory,
    one map per partition, kept across ``make_state`` calls under this factory's id."""

    state_type = StateType.OPAQUE

    def __init__(self) -> None:
        self.id = uuid.uuid4().hex

    def make_state(self, conf: dict[str, Any] | None, partition_index: int, num_partitions: int) -> MemoryMap:
        db = _MEMORY.setdefault((self.id, partition_index), {})  # setdefault: atomic for threads
        return MemoryMap(MemoryBackingMap(db))

    @staticmethod
    def clear_all() -> None:
        """Forget every memory map of this process."""
        _MEMORY.clear()

    def __repr__(self) -> str:
        return f"MemoryMapState(id={self.id!r})"
