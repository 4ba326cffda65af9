"""Per-stream routing: which tasks a tuple goes to, for each grouping."""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Callable
from typing import Any

from state.keygroups import DEFAULT_KEY_GROUPS

from ..api.builder import ALL, CUSTOM, DIRECT, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE, NONE, PARTIAL_KEY, SHUFFLE
from ..api.components import StreamInfo, TopologyContext
from ..plan.planner import Plan
from ..transport.wire import field_hash

Picker = Callable[[list], list]
FIELDS_MEMO_KEYS = 65536
ROW_PICKER = "row_picker"  # a fields picker's attribute: ``row_picker(skip)``, see fields_picker


def row_picker(targets: Picker, skip: int) -> Picker | None:
    """``targets`` for a row holding the values after the first ``skip`` (without building the
    whole values), if ``targets`` is a fields grouping whose key is in the row; else None."""
    make = getattr(targets, ROW_PICKER, None)
    return make(skip) if make is not None else None


def _cycle(tasks: list[int], seed: int) -> Callable[[], int]:
    # Storm's shuffle grouping: a shuffled round robin, reshuffled per task for spread.
    order = list(tasks)
    random.Random(seed).shuffle(order)
    return itertools.cycle(order).__next__


def make_picker(kind: str, tasks: list[int], field_idx: tuple[int, ...], local_tasks: set[int], seed: int,
                key_groups: int = DEFAULT_KEY_GROUPS) -> Picker | None:
    if kind in (SHUFFLE, NONE):
        nxt = _cycle(tasks, seed)
        return lambda values: [nxt()]
    if kind == LOCAL_OR_SHUFFLE:
        local = [t for t in tasks if t in local_tasks]
        nxt = _cycle(local or tasks, seed)
        return lambda values: [nxt()]
    if kind == FIELDS:
        return fields_picker(tasks, field_idx, key_groups)
    if kind == GLOBAL:
        lowest = [min(tasks)]
        return lambda values: lowest
    if kind == ALL:
        every = list(tasks)
        return lambda values: every
    if kind == DIRECT:
        return None
    if kind == PARTIAL_KEY:
        return partial_key_picker(tasks, field_idx, key_groups)
    raise ValueError(f"unknown grouping {kind!r}")


def fields_picker(tasks: list[int], field_idx: tuple[int, ...], key_groups: int = DEFAULT_KEY_GROUPS) -> Picker:
    """Fields grouping by key group (state/keygroups.py): a key's group is its hash modulo
    ``key_groups``, and the task owning that group's contiguous range gets it, so a keyed
    component's state stays with its keys across a change of parallelism. With more tasks than
    groups, the hash modulo the number of tasks."""
    n = len(tasks)
    if n <= key_groups:
        def task_of(h: int, g: int = key_groups) -> int:
            return tasks[(h % g) * n // g]
    else:
        def task_of(h: int) -> int:
            return tasks[h % n]
    if len(field_idx) != 1:
        return lambda values: [task_of(field_hash(values, field_idx))]
    (i,) = field_idx
    memo: dict[str, int] = {}  # str key -> task: the hash is the hot path of a keyed stream

    def keyed_at(j: int) -> Picker:
        """The picker of a list whose key is at position ``j``: ``values`` (j = i) or a row of
        the values after a head (j = i - 1). One memo for both: the same key, the same task."""
        at = (j,)

        def pick(values: list) -> list[int]:
            v = values[j]
            if type(v) is str:  # only str: equal keys of other types may hash differently (1, 1.0)
                t = memo.get(v)
                if t is None:
                    if len(memo) >= FIELDS_MEMO_KEYS:
                        memo.clear()  # bounded: a stream of ever-new keys costs a rehash, no memory
                    t = memo[v] = task_of(field_hash(values, at))
                return [t]
            return [task_of(field_hash(values, at))]
        return pick

    pick = keyed_at(i)
    # For a row without the head of its values (a transactional chunk's rows): the same choice
    # without building [head, *row] per row. None when the key is in the head.
    setattr(pick, ROW_PICKER, lambda skip: keyed_at(i - skip) if i >= skip else None)
    return pick


def _mix32(h: int) -> int:
    # murmur3's 32-bit finalizer: the second hash, derived from the first (CRC-32 of the key):
    # keys whose CRCs differ get independent second choices, in every process alike.
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def partial_key_candidates(values: list, field_idx: tuple[int, ...], n: int,
                           key_groups: int = DEFAULT_KEY_GROUPS) -> tuple[int, int]:
    """The two candidate task positions (0..n-1) of a key: the first is fields grouping's, the
    second is always another one when n > 1 (as Storm's assignment of two tasks)."""
    h = field_hash(values, field_idx)
    first = (h % key_groups) * n // key_groups if n <= key_groups else h % n
    if n == 1:
        return first, first
    return first, (first + 1 + _mix32(h) % (n - 1)) % n


def partial_key_picker(tasks: list[int], field_idx: tuple[int, ...], key_groups: int = DEFAULT_KEY_GROUPS) -> Picker:
    """Storm's PartialKeyGrouping: of a key's two candidates, the task this emitting task has
    sent fewer tuples so far (counts per picker, i.e. per emitting task and subscription)."""
    n = len(tasks)
    counts = [0] * n
    memo: dict[str, tuple[int, int]] = {}  # str key -> candidates, as fields grouping's memo

    i = field_idx[0] if len(field_idx) == 1 else -1

    def pick(values: list) -> list[int]:
        v = values[i] if i >= 0 else None
        if type(v) is str:  # only str keys are remembered, as in fields grouping (1 vs 1.0)
            c = memo.get(v)
            if c is None:
                if len(memo) >= FIELDS_MEMO_KEYS:
                    memo.clear()
                c = memo[v] = partial_key_candidates(values, field_idx, n, key_groups)
            a, b = c
        else:
            a, b = partial_key_candidates(values, field_idx, n, key_groups)
        if counts[b] < counts[a]:
            a = b
        counts[a] += 1
        return [tasks[a]]
    return pick


class GroupingError(ValueError):
    """A custom grouping chose a task that does not subscribe; names the grouping, the
    emitting component and task, and the chosen task."""


def custom_picker(template: Any, context: TopologyContext, source: tuple[str, str], target: str,
                  tasks: list[int]) -> Picker:
    """The emitting task's own copy of a custom grouping, prepared once; each choice is checked
    against the targets (one C-level subset test: the hot path stays a call and a check)."""
    grouping = copy.deepcopy(template)
    targets = sorted(tasks)
    grouping.prepare(context, source, list(targets))
    allowed = frozenset(targets)
    choose, me = grouping.choose_tasks, context.task_id

    def pick(values: list) -> list[int]:
        chosen = choose(me, values)
        if type(chosen) is not list:
            chosen = list(chosen)
        if allowed.issuperset(chosen):
            return chosen
        bad = next((t for t in chosen if t not in allowed), None)
        raise GroupingError(
            f"component {source[0]!r} (task {me}) stream {source[1]!r}: custom grouping "
            f"{type(grouping).__name__} (bolt {target!r}) chose task {bad!r}, which is not one of "
            f"its target tasks {targets}")
    return pick


class Route:
    """Everything an emit on one (component, stream) needs."""

    __slots__ = ("info", "fields", "direct", "direct_targets", "targets")

    def __init__(self, info: StreamInfo, direct: bool, pickers: list[Picker], direct_targets: set[int]) -> None:
        self.info = info
        self.fields = info.fields
        self.direct = direct
        self.direct_targets = direct_targets
        if not pickers:
            self.targets = lambda values: []
        elif len(pickers) == 1:
            self.targets = pickers[0]
        else:
            def targets(values: list, _p=tuple(pickers)) -> list[int]:
                out: list[int] = []
                for p in _p:
                    out.extend(p(values))
                return out
            self.targets = targets


def build_routes(plan: Plan, component: str, task: int, local_tasks: set[int],
                 context: TopologyContext | None = None) -> dict[str, Route]:
    """``context``: the task's own, for the custom groupings it emits to (they need one)."""
    declared = {name: decl.direct for name, decl in plan.spec(component).streams.items()} \
        if component in plan.topology.components else {}
    # System streams the plan added ($checkpoint) are routed like declared ones.
    for (cid, sname) in plan.stream_ids:
        if cid == component and sname not in declared:
            declared[sname] = False
    routes: dict[str, Route] = {}
    key_groups = plan.key_groups
    for sname, direct in declared.items():
        sid = plan.stream_ids[(component, sname)]
        pickers: list[Picker] = []
        direct_targets: set[int] = set()
        for sub in plan.subscriptions.get(sid, ()):
            if sub.kind == DIRECT:
                direct_targets.update(sub.tasks)
                continue
            if sub.kind == CUSTOM:
                pickers.append(_custom(plan, component, sname, sub.target, sub.tasks, task, context))
                continue
            p = make_picker(sub.kind, sub.tasks, sub.field_idx, local_tasks, seed=task * 7919 + sid,
                            key_groups=key_groups)
            if p is not None:
                pickers.append(p)
        routes[sname] = Route(plan.streams[sid], direct, pickers, direct_targets)
    return routes


def _custom(plan: Plan, component: str, stream: str, target: str, tasks: list[int], task: int,
            context: TopologyContext | None) -> Picker:
    template = next(g.custom for g in plan.spec(target).inputs if (g.source, g.stream) == (component, stream))
    if context is None:
        context = TopologyContext(task, component, plan.task_index(task), plan.component_tasks,
                                  topology=plan.topology)
    return custom_picker(template, context, (component, stream), target, tasks)
