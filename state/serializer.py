"""One serializer for state keys and values: msgpack (never pickle: state is read back by other
processes and tools)."""

from __future__ import annotations

from typing import Any

import msgpack

TOMBSTONE = b"\xc1__deleted__"  # 0xc1 is never the first byte of a msgpack value


class StateSerializationError(TypeError):
    """A key or value the state store cannot serialize; the message names the key."""


def dumps(obj: Any, what: str, key: Any) -> bytes:
    try:
        return msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise StateSerializationError(
            f"state {what} for key {key!r} cannot be serialized ({type(obj).__name__}: {e}); "
            "use None, bool, int (64-bit), float, str, bytes, and lists/dicts of them"
        ) from None


def loads(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False, use_list=True)
