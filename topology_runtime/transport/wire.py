"""What the wire format (msgpack) can carry, checked at emit time, and the stable field hash."""

from __future__ import annotations

from typing import Any

from state.keygroups import value_hash, values_hash

_SCALARS = frozenset((str, float, bool, bytes, type(None)))
INT_MIN, INT_MAX = -(2**63), 2**64 - 1


class WireTypeError(TypeError):
    """A value the wire format cannot carry; the message names component, stream and field."""


def _carryable(v: Any, depth: int = 0) -> bool:
    t = type(v)
    if t in _SCALARS:
        return True
    if t is int:
        return INT_MIN <= v <= INT_MAX
    if depth > 32:
        return False
    if t is list or t is tuple:
        return all(_carryable(x, depth + 1) for x in v)
    if t is dict:
        return all(_carryable(k, depth + 1) and _carryable(x, depth + 1) for k, x in v.items())
    return False


def check_values(values: Any, fields: list[str], component: str, stream: str) -> list:
    """Return ``values`` as a list, or raise naming the component, stream and field at fault."""
    if type(values) is list and len(values) == len(fields):
        for v in values:  # the hot path: scalar values, or a short flat list of them
            t = type(v)
            if t is str or t is float or t is bool or v is None or t is bytes:
                continue
            if t is int and INT_MIN <= v <= INT_MAX:
                continue
            if t is list and len(v) <= 8:  # e.g. a transactional attempt [txid, attempt_id]
                for x in v:
                    tx = type(x)
                    if not (tx is str or tx is float or tx is bool or x is None or tx is bytes
                            or (tx is int and INT_MIN <= x <= INT_MAX)):
                        break
                else:
                    continue
            break
        else:
            return values
    return _check_slow(values, fields, component, stream)


def _check_slow(values: Any, fields: list[str], component: str, stream: str) -> list:
    if type(values) is not list:
        if not isinstance(values, (list, tuple)):
            raise WireTypeError(
                f"component {component!r} stream {stream!r}: values must be a list or tuple, "
                f"got {type(values).__name__}"
            )
        values = list(values)
    if len(values) != len(fields):
        raise ValueError(
            f"component {component!r} stream {stream!r}: emitted {len(values)} value(s) "
            f"but the stream declares {len(fields)} field(s) {fields}"
        )
    for i, v in enumerate(values):
        t = type(v)
        if t is str or t is float or t is bool or v is None or t is bytes:
            continue
        if t is int and INT_MIN <= v <= INT_MAX:
            continue
        if not _carryable(v):
            raise WireTypeError(
                f"component {component!r} stream {stream!r} field {fields[i]!r}: "
                f"{type(v).__name__} value {v!r:.80} cannot be sent between workers "
                f"(allowed: None, bool, int (64-bit), float, str, bytes, and lists/dicts of them)"
            )
    return values


def field_hash(values: list, idx: tuple[int, ...]) -> int:
    """A hash of the grouping values that is the same in every process and on every machine
    (the key groups' hash: a keyed component's state lives where its tuples are routed)."""
    if len(idx) == 1:
        return value_hash(values[idx[0]])
    return values_hash([values[i] for i in idx])
