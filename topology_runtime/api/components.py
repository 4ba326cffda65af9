"""Component contracts users implement: spouts, bolts, tuples, stream declarations.

Standard library only (the API layer of DESIGN.md). The runtime binds the action methods
(``emit``, ``ack``, ...) as instance attributes when a task starts, so a call from user code
goes straight to the collector without an extra Python frame on the hot path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DEFAULT_STREAM = "default"
SYSTEM_COMPONENT = "__system"
TICK_STREAM = "__tick"


class FailedException(Exception):
    """Raised by a BasicBolt's execute to fail the input tuple instead of acking it."""


class Stream:
    """An output stream declaration, where a plain field list is not enough."""

    __slots__ = ("fields", "direct", "chunk")

    def __init__(self, fields: Sequence[str], direct: bool = False, chunk: bool = False) -> None:
        """``chunk``: each tuple is ``[head, rows]`` and stands for ``len(rows)`` tuples (see
        ``Bolt.chunk_emitter``); workers weigh it by its rows when they share out their time."""
        self.fields = list(fields)
        self.direct = bool(direct)
        self.chunk = bool(chunk)
        if self.chunk and len(self.fields) != 2:
            raise ValueError(f"a chunk stream has two fields (head, rows), got {self.fields}")

    def __repr__(self) -> str:
        return f"Stream({self.fields!r}, direct={self.direct}, chunk={self.chunk})"


def declared_streams(component: Any, component_id: str = "?") -> dict[str, Stream]:
    """Normalise a component's ``outputs`` into {stream: Stream}."""
    outputs = getattr(component, "outputs", None)
    if outputs is None:
        return {}
    if isinstance(outputs, Mapping):
        items = outputs.items()
    elif isinstance(outputs, (list, tuple)):
        # No fields, no stream (as Storm): subscribing to it is an error at create_topology().
        items = [(DEFAULT_STREAM, outputs)] if outputs else []
    else:
        raise TypeError(
            f"component {component_id!r}: outputs must be a list of field names or a dict "
            f"of stream -> fields, got {type(outputs).__name__}"
        )
    streams: dict[str, Stream] = {}
    for name, decl in items:
        if not isinstance(name, str) or not name:
            raise TypeError(f"component {component_id!r}: stream names must be non-empty strings")
        s = decl if isinstance(decl, Stream) else Stream(list(decl))
        for f in s.fields:
            if not isinstance(f, str):
                raise TypeError(
                    f"component {component_id!r}, stream {name!r}: field names must be strings, got {f!r}"
                )
        if len(set(s.fields)) != len(s.fields):
            raise ValueError(f"component {component_id!r}, stream {name!r}: duplicate field names {s.fields}")
        streams[name] = s
    return streams


class StreamInfo:
    """Shared, per (component, stream) description every tuple of that stream points at."""

    __slots__ = ("sid", "component", "stream", "fields", "index", "chunk")

    def __init__(self, sid: int, component: str, stream: str, fields: Sequence[str], chunk: bool = False) -> None:
        self.sid = sid
        self.component = component
        self.stream = stream
        self.fields = list(fields)
        self.index = {f: i for i, f in enumerate(self.fields)}
        self.chunk = chunk


TICK_INFO = StreamInfo(-1, SYSTEM_COMPONENT, TICK_STREAM, [])


class Tuple:
    """A read-only tuple as a bolt receives it."""

    __slots__ = ("values", "info", "source_task", "anchors", "out_ack_val", "_inbox")

    def __init__(self, values: list, info: StreamInfo, source_task: int, anchors: dict | None) -> None:
        self.values = values
        self.info = info
        self.source_task = source_task
        # root id -> this tuple's edge id in that root's tree (Storm's MessageId)
        self.anchors = anchors
        # XOR of the edge ids of every child anchored to this tuple (Storm's outAckVal)
        self.out_ack_val = 0

    @property
    def fields(self) -> list[str]:
        return self.info.fields

    @property
    def stream(self) -> str:
        return self.info.stream

    @property
    def source_component(self) -> str:
        return self.info.component

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            try:
                return self.values[self.info.index[key]]
            except KeyError:
                raise KeyError(
                    f"tuple from {self.info.component!r} stream {self.info.stream!r} has no field "
                    f"{key!r} (fields: {self.info.fields})"
                ) from None
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    def is_tick(self) -> bool:
        return self.info is TICK_INFO

    def __repr__(self) -> str:
        return f"Tuple({self.info.component}:{self.source_task}/{self.info.stream} {self.values!r})"


class TopologyContext:
    """What ``open``/``prepare`` receive: who this task is and who its peers are, and (as
    Storm's GeneralTopologyContext) how the user's components are wired: sources, targets and
    output fields per stream. System components (``__acker``, ``$checkpointspout``) and their
    streams are not part of that picture. Groupings are ``builder.Grouping`` descriptions
    (frozen: ``source``, ``stream``, ``kind``, ``fields``)."""

    def __init__(
        self,
        task_id: int,
        component_id: str,
        task_index: int,
        component_task_map: Mapping[str, Sequence[int]],
        topology_id: str = "",
        worker_index: int = 0,
        topology: Any = None,
    ) -> None:
        """``topology``: the validated ``Topology``; without it only the task methods answer."""
        self.task_id = task_id
        self.component_id = component_id
        self.task_index = task_index
        self.topology_id = topology_id
        self.worker_index = worker_index
        self._tasks = {k: sorted(v) for k, v in component_task_map.items()}
        self._topology = topology

    def component_tasks(self, component: str) -> list[int]:
        try:
            return list(self._tasks[component])
        except KeyError:
            raise KeyError(f"no component {component!r} in this topology") from None

    @property
    def parallelism(self) -> int:
        return len(self._tasks[self.component_id])

    # --- the topology's wiring (Storm's getSources, getTargets, getComponentOutputFields) ----
    def _spec(self, component: str) -> Any:
        if self._topology is None:
            raise RuntimeError("this TopologyContext was built without the topology (only the runtime's "
                               "contexts answer questions about sources, targets and streams)")
        try:
            return self._topology.components[component]
        except KeyError:
            raise KeyError(f"no component {component!r} in this topology") from None

    def get_component_streams(self, component: str) -> set[str]:
        """The streams ``component`` declares."""
        return set(self._spec(component).streams)

    def get_this_streams(self) -> set[str]:
        return self.get_component_streams(self.component_id)

    def get_component_output_fields(self, component: str, stream: str = DEFAULT_STREAM) -> list[str]:
        decl = self._spec(component).streams.get(stream)
        if decl is None:
            raise KeyError(f"component {component!r} declares no stream {stream!r} "
                           f"(it declares {sorted(self._spec(component).streams) or 'none'})")
        return list(decl.fields)

    def get_this_output_fields(self, stream: str = DEFAULT_STREAM) -> list[str]:
        return self.get_component_output_fields(self.component_id, stream)

    def get_sources(self, component: str) -> dict[tuple[str, str], Any]:
        """What ``component`` subscribes to: {(source component, stream): grouping}."""
        return {(g.source, g.stream): g for g in self._spec(component).inputs}

    def get_this_sources(self) -> dict[tuple[str, str], Any]:
        return self.get_sources(self.component_id)

    def get_targets(self, component: str) -> dict[str, dict[str, Any]]:
        """Who subscribes to ``component``: {stream: {subscribing component: grouping}}; a stream
        nobody subscribes to is absent (as Storm)."""
        self._spec(component)
        out: dict[str, dict[str, Any]] = {}
        for other in self._topology.components.values():
            for g in other.inputs:
                if g.source == component:
                    out.setdefault(g.stream, {})[other.id] = g
        return out

    def get_this_targets(self) -> dict[str, dict[str, Any]]:
        return self.get_targets(self.component_id)


def _unbound(name: str):
    def action(self, *args, **kwargs):
        raise RuntimeError(
            f"{type(self).__name__}.{name}() called before the runtime started this task "
            "(call it from open/prepare/next_tuple/execute, not from __init__)"
        )

    action.__name__ = name
    return action


class Spout:
    """A source of tuples. Override ``next_tuple``; emit with ``self.emit``."""

    outputs: list[str] | dict[str, Any] = []

    def open(self, conf: dict, context: TopologyContext) -> None:
        pass

    def next_tuple(self) -> None:
        pass

    def ack(self, msg_id: Any) -> None:
        pass

    def fail(self, msg_id: Any) -> None:
        pass

    def close(self) -> None:
        pass

    # Actions, rebound by the runtime per task.
    emit = _unbound("emit")
    emit_direct = _unbound("emit_direct")
    finish = _unbound("finish")
    # A bounded spout with nothing new to emit, whose tuples may still be pending (held in a
    # window, say) or replayed: downstream windows may get end of input once every spout said it.
    finish_input = _unbound("finish_input")


class ReplayableSpout(Spout):
    """A spout over a source that can rewind (exactly-once mode)."""

    def snapshot(self) -> object:
        raise NotImplementedError

    def restore(self, snapshot: object) -> None:
        raise NotImplementedError


class Bolt:
    """Processes tuples. Ack or fail every input (or use BasicBolt).

    ``run_off_loop(fn, on_done)`` runs a blocking ``fn()`` (a slow sink) on the task's own
    thread, one call at a time in submission order, so the worker's other tasks keep going;
    ``on_done(result, error)`` runs back on the worker's loop, the only place to emit, ack, fail.
    """

    outputs: list[str] | dict[str, Any] = []

    def prepare(self, conf: dict, context: TopologyContext) -> None:
        pass

    def execute(self, tup: Tuple) -> None:
        pass

    def cleanup(self) -> None:
        pass

    emit = _unbound("emit")
    emit_direct = _unbound("emit_direct")
    emitter = _unbound("emitter")
    router = _unbound("router")
    chunk_emitter = _unbound("chunk_emitter")
    ack = _unbound("ack")
    fail = _unbound("fail")
    reset_timeout = _unbound("reset_timeout")
    run_off_loop = _unbound("run_off_loop")


class StatefulBolt(Bolt):
    """A bolt whose ``KeyValueState`` the runtime checkpoints (Storm's IStatefulBolt).

    ``init_state`` runs once, after ``prepare`` and before any tuple, with the state last
    committed; inputs are acked for real only once the checkpoint covering them commits.
    """

    def init_state(self, state: Any) -> None:
        pass

    def pre_prepare(self, txid: int) -> None:
        pass

    def pre_commit(self, txid: int) -> None:
        pass

    def pre_rollback(self) -> None:
        pass


class BasicBolt(Bolt):
    """Emits are anchored to the input; the input is acked after execute returns;
    raising FailedException fails it instead."""


def as_anchor_list(anchors: Tuple | Iterable[Tuple] | None) -> list[Tuple]:
    if anchors is None:
        return []
    if isinstance(anchors, Tuple):
        return [anchors]
    return list(anchors)
