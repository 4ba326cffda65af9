"""The logical Trident graph the Stream API builds and the compiler reads: spouts, operations
(each carrying the processor that runs it) and repartitions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SPOUT, DRPC, OP, PARTITION = "spout", "drpc", "op", "partition"
# Repartitions (the groupings between segments).
SHUFFLE, LOCAL_OR_SHUFFLE, FIELDS, GLOBAL, ALL = "shuffle", "local_or_shuffle", "fields", "global", "all"


@dataclass(eq=False)
class StateRef:
    """One Trident state: its factory and its number of partitions (the persist's parallelism)."""

    id: int
    factory: Any
    parallelism: int | None = None
    static: bool = False  # new_static_state: read-only, no persist
    name: str | None = None  # set by the compiler: where a factory without a key prefix keeps it


@dataclass(eq=False)
class Node:
    id: int
    kind: str
    parents: list[Node]
    fields: list[str]
    processor: Any = None  # OP: the processor (processors.py); PARTITION: the grouping; SPOUT: the spout
    parallelism: int | None = None
    names: tuple[str, ...] = ()
    state: StateRef | None = None
    persist: bool = False
    function: str | None = None  # DRPC: the function name
    children: list[Node] = field(default_factory=list)


class Graph:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.states: list[StateRef] = []

    def add(self, kind: str, parents: list[Node], fields: list[str], **kw: Any) -> Node:
        n = Node(len(self.nodes), kind, list(parents), list(fields), **kw)
        self.nodes.append(n)
        for p in parents:
            p.children.append(n)
        return n

    def new_state(self, factory: Any, static: bool = False) -> StateRef:
        s = StateRef(len(self.states), factory, static=static)
        self.states.append(s)
        return s
