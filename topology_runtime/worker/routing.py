"""Per-stream routing: which tasks a tuple goes to, for each grouping."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

from ..api.builder import ALL, DIRECT, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE, NONE, SHUFFLE
from ..api.components import StreamInfo
from ..plan.planner import Plan
from ..transport.wire import field_hash

Picker = Callable[[list], list]
FIELDS_MEMO_KEYS = 65536


def _cycle(tasks: list[int], seed: int) -> Callable[[], int]:
    # Storm's shuffle grouping: a shuffled round robin, reshuffled per task for spread.
    order = list(tasks)
    random.Random(seed).shuffle(order)
    return itertools.cycle(order).__next__


def make_picker(kind: str, tasks: list[int], field_idx: tuple[int, ...], local_tasks: set[int], seed: int) -> Picker | None:
    if kind in (SHUFFLE, NONE):
        nxt = _cycle(tasks, seed)
        return lambda values: [nxt()]
    if kind == LOCAL_OR_SHUFFLE:
        local = [t for t in tasks if t in local_tasks]
        nxt = _cycle(local or tasks, seed)
        return lambda values: [nxt()]
    if kind == FIELDS:
        n = len(tasks)
        if len(field_idx) != 1:
            return lambda values: [tasks[field_hash(values, field_idx) % n]]
        (i,) = field_idx
        memo: dict[str, int] = {}  # str key -> task: the hash is the hot path of a keyed stream

        def pick(values: list) -> list[int]:
            v = values[i]
            if type(v) is str:  # only str: equal keys of other types may hash differently (1, 1.0)
                t = memo.get(v)
                if t is None:
                    if len(memo) >= FIELDS_MEMO_KEYS:
                        memo.clear()  # bounded: a stream of ever-new keys costs a rehash, no memory
                    t = memo[v] = tasks[field_hash(values, field_idx) % n]
                return [t]
            return [tasks[field_hash(values, field_idx) % n]]
        return pick
    if kind == GLOBAL:
        lowest = [min(tasks)]
        return lambda values: lowest
    if kind == ALL:
        every = list(tasks)
        return lambda values: every
    if kind == DIRECT:
        return None
    raise ValueError(f"unknown grouping {kind!r}")


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


def build_routes(plan: Plan, component: str, task: int, local_tasks: set[int]) -> dict[str, Route]:
    declared = {name: decl.direct for name, decl in plan.spec(component).streams.items()} \
        if component in plan.topology.components else {}
    # System streams the plan added ($checkpoint) are routed like declared ones.
    for (cid, sname) in plan.stream_ids:
        if cid == component and sname not in declared:
            declared[sname] = False
    routes: dict[str, Route] = {}
    for sname, direct in declared.items():
        sid = plan.stream_ids[(component, sname)]
        pickers: list[Picker] = []
        direct_targets: set[int] = set()
        for sub in plan.subscriptions.get(sid, ()):
            if sub.kind == DIRECT:
                direct_targets.update(sub.tasks)
                continue
            p = make_picker(sub.kind, sub.tasks, sub.field_idx, local_tasks, seed=task * 7919 + sid)
            if p is not None:
                pickers.append(p)
        routes[sname] = Route(plan.streams[sid], direct, pickers, direct_targets)
    return routes
