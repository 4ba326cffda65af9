"""KeyValueState: Storm's State contract (prepare_commit / commit / rollback) over key-value data."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from .serializer import dumps


class StateError(RuntimeError):
    """A protocol misuse (commit without prepare, txid going backwards...)."""


class KeyValueState(ABC):
    @abstractmethod
    def get(self, key: Any, default: Any = None) -> Any: ...

    @abstractmethod
    def put(self, key: Any, value: Any) -> None: ...

    @abstractmethod
    def delete(self, key: Any) -> None: ...

    @abstractmethod
    def __iter__(self) -> Iterator[tuple[Any, Any]]: ...

    @abstractmethod
    def prepare_commit(self, txid: int) -> None: ...

    @abstractmethod
    def commit(self, txid: int) -> None: ...

    @abstractmethod
    def rollback(self) -> None: ...


_DELETED = object()


class InMemoryKeyValueState(KeyValueState):
    """Storm's InMemoryKeyValueState: state, a prepared snapshot, the last committed snapshot.
    Nothing survives the process (unit tests, or users who accept losing state)."""

    def __init__(self) -> None:
        self._state: dict = {}
        self._prepared: tuple[int, dict] | None = None
        self._committed: tuple[int, dict] = (-1, {})

    def get(self, key: Any, default: Any = None) -> Any:
        return self._state.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        dumps(key, "key", key)
        dumps(value, "value", key)
        self._state[key] = value

    def delete(self, key: Any) -> None:
        self._state.pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._state.items()))

    def prepare_commit(self, txid: int) -> None:
        if self._prepared is not None and txid < self._prepared[0]:
            raise StateError(f"prepare_commit({txid}): a later txid {self._prepared[0]} is already prepared")
        self._prepared = (txid, copy.deepcopy(self._state))

    def commit(self, txid: int) -> None:
        if self._prepared is None or self._prepared[0] != txid:
            have = None if self._prepared is None else self._prepared[0]
            raise StateError(f"commit({txid}): invalid prepared state for commit (prepared txid {have})")
        self._committed = (txid, self._prepared[1])
        self._prepared = None

    def rollback(self) -> None:
        self._prepared = None
        self._state = copy.deepcopy(self._committed[1])  # a copy: Storm aliases here by mistake

    @property
    def committed_txid(self) -> int:
        return self._committed[0]
