"""The plan: expand components to tasks, add system components, assign tasks to workers.

Deterministic: the same topology, config and worker count give the same plan everywhere,
so every worker (and the Spark driver) computes routing tables that agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from state.keygroups import DEFAULT_KEY_GROUPS, KEY_GROUPS_KEY, check_key_groups

from ..api.builder import ALL, DIRECT, FIELDS, ComponentSpec, Grouping, Topology, TopologyError
from ..api.components import ReplayableSpout, StatefulBolt, StreamInfo
from ..api.config import ConfigError
from ..reliability.checkpointing import CHECKPOINT_FIELDS, CHECKPOINT_SPOUT, CHECKPOINT_STREAM

ACKER = "__acker"


@dataclass
class Subscription:
    """One bolt subscribed to one (component, stream)."""

    target: str
    kind: str
    tasks: list[int]
    field_idx: tuple[int, ...] = ()


@dataclass
class Plan:
    topology: Topology
    conf: dict[str, Any]
    workers: int
    component_tasks: dict[str, list[int]]
    task_component: dict[int, str]
    task_worker: dict[int, int]
    acker_tasks: list[int]
    streams: list[StreamInfo]  # by sid
    stream_ids: dict[tuple[str, str], int]
    subscriptions: dict[int, list[Subscription]]  # sid -> subscribers
    component_conf: dict[str, dict[str, Any]] = field(default_factory=dict)
    stateful: bool = False
    exactly_once: bool = False
    checkpoint_inputs: dict[str, int] = field(default_factory=dict)  # bolt -> checkpoint input tasks
    keyed: dict[str, int] = field(default_factory=dict)  # keyed stateful bolt -> its grouping's number of fields
    key_groups: int = DEFAULT_KEY_GROUPS

    def tasks_of_worker(self, w: int) -> list[int]:
        return sorted(t for t, ww in self.task_worker.items() if ww == w)

    def spec(self, component: str) -> ComponentSpec:
        return self.topology.components[component]

    def task_index(self, task: int) -> int:
        return self.component_tasks[self.task_component[task]].index(task)

    def state_components(self) -> dict[str, int]:
        """Component id -> parallelism of the components that keep state by task: stateful
        bolts, and in exactly-once mode the spouts (their committed positions). A task's state
        is keyed by its component and index (``task_index``), never by its task number."""
        return {cid: len(self.component_tasks[cid]) for cid, spec in self.topology.components.items()
                if isinstance(spec.template, StatefulBolt) or (self.exactly_once and spec.is_spout)}

    def parallelism(self) -> dict[str, int]:
        """The user components' number of tasks."""
        return {cid: len(self.component_tasks[cid]) for cid in self.topology.components}

    def describe(self) -> str:
        lines = [f"{self.workers} worker(s), {len(self.task_component)} task(s)"]
        for w in range(self.workers):
            tasks = self.tasks_of_worker(w)
            lines.append(f"  worker {w}: " + ", ".join(f"{self.task_component[t]}[{t}]" for t in tasks))
        return "\n".join(lines)


def build_plan(topology: Topology, conf: dict[str, Any], workers: int | None = None) -> Plan:
    """``conf`` must already be resolved (config.resolve_config)."""
    w = int(workers or conf.get("topology.workers") or 1)
    if w < 1:
        raise TopologyError(f"workers must be >= 1, got {w}")
    n_ackers = conf.get("topology.acker.executors")
    n_ackers = w if n_ackers is None else int(n_ackers)

    component_tasks: dict[str, list[int]] = {}
    task_component: dict[int, str] = {}
    task_worker: dict[int, int] = {}
    next_task = 1
    slot = 0
    # Round-robin every component's tasks over the workers so each component spreads out.
    for cid, spec in topology.components.items():
        tasks = list(range(next_task, next_task + spec.parallelism))
        next_task += spec.parallelism
        component_tasks[cid] = tasks
        for t in tasks:
            task_component[t] = cid
            task_worker[t] = slot % w
            slot += 1
    exactly_once = bool(conf.get("topology.state.exactly.once"))
    if exactly_once:
        bad = [c.id for c in topology.spouts if not isinstance(c.template, ReplayableSpout)]
        if bad:
            raise TopologyError(
                f"topology.state.exactly.once: spout(s) {bad} are not ReplayableSpout; exactly-once needs "
                "spouts that can snapshot and rewind their position (e.g. RedisStreamReplaySpout)")
    for spec in topology.bolts:
        # Checks that need the topology's conf (a windowed bolt's message timeout, Storm's validate()).
        check = getattr(spec.template, "check_topology_conf", None)
        if callable(check):
            errors = check(spec.id, {**conf, **spec.conf})
            if errors:
                raise TopologyError("invalid topology:\n  " + "\n  ".join(errors))
    stateful = exactly_once or any(isinstance(c.template, StatefulBolt) for c in topology.components.values())
    if stateful:
        interval = float(conf.get("topology.state.checkpoint.interval.ms", 1000))
        timeout_ms = float(conf.get("topology.message.timeout.secs", 30)) * 1000
        if interval >= timeout_ms:
            raise ConfigError(
                f"topology.state.checkpoint.interval.ms ({interval:g}) must be below "
                f"topology.message.timeout.secs ({timeout_ms / 1000:g} s): inputs are acked only at commit"
            )
        if not exactly_once:  # exactly-once: the supervisor coordinates; barriers start at the spouts
            component_tasks[CHECKPOINT_SPOUT] = [next_task]
            task_component[next_task] = CHECKPOINT_SPOUT
            task_worker[next_task] = 0
            next_task += 1
    acker_tasks = list(range(next_task, next_task + n_ackers))
    component_tasks[ACKER] = acker_tasks
    for i, t in enumerate(acker_tasks):
        task_component[t] = ACKER
        task_worker[t] = i % w  # one acker per worker by default

    streams: list[StreamInfo] = []
    stream_ids: dict[tuple[str, str], int] = {}
    for cid, spec in topology.components.items():
        for sname, s in spec.streams.items():
            sid = len(streams)
            streams.append(StreamInfo(sid, cid, sname, s.fields, chunk=s.chunk))
            stream_ids[(cid, sname)] = sid

    checkpoint_inputs: dict[str, int] = {}
    if stateful:
        # Storm's wiring: $checkpoint from $checkpointspout to spout-fed bolts, from each bolt
        # to the bolts it feeds; one per source component, all-grouped.
        if not exactly_once:
            sid = len(streams)
            streams.append(StreamInfo(sid, CHECKPOINT_SPOUT, CHECKPOINT_STREAM, CHECKPOINT_FIELDS))
            stream_ids[(CHECKPOINT_SPOUT, CHECKPOINT_STREAM)] = sid
        for cid, spec in topology.components.items():
            if exactly_once or not spec.is_spout:
                sid = len(streams)
                streams.append(StreamInfo(sid, cid, CHECKPOINT_STREAM, CHECKPOINT_FIELDS))
                stream_ids[(cid, CHECKPOINT_STREAM)] = sid
    subscriptions: dict[int, list[Subscription]] = {sid: [] for sid in range(len(streams))}
    if stateful:
        for cid, spec in topology.components.items():
            if spec.is_spout:
                continue
            sources: list[str] = []
            for g in spec.inputs:
                src = g.source
                if topology.components[src].is_spout and not exactly_once:
                    src = CHECKPOINT_SPOUT  # Storm: beside the data, not in-band
                if src not in sources:
                    sources.append(src)
            for src in sources:
                sid = stream_ids[(src, CHECKPOINT_STREAM)]
                subscriptions[sid].append(Subscription(cid, ALL, sorted(component_tasks[cid])))
            checkpoint_inputs[cid] = sum(len(component_tasks[src]) for src in sources)
    for cid, spec in topology.components.items():
        seen: set[tuple[str, str]] = set()
        for g in spec.inputs:
            key = (g.source, g.stream)
            if key in seen:
                raise TopologyError(f"bolt {cid!r}: subscribes to {g.source!r} stream {g.stream!r} twice")
            seen.add(key)
            sid = stream_ids[key]
            info = streams[sid]
            subscriptions[sid].append(_subscription(cid, g, component_tasks[cid], info))
    component_conf = {cid: dict(spec.conf) for cid, spec in topology.components.items()}
    try:
        key_groups = check_key_groups(conf.get(KEY_GROUPS_KEY, DEFAULT_KEY_GROUPS))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return Plan(topology, conf, w, component_tasks, task_component, task_worker, acker_tasks,
                streams, stream_ids, subscriptions, component_conf, stateful, exactly_once, checkpoint_inputs,
                keyed_components(topology, key_groups), key_groups)


def keyed_components(topology: Topology, key_groups: int) -> dict[str, int]:
    """Stateful bolts whose state can follow its keys (state/keygroups.py): every input
    fields-grouped on the same number of fields, no more tasks than key groups. Component ->
    that number of fields."""
    out: dict[str, int] = {}
    for spec in topology.bolts:
        if not isinstance(spec.template, StatefulBolt) or not spec.inputs or spec.parallelism > key_groups:
            continue
        widths = {len(g.fields) if g.kind == FIELDS else 0 for g in spec.inputs}
        if len(widths) == 1 and 0 not in widths:
            out[spec.id] = widths.pop()
    return out


def rescale(plan: Plan, workers: int | None = None, parallelism: Mapping[str, int] | None = None) -> Plan:
    """The same topology with other numbers of tasks for the components in ``parallelism``
    (and ``workers`` worker processes): task ids are given out again, state stays keyed by
    component and index (and key group). ``TopologyError`` naming an unknown component or a bad
    number."""
    changes = dict(parallelism or {})
    for cid, n in changes.items():
        if cid not in plan.topology.components:
            raise TopologyError(f"rescale: no component {cid!r} in this topology (it has "
                                f"{', '.join(plan.topology.components)})")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TopologyError(f"rescale: component {cid!r}: parallelism must be an integer >= 1, got {n!r}")
    components = {cid: dataclasses.replace(spec, parallelism=changes.get(cid, spec.parallelism))
                  for cid, spec in plan.topology.components.items()}
    topology = dataclasses.replace(plan.topology, components=components)
    conf = {**plan.conf, "topology.acker.executors": len(plan.acker_tasks)}
    return build_plan(topology, conf, workers or plan.workers)


def replan(plan: Plan, workers: int) -> Plan:
    """The same topology on ``workers`` workers: every task keeps its id (ackers included), so
    state namespaces and acker routing stay put; only the placement of tasks changes."""
    conf = {**plan.conf, "topology.acker.executors": len(plan.acker_tasks)}
    return build_plan(plan.topology, conf, workers)


def _subscription(target: str, g: Grouping, tasks: list[int], info: StreamInfo) -> Subscription:
    idx = tuple(info.index[f] for f in g.fields) if g.fields else ()
    return Subscription(target, g.kind, sorted(tasks), idx)


def direct_subscribers(plan: Plan, sid: int) -> set[int]:
    out: set[int] = set()
    for sub in plan.subscriptions.get(sid, ()):
        if sub.kind == DIRECT:
            out.update(sub.tasks)
    return out
