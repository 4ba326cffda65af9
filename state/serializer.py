"""Serializers for state keys and values. The default is msgpack (never pickle: state is read
back by other processes and tools); ``StringSerializer`` and ``JsonSerializer`` store text that
any Redis client reads as it is (``HGETALL``), and a user's class with ``serialize(obj) -> bytes``
and ``deserialize(bytes) -> obj`` may be named in ``topology.state.provider.config``
(``keySerializer`` / ``valueSerializer``, as Storm's ``Serializer``)."""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

import msgpack

TOMBSTONE = b"\xc1__deleted__"  # 0xc1 is never the first byte of a msgpack value, nor valid UTF-8


class StateSerializationError(TypeError):
    """A key or value the state store cannot serialize; the message names the key."""


@runtime_checkable
class Serializer(Protocol):
    """Storm's ``org.apache.storm.state.Serializer``: bytes out, the object back."""

    def serialize(self, obj: Any) -> bytes: ...

    def deserialize(self, raw: bytes) -> Any: ...


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


class MsgpackSerializer:
    """The default: None, bool, int, float, str, bytes and lists/dicts of them, round-tripped."""

    def serialize(self, obj: Any) -> bytes:
        return msgpack.packb(obj, use_bin_type=True)

    def deserialize(self, raw: bytes) -> Any:
        return loads(raw)


class StringSerializer:
    """``str`` as UTF-8 and nothing else (a number would come back as text, so it is refused):
    keys and values that other tools read with a plain ``HGETALL``."""

    def serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise TypeError(f"StringSerializer takes str only, got {type(obj).__name__}")
        return obj.encode()

    def deserialize(self, raw: bytes) -> Any:
        return raw.decode()


class JsonSerializer:
    """JSON text (UTF-8): numbers, strings, lists and dicts that other tools can read; e.g. a
    word count's ``3`` is stored as ``3``. JSON has no bytes and turns tuples into lists."""

    def serialize(self, obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()

    def deserialize(self, raw: bytes) -> Any:
        return json.loads(raw)


def serialize_with(serializer: Serializer, obj: Any, what: str, key: Any) -> bytes:
    """``serializer.serialize(obj)``, or StateSerializationError naming the key and the
    serializer; a result that is not bytes, or that equals the deletion marker, is refused too."""
    try:
        raw = serializer.serialize(obj)
    except Exception as e:  # a user's serializer may raise anything: report it against the key
        raise StateSerializationError(
            f"state {what} for key {key!r} cannot be serialized by {type(serializer).__name__} "
            f"({type(obj).__name__}: {e})") from None
    if not isinstance(raw, (bytes, bytearray)):
        raise StateSerializationError(f"state {what} for key {key!r}: {type(serializer).__name__}.serialize "
                                      f"returned {type(raw).__name__}, not bytes")
    if raw == TOMBSTONE:
        raise StateSerializationError(f"state {what} for key {key!r} serializes to the deletion marker {TOMBSTONE!r}")
    return bytes(raw)
