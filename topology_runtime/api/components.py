"""Component contracts users implement: spouts, bolts, tuples, stream declarations.

Standard library only (the API layer). The action methods (``emit``, ``ack``, ...)
are declared here with their real signatures, for readers, editors and type checkers; the runtime
binds its own as instance attributes when a task starts, which shadow these, so a call from user
code goes straight to the collector without an extra Python frame on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from .names import name_list

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
        self.fields = name_list(fields, "fields", "Stream", allow_empty=True)
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
    items: Iterable[tuple[Any, Any]]
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
        s = decl if isinstance(decl, Stream) else \
            Stream(name_list(decl, f"outputs[{name!r}]", f"component {component_id!r}", allow_empty=True))
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

    def __iter__(self) -> Iterator[Any]:
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


def _unbound(component: object, name: str) -> NoReturn:
    """The body of every declared action: the runtime's bound one shadows it once the task runs."""
    raise RuntimeError(
        f"{type(component).__name__}.{name}() called before the runtime started this task "
        "(call it from open/prepare/next_tuple/execute, not from __init__)"
    )


class Spout:
    """A source of tuples. Override ``next_tuple``; emit with ``self.emit``."""

    outputs: list[str] | dict[str, Any] = []

    def open(self, conf: dict, context: TopologyContext) -> None:
        pass

    def next_tuple(self) -> None:
        pass

    def ack(self, msg_id: Any) -> None:
        """Callback: the tree of the tuple emitted with ``msg_id`` completed."""

    def fail(self, msg_id: Any) -> None:
        """Callback: that tree failed or timed out; re-emit the tuple to replay it."""

    def close(self) -> None:
        pass

    def activate(self) -> None:
        """Callback: the spout is active: after ``open`` and when a paused run is resumed
        (Storm's ISpout.activate); ``next_tuple`` is called from now on."""

    def deactivate(self) -> None:
        """Callback: the run was paused (Storm's ISpout.deactivate): ``next_tuple`` is not called
        until ``activate``; acks and fails of pending tuples still arrive."""

    # --- actions: bound by the runtime per task (see the module docstring) -------------------
    def emit(self, values: list[Any] | tuple[Any, ...], msg_id: Any = None,
             stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a tuple of ``values`` (one per declared field of ``stream``); returns the ids of
        the tasks it went to. With a ``msg_id`` the tuple is tracked: ``ack(msg_id)`` or
        ``fail(msg_id)`` is called back once its tree completes or fails (or times out). Checks
        run in the caller: a wrong stream or field count raises, naming component and stream."""
        _unbound(self, "emit")

    def emit_direct(self, task: int, values: list[Any] | tuple[Any, ...], msg_id: Any = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        """``emit`` to one ``task`` of a component that subscribes to ``stream`` with a direct
        grouping (the stream is declared ``Stream(..., direct=True)``)."""
        _unbound(self, "emit_direct")

    def finish(self) -> None:
        """A bounded spout has nothing more to emit and nothing pending: ``next_tuple`` is not
        called again, and the run completes once every spout task finished and nothing is in flight."""
        _unbound(self, "finish")

    def finish_input(self) -> None:
        """Nothing new to emit, though tuples may still be pending (held in a window, say) or
        replayed: downstream windows get end of input once every spout task said so or finished."""
        _unbound(self, "finish_input")


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

    # --- actions: bound by the runtime per task (see the module docstring) -------------------
    def emit(self, values: list[Any] | tuple[Any, ...], anchors: Tuple | Iterable[Tuple] | None = None,
             stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a tuple of ``values`` (one per declared field of ``stream``); returns the ids of
        the tasks it went to. ``anchors``: the input tuple(s) it derives from, so it joins their
        trees and its failure replays them; None emits it unanchored (a BasicBolt anchors it to
        the input). Checks run in the caller: a wrong stream or field count raises, naming
        component and stream."""
        _unbound(self, "emit")

    def emit_direct(self, task: int, values: list[Any] | tuple[Any, ...],
                    anchors: Tuple | Iterable[Tuple] | None = None, stream: str = DEFAULT_STREAM) -> list[int]:
        """``emit`` to one ``task`` of a component that subscribes to ``stream`` with a direct
        grouping (the stream is declared ``Stream(..., direct=True)``)."""
        _unbound(self, "emit_direct")

    def emitter(self, stream: str = DEFAULT_STREAM) -> Callable[[list[Any]], list[int]]:
        """``emit(values)`` for unanchored tuples on one stream, its route resolved once: for a
        bolt emitting thousands of tuples in one execute. Same checks and result as ``emit``."""
        _unbound(self, "emitter")

    def router(self, stream: str = DEFAULT_STREAM) -> Callable[[list[Any]], list[int]]:
        """``targets(values)``: the tasks an ``emit`` of ``values`` on ``stream`` would go to,
        with the same checks, sending nothing (to group many tuples per target task)."""
        _unbound(self, "router")

    def chunk_emitter(self, stream: str) -> Callable[[int, list[Any], list[Any]], None]:
        """``emit(task, head, rows)`` on a direct chunk ``stream`` (``Stream([head, rows],
        direct=True, chunk=True)``), unanchored: ``rows`` (each checked with ``router``) travel
        as one tuple and count as ``len(rows)``."""
        _unbound(self, "chunk_emitter")

    def ack(self, tup: Tuple) -> None:
        """Acknowledge an input tuple: processed, with every tuple anchored to it already emitted.
        Every input is acked or failed once (a BasicBolt's are acked for it; there this is a no-op)."""
        _unbound(self, "ack")

    def fail(self, tup: Tuple) -> None:
        """Fail an input tuple: its spout tuples' trees fail now and their spouts may replay them."""
        _unbound(self, "fail")

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the message timeout of the trees ``tup`` belongs to (for a bolt holding it long)."""
        _unbound(self, "reset_timeout")

    def run_off_loop(self, fn: Callable[[], Any], on_done: Callable[[Any, BaseException | None], None]) -> None:
        """Run the blocking ``fn()`` on this task's own thread (see the class docstring);
        ``on_done(result, error)`` runs afterwards on the worker's loop."""
        _unbound(self, "run_off_loop")


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
