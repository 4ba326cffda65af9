"""Lists of names (fields, streams) given to a public constructor: a bare string is refused,
naming the argument, rather than read as one name per character."""

from __future__ import annotations

from typing import Any


def name_list(value: Any, argument: str, owner: str, allow_empty: bool = False,
              error: type[ValueError] = ValueError) -> list[str]:
    """``value`` as a list of non-empty strings; ``error`` (a ValueError, e.g. TopologyError from
    a builder) naming ``owner`` and ``argument``."""
    if isinstance(value, (str, bytes)):
        raise error(f"{owner}: {argument} must be a list of names, got the string {value!r} "
                    f"(for one name write [{value!r}])")
    try:
        items = list(value)
    except TypeError:
        raise error(f"{owner}: {argument} must be a list of names, got {value!r}") from None
    if (not items and not allow_empty) or not all(isinstance(x, str) and x for x in items):
        what = "a list" if allow_empty else "a non-empty list"
        raise error(f"{owner}: {argument} must be {what} of non-empty strings, got {value!r}")
    return items
