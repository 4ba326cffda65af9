"""Trident tuples: a view of a row's values through an operation's input fields.

A row travels as a plain list of the stream's values; an operation sees only its input fields,
in the order it named them (``tup[0]`` is the first input field), read by name or position.
One view object per operation is re-pointed at each row: no allocation per tuple."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..api.builder import TopologyError
from ..api.names import name_list


class TridentError(TopologyError):
    """A Trident topology is invalid: the message names the operation, the field at fault and
    the fields that exist."""


class TridentTuple:
    """``tup["word"]`` or ``tup[0]`` (position within the operation's input fields); ``values``
    is the projected list; ``get(name, default)``; ``fields`` the names."""

    __slots__ = ("fields", "_positions", "_index", "_row")

    def __init__(self, fields: Sequence[str], positions: Sequence[int]) -> None:
        if isinstance(fields, (str, bytes)):  # one isinstance only: reducers build a view per row
            name_list(fields, "fields", "TridentTuple")
        self.fields = list(fields)
        self._positions = tuple(positions)
        self._index = {f: i for i, f in enumerate(self.fields)}
        self._row: list = []

    @classmethod
    def of(cls, fields: Sequence[str], values: list) -> TridentTuple:
        """A view of a whole row (every field)."""
        t = cls(fields, range(len(fields)))
        t._row = values
        return t

    def point(self, row: list) -> TridentTuple:
        self._row = row
        return self

    @property
    def values(self) -> list:
        row = self._row
        return [row[p] for p in self._positions]

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            i = self._index.get(key)
            if i is None:
                raise KeyError(f"field {key!r} is not among this operation's input fields {self.fields}")
            return self._row[self._positions[i]]
        return self._row[self._positions[key]]

    def get(self, name: str, default: Any = None) -> Any:
        i = self._index.get(name)
        return default if i is None else self._row[self._positions[i]]

    def __len__(self) -> int:
        return len(self._positions)

    def __iter__(self) -> Iterator[Any]:
        row = self._row
        return (row[p] for p in self._positions)

    def __repr__(self) -> str:
        return f"TridentTuple({dict(zip(self.fields, self.values))})"


def positions(op: str, wanted: Sequence[str] | None, available: Sequence[str]) -> list[int]:
    """Where ``wanted`` sit in a stream of ``available`` fields; TridentError naming the first
    unknown one and what exists (Storm's projection validation, at the call)."""
    if wanted is None:
        return []
    index = {f: i for i, f in enumerate(available)}
    out = []
    for f in wanted:
        i = index.get(f)
        if i is None:
            raise TridentError(f"{op}: unknown field {f!r}; the stream has {list(available)}")
        out.append(i)
    return out


def check_new_fields(op: str, new: Sequence[str], existing: Sequence[str] = ()) -> list[str]:
    """Output fields must be unique names, and (when appended) new to the stream."""
    if isinstance(new, (str, bytes)):
        raise TridentError(f"{op}: fields must be a list of names, got the string {new!r} (for one write [{new!r}])")
    names = list(new)
    seen: set[str] = set(existing)
    for f in names:
        if not isinstance(f, str) or not f:
            raise TridentError(f"{op}: field names must be non-empty strings, got {f!r}")
        if f.startswith("$"):
            raise TridentError(f"{op}: field {f!r}: names starting with '$' are the runtime's")
        if f in seen:
            where = "already in the stream" if f in existing else "given twice"
            raise TridentError(f"{op}: duplicate field {f!r} ({where}); the stream has {list(existing)}")
        seen.add(f)
    return names


def field_list(op: str, value: Sequence[str] | str | None, argument: str = "fields") -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TridentError(f"{op}: {argument} must be a list of names, got the string {value!r} "
                           f"(for one write [{value!r}])")
    return list(value)
