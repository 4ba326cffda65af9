"""SegmentBolt: one compiled segment of a Trident topology (Storm's SubtopologyBolt), the
operations between two repartitions run in one task, as a BatchBolt.

Every batch gets its own instance (the coordinated wrapper copies it); they share the task's
prepared operations and states (``TaskRuntime``). Rows enter at the segment's entry nodes by
the (component, stream) they came from, flow through the nodes' bound closures, and leave on
the streams of the segment's exits. ``finish_batch`` finishes the nodes in topological order."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from ..coordination.batch import BatchBolt
from .processors import BatchInfo, OperationContext

BATCH_FIELD = "$batch"
STATE_NAME_KEY = "trident.state.name"


@dataclass
class SegmentNode:
    processor: Any
    children: list[tuple[int, int]] = field(default_factory=list)  # (node index, its parent index)
    exits: list[str] = field(default_factory=list)  # streams its rows leave on


@dataclass
class SegmentPlan:
    component: str
    nodes: list[SegmentNode]
    entries: dict[tuple[str, str], list[tuple[int, int]]]
    outputs: dict[str, list[str]]
    states: dict[int, Any]  # state id -> factory
    transactional: bool
    state_names: dict[int, str] = field(default_factory=dict)  # state id -> its default name


class TaskRuntime:
    """A task's prepared operations (its own copies: a prepared operation holds its task's
    place and state partition) and its partitions of the states it uses."""

    def __init__(self, plan: SegmentPlan, conf: dict, context: Any) -> None:
        self.plan, self.conf = plan, conf
        self.index = int(getattr(context, "task_index", 0))
        self.n = len(context.component_tasks(context.component_id))
        self._states: dict[int, Any] = {}
        self.processors = copy.deepcopy([node.processor for node in plan.nodes])
        for proc in self.processors:
            ctx = OperationContext(conf, self.index, self.n, list(getattr(proc, "input_fields", [])),
                                   context.component_id)
            proc.prepare(ctx, self)

    def state(self, state_id: int) -> Any:
        s = self._states.get(state_id)
        if s is None:
            conf = self.conf
            name = self.plan.state_names.get(state_id)
            if name is not None:  # what a factory without a name of its own keys its state under
                conf = {**conf, STATE_NAME_KEY: name}
            s = self._states[state_id] = self.plan.states[state_id].make_state(conf, self.index, self.n)
        return s


class SegmentBolt(BatchBolt):
    def __init__(self, plan: SegmentPlan, shared: dict | None = None) -> None:
        self.plan = plan
        self._shared = shared if shared is not None else {}
        self.outputs = {s: [BATCH_FIELD, *f] for s, f in plan.outputs.items()}

    def __deepcopy__(self, memo: dict) -> SegmentBolt:
        # A batch's instance: the plan, prepared operations and states stay the task's. The
        # tasks' own copies (of one template in a worker) share this dict too, hence the task
        # id as the key.
        return SegmentBolt(self.plan, self._shared)

    def prepare(self, conf: dict, context: Any, batch_id: Any) -> None:
        task = self._shared.get(context.task_id)
        if task is None:
            task = self._shared[context.task_id] = TaskRuntime(self.plan, conf, context)
        plan = self.plan
        info = BatchInfo(batch_id, getattr(batch_id, "txid", None) if plan.transactional else None)
        n = len(plan.nodes)
        pushes: list[Any] = [None] * n
        finishes: list[Any] = [None] * n
        for i in range(n - 1, -1, -1):  # children first: a node's emit calls their pushes
            node = plan.nodes[i]
            pushes[i], finishes[i] = task.processors[i].bind(info, self._emitter(batch_id, node, pushes))
        self._finishes = [f for f in finishes if f is not None]
        self._entries = {key: [(pushes[i], pi) for i, pi in targets] for key, targets in plan.entries.items()}

    def _emitter(self, batch_id: Any, node: SegmentNode, pushes: list) -> Any:
        targets = [(pushes[c], pi) for c, pi in node.children]
        emit, exits = self.emit, node.exits  # type: ignore[attr-defined]  # set by the wrapper before prepare
        if len(targets) == 1 and not exits:
            push, pi = targets[0]
            return lambda row: push(pi, row)
        if not targets and len(exits) == 1:
            stream = exits[0]
            return lambda row: emit([batch_id, *row], stream=stream)

        def fan_out(row: list) -> None:
            for push, pi in targets:
                push(pi, row)
            for s in exits:
                emit([batch_id, *row], stream=s)
        return fan_out

    def execute(self, tup: Any) -> None:
        targets = self._entries.get((tup.info.component, tup.info.stream))
        if targets is None:
            raise ValueError(f"{self.plan.component}: a tuple from {tup.info.component!r}/{tup.info.stream!r}, "
                             "which no operation of this segment reads")
        row = tup.values[1:]
        for push, pi in targets:
            push(pi, row)

    def finish_batch(self) -> None:
        for finish in self._finishes:
            finish()


class CollectResults(BatchBolt):
    """The end of a DRPC stream: a request's rows, as JSON text of a list of rows."""

    outputs = ["request", "result"]

    def prepare(self, conf: dict, context: Any, batch_id: Any) -> None:
        self.request = batch_id
        self.rows: list[list] = []

    def execute(self, tup: Any) -> None:
        self.rows.append(list(tup.values[1:]))

    def finish_batch(self) -> None:
        import json

        self.emit([self.request, json.dumps(self.rows, default=str)])  # type: ignore[attr-defined]
