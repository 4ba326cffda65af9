"""Key groups: how a keyed component's state is split so that its number of tasks can change.

Flink's scheme. A keyed component (a stateful bolt whose every input is fields-grouped on the
same number of fields, its state keys being its grouping values) has a fixed number G of key
groups (``topology.state.key.groups``, default 128, fixed for the id's life). A key's group is
its hash modulo G, the same hash fields grouping routes by; of N tasks, task i owns the
contiguous range of groups g with ``g * N // G == i``, and fields grouping sends a tuple to the
task that owns its key's group. Each group's state is stored on its own (one hash slot on a
Redis Cluster), so a change of N moves no data: the tasks take other ranges of the same groups.

What a task puts under a key outside its own groups (a running total, a window's buffer) is the
task's own and cannot follow a key: a component holding any is refused a change of parallelism.

Pure: no I/O. The runtime's fields grouping and the state use these same functions, so where a
tuple goes and where its key's state lives always agree.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import msgpack

KEY_GROUPS_KEY = "topology.state.key.groups"
DEFAULT_KEY_GROUPS = 128
MAX_KEY_GROUPS = 32768


def value_hash(v: Any) -> int:
    """The hash of one grouping value: the same in every process and on every machine."""
    if type(v) is str:
        return zlib.crc32(v.encode())
    if type(v) is int and 0 <= v < 2**63:
        return zlib.crc32(v.to_bytes(8, "little"))
    return zlib.crc32(msgpack.packb(v))


def values_hash(values: Sequence[Any]) -> int:
    """The hash of several grouping values, in field order."""
    return zlib.crc32(msgpack.packb(list(values)))


def key_hash(key: Any, n_fields: int) -> int | None:
    """The hash of a state key as fields grouping hashes the values it stands for: one field,
    the value itself; several, a list (or tuple) of the values in field order. None when the key
    cannot be grouping values (a tuple of the wrong length, a value msgpack cannot carry)."""
    try:
        if n_fields == 1:
            return value_hash(key)
        if isinstance(key, (list, tuple)) and len(key) == n_fields:
            return values_hash(key)
    except (TypeError, ValueError, OverflowError):
        pass
    return None


def task_of_group(group: int, tasks: int, groups: int) -> int:
    """The index (0 .. tasks-1) of the task owning ``group``."""
    return group * tasks // groups


def group_range(index: int, tasks: int, groups: int) -> range:
    """The contiguous groups task ``index`` of ``tasks`` owns (``task_of_group`` inverted)."""
    if not 0 <= index < tasks <= groups:
        raise ValueError(f"task {index} of {tasks} with {groups} key groups: need 0 <= index < tasks <= groups")
    return range((index * groups + tasks - 1) // tasks, ((index + 1) * groups + tasks - 1) // tasks)


def check_key_groups(value: Any) -> int:
    """``topology.state.key.groups`` as an int, or ValueError naming the key."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_KEY_GROUPS:
        raise ValueError(f"config key {KEY_GROUPS_KEY!r}: an integer from 1 to {MAX_KEY_GROUPS}, got {value!r}")
    return value


def moved_groups(groups: int, before: int, after: int) -> int:
    """How many groups change task when a component goes from ``before`` to ``after`` tasks
    (what a rescale hands over: ownership only, the data stays where it is)."""
    return sum(1 for g in range(groups) if task_of_group(g, before, groups) != task_of_group(g, after, groups))


__all__ = ["DEFAULT_KEY_GROUPS", "KEY_GROUPS_KEY", "check_key_groups", "group_range", "key_hash", "moved_groups",
           "task_of_group", "value_hash", "values_hash"]
