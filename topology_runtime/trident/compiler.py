"""Compiles a Trident graph onto the runtime (Storm's TridentTopology.build):

* segments: maximal groups of operations joined without a repartition, one ``SegmentBolt``
  each (Storm's one bolt per chain between repartitions), never one that reads its own output;
* repartitions become groupings on the segment's exit streams (its first exit goes as the
  default stream, in row chunks);
* each spout with the segments it reaches is a batch group: a transactional coordinator, the
  spout's emitter and the segments in coordination's CoordinatedBolt (per-batch counts);
  segments holding a persist are committers (their finish runs in the commit phase, in txid
  order);
* each DRPC function's stream runs per request: its spout, PrepareRequest, the segments,
  CollectResults (one task: the request's rows as JSON text), JoinResult and ReturnResults.

A state query reads the state through its own partition of it: its segment runs with the
state's number of partitions, and its repartition routes a key to the same task index as the
persist's (the same hash of the same values modulo the same count)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..api.builder import Topology, TopologyBuilder
from ..coordination.bolt import ALL as ALL_SOURCES
from ..coordination.bolt import SINGLE, TICK_SECS, CoordinatedBolt
from ..coordination.streams import BATCH_STREAM, COMMIT_STREAM, COORD_STREAM, ROWS_STREAM
from ..drpc.results import ARGS_STREAM, RETURN_STREAM, JoinResult, PrepareRequest, ReturnResults
from ..drpc.spout import DRPCSpout
from ..transactional.batch_executor import AttemptIds, BatchBoltExecutor, SpoutBatchExecutor
from ..transactional.coordinator import CoordinatorSpout
from .graph import ALL, DRPC, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE, OP, SHUFFLE, SPOUT, Graph, Node
from .segment import CollectResults, SegmentBolt, SegmentNode, SegmentPlan
from .spouts import OPAQUE, spout_kind
from .tuple import TridentError

_GROUPING_CALLS = {SHUFFLE: "shuffle_grouping", LOCAL_OR_SHUFFLE: "local_or_shuffle_grouping",
                   FIELDS: "fields_grouping", GLOBAL: "global_grouping", ALL: "all_grouping"}


class _UnionFind:
    def __init__(self) -> None:
        self.up: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        self.up.setdefault(x, x)
        while self.up[x] != x:
            self.up[x] = self.up[self.up[x]]
            x = self.up[x]
        return x

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.up[max(ra, rb)] = min(ra, rb)


class _Segment:
    def __init__(self, index: int, nodes: list[Node]) -> None:
        self.index = index
        self.nodes = sorted(nodes, key=lambda n: n.id)  # ids follow creation: parents first
        self.local = {n.id: i for i, n in enumerate(self.nodes)}
        labels: list[str] = []
        for n in self.nodes:
            for label in n.names:
                if label not in labels and n.kind == OP:
                    labels.append(label)
        if not labels:  # what the segment does, for `topology status` and the pages
            for n in self.nodes:
                label = _describe(n.processor)
                if label and label not in labels and len(labels) < 3:
                    labels.append(label)
        self.component = "-".join([f"b-{index}", *labels])
        self.exits: dict[int, str] = {}  # partition node id (or -1: DRPC results) -> stream
        # (source component, stream) -> grouping; and entry targets
        self.inputs: dict[tuple[str, str], tuple] = {}
        self.entries: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        self.upstream: list[str] = []
        self.parallelism = max([n.parallelism for n in self.nodes if n.parallelism] or [1])
        self.group: Any = None

    def exit_stream(self, key: int) -> str:
        s = self.exits.get(key)
        if s is None:
            s = self.exits[key] = "default" if not self.exits else f"s{len(self.exits)}"
        return s


def _describe(processor: Any) -> str | None:
    import re

    from . import processors as P

    if isinstance(processor, (P.Each, P.EachFilter)):
        op = processor.op
        name = getattr(getattr(op, "fn", None), "__name__", None) or type(op).__name__
        name = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower().strip("_<>")
        return re.sub(r"[^a-z0-9_]", "", name) or None
    kinds = {P.Aggregate: "aggregate", P.PartitionPersist: "persist", P.StateQuery: "query", P.Join: "join"}
    return kinds.get(type(processor))


def _fuse(nodes: list[Node]) -> _UnionFind:
    """Segments: operations joined without a repartition, fused, except where that would make
    the segments' graph cyclic (a merge or join of a stream with a repartition of itself would
    read its own segment's output); such an operation reads the other side's rows through a
    local-or-shuffle grouping instead (Storm's identity partition)."""
    uf = _UnionFind()

    def vertex(n: Node) -> Any:
        return uf.find(n.id) if n.kind == OP else ("node", n.id)

    def would_cycle(a: Node, b: Node) -> bool:
        merged = {vertex(a), vertex(b)}
        succ: dict[Any, set] = defaultdict(set)
        for m in nodes:
            for c in m.children:
                succ[vertex(m)].add(vertex(c))
        todo = [v for m in merged for v in succ[m] if v not in merged]
        seen = set(todo)
        while todo:  # a path leaving the merged segment and coming back
            for v in succ[todo.pop()]:
                if v in merged:
                    return True
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        return False

    for n in nodes:
        if n.kind == OP:
            uf.find(n.id)
            for p in n.parents:
                if p.kind == OP and uf.find(n.id) != uf.find(p.id) and not would_cycle(n, p):
                    uf.union(n.id, p.id)
    return uf


def compile_topology(graph: Graph) -> Topology:
    nodes = graph.nodes
    if not any(n.kind in (SPOUT, DRPC) for n in nodes):
        raise TridentError("build: the topology has no stream (new_stream or new_drpc_stream)")
    uf = _fuse(nodes)
    members: dict[int, list[Node]] = defaultdict(list)
    for n in nodes:
        if n.kind == OP:
            members[uf.find(n.id)].append(n)
    segments = [_Segment(i, ms) for i, ms in enumerate(sorted(members.values(), key=lambda ms: min(m.id for m in ms)))]
    seg_of = {n.id: s for s in segments for n in s.nodes}
    emitters = {n.id: f"spout-{n.names[0]}" for n in nodes if n.kind == SPOUT}
    prepares = {n.id: f"prepare-{n.function}" for n in nodes if n.kind == DRPC}

    # Edges, inputs and batch groups (a spout with every segment it reaches).
    groups = _UnionFind()
    for s in segments:
        for n in s.nodes:
            for pi, p in enumerate(n.parents):
                target = (s.local[n.id], pi)
                if p.kind == OP and seg_of[p.id] is s:
                    continue
                if p.kind == SPOUT:
                    key, grouping, unit = (emitters[p.id], "default"), (LOCAL_OR_SHUFFLE,), ("spout", p.id)
                elif p.kind == DRPC:
                    key, grouping, unit = (prepares[p.id], ARGS_STREAM), (SHUFFLE,), ("drpc", p.id)
                else:  # a repartition's rows, or an unfused operation's (_fuse; its exit keyed by the reader)
                    q, exit_key, grouping = (p, n.id, (LOCAL_OR_SHUFFLE,)) if p.kind == OP else \
                        (p.parents[0], p.id, p.processor)
                    src = seg_of[q.id]
                    key, unit = (src.component, src.exit_stream(exit_key)), ("seg", src.index)
                    src_node = src.nodes[src.local[q.id]]
                    src_node._exit_keys = getattr(src_node, "_exit_keys", set()) | {exit_key}  # type: ignore[attr-defined]
                    if src.component not in s.upstream:
                        s.upstream.append(src.component)
                if key in s.inputs and s.inputs[key] != grouping:
                    raise TridentError(f"build: {s.component} reads {key[0]}/{key[1]} with two groupings")
                s.inputs[key] = grouping
                s.entries[key].append(target)
                groups.union(("seg", s.index), unit)
    spouts = [n for n in nodes if n.kind in (SPOUT, DRPC)]
    for s in segments:
        root = groups.find(("seg", s.index))
        mine = [n for n in spouts if groups.find(("spout" if n.kind == SPOUT else "drpc", n.id)) == root]
        if len(mine) != 1:
            names = ", ".join(repr(n.names[0]) for n in mine)
            raise TridentError(f"build: {s.component} combines the streams of {names}: merging or joining "
                               "streams of different spouts (or of a spout and a DRPC function) is not supported; "
                               "each spout's stream is its own batch group")
        s.group = mine[0]

    _set_parallelism(graph, segments)
    _name_states(segments)
    _check_pairings(segments)
    b = TopologyBuilder()
    for spout_node in spouts:
        mine = [s for s in segments if s.group is spout_node]
        if spout_node.kind == SPOUT:
            _build_batch_group(b, spout_node, mine, emitters[spout_node.id], graph)
        else:
            _build_drpc_group(b, spout_node, mine, prepares[spout_node.id], graph)
    return b.create_topology()


def _set_parallelism(graph: Graph, segments: list[_Segment]) -> None:
    for s in segments:  # a persist's segment: the state's partitions
        for n in s.nodes:
            if n.persist and n.state is not None:
                n.state.parallelism = s.parallelism
    for s in segments:  # a query's segment: as many tasks as the state has partitions
        wanted = {n.state.parallelism for n in s.nodes if n.state is not None and not n.persist
                  and not n.state.static and n.state.parallelism}
        if len(wanted) > 1:
            raise TridentError(f"build: {s.component} queries states with different numbers of partitions "
                               f"{sorted(wanted)}: put a repartition between the queries")
        if wanted:
            s.parallelism = wanted.pop()


def _name_states(segments: list[_Segment]) -> None:
    """Each persisted state's default name: its spout's txid and its rank among that spout's
    states (``TXID`` for the first, ``TXID-2``...). Stable across builds and topology renames,
    and distinct between topologies, whose txids must be (they name the coordinator's records)."""
    per_txid: dict[str, int] = defaultdict(int)
    for n in sorted((n for s in segments for n in s.nodes if n.persist and n.state is not None), key=lambda n: n.id):
        s = next(seg for seg in segments if n.id in seg.local)
        if s.group.kind != SPOUT:
            continue
        txid = s.group.names[0]
        per_txid[txid] += 1
        n.state.name = txid if per_txid[txid] == 1 else f"{txid}-{per_txid[txid]}"


def _check_pairings(segments: list[_Segment]) -> None:
    """An opaque spout's replay may differ from its first attempt: only an opaque state
    stays exact with it (Storm's spout/state table). Refused here, not found by a count."""
    for s in segments:
        if s.group.kind != SPOUT or spout_kind(s.group.processor) != OPAQUE:
            continue
        for n in s.nodes:
            kind = getattr(n.state.factory, "state_type", None) if n.persist and n.state else None
            if kind == "transactional":
                raise TridentError(f"build: {s.component} persists a transactional map state fed by the opaque "
                                   f"spout {s.group.names[0]!r}: a replayed batch may differ, which a transactional "
                                   "state would count wrong; use an opaque state (RedisMapState.opaque())")


def _plan(s: _Segment, transactional: bool, graph: Graph, extra_exit: tuple[int, str] | None = None) -> SegmentPlan:
    seg_nodes = []
    for n in s.nodes:
        children = [(s.local[c.id], c.parents.index(n)) for c in n.children if c.kind == OP and c.id in s.local]
        for c in n.children:  # a node feeding one operation twice (merge of a stream with itself)
            if c.kind == OP and c.id in s.local and c.parents.count(n) > 1:
                children += [(s.local[c.id], i) for i, p in enumerate(c.parents) if p is n][1:]
        exits = [s.exits[k] for k in sorted(getattr(n, "_exit_keys", ()))]
        if extra_exit is not None and extra_exit[0] == n.id:
            exits.append(extra_exit[1])
        seg_nodes.append(SegmentNode(n.processor, children, exits))
    outputs: dict[str, list[str]] = {}
    for n in s.nodes:
        for k in getattr(n, "_exit_keys", ()):
            outputs[s.exits[k]] = list(n.fields)
        if extra_exit is not None and extra_exit[0] == n.id:
            outputs[extra_exit[1]] = list(n.fields)
    states = {n.state.id: n.state.factory for n in s.nodes if n.state is not None}
    names = {n.state.id: n.state.name for n in s.nodes if n.state is not None and n.state.name}
    return SegmentPlan(s.component, seg_nodes, dict(s.entries), outputs, states, transactional, names)


def _consumers(segments: list[_Segment]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for s in segments:
        for (src, _stream) in s.inputs:
            if s.component not in out[src]:
                out[src].append(s.component)
    return out


def _subscribe(d: Any, key: tuple[str, str], grouping: tuple) -> None:
    src, stream = key
    kind = grouping[0]
    if kind == FIELDS:
        d.fields_grouping(src, list(grouping[1]), stream=stream)
    else:
        getattr(d, _GROUPING_CALLS[kind])(src, stream=stream)


def _build_batch_group(b: TopologyBuilder, spout_node: Node, segments: list[_Segment], emitter_id: str,
                       graph: Graph) -> None:
    txid, spout = spout_node.names[0], spout_node.processor
    coord = f"coord-{txid}"
    consumers = _consumers(segments)
    b.set_spout(coord, CoordinatorSpout(spout, txid), 1)
    emitter = CoordinatedBolt(SpoutBatchExecutor(spout, txid), sources={}, downstream=consumers.get(emitter_id, []),
                              ids=AttemptIds(), rotate_secs=0)
    b.set_bolt(emitter_id, emitter, spout_node.parallelism or 1).all_grouping(coord, stream=BATCH_STREAM)
    wrappers: dict[str, Any] = {emitter_id: emitter}
    executors: dict[str, BatchBoltExecutor] = {}
    committers = set()
    for s in segments:
        committer = any(n.persist for n in s.nodes)
        if committer:
            committers.add(s.component)
        executors[s.component] = ex = BatchBoltExecutor(SegmentBolt(_plan(s, True, graph)), committer, txid)
        sources = [src for src, _ in s.inputs]
        wrappers[s.component] = CoordinatedBolt(ex, sources=dict.fromkeys(sources, ALL_SOURCES),
                                                downstream=consumers.get(s.component, []),
                                                id_stream=(coord, COMMIT_STREAM) if committer else None,
                                                ids=AttemptIds(), rotate_secs=0)
    for s in segments:
        d = b.set_bolt(s.component, wrappers[s.component], s.parallelism)
        for key, grouping in s.inputs.items():
            _subscribe(d, key, grouping)
            src = wrappers[key[0]]
            if key[1] == "default" and ROWS_STREAM in src.outputs:  # rows come in chunks, straight to a task
                executors[s.component].source_fields[key[0]] = list(src.outputs["default"].fields)
                d.direct_grouping(key[0], stream=ROWS_STREAM)
        for src in dict.fromkeys(k[0] for k in s.inputs):
            d.direct_grouping(src, stream=COORD_STREAM)
        if s.component in committers:
            d.all_grouping(coord, stream=COMMIT_STREAM)
        d.add_configuration("topology.tick.tuple.freq.secs", 5)


def _build_drpc_group(b: TopologyBuilder, drpc_node: Node, segments: list[_Segment], prepare: str,
                      graph: Graph) -> None:
    function = drpc_node.function
    spout_id, results, join, ret = f"spout-{function}", f"results-{function}", f"join-{function}", f"return-{function}"
    b.set_spout(spout_id, DRPCSpout(function), drpc_node.parallelism or 1)
    b.set_bolt(prepare, PrepareRequest()).none_grouping(spout_id)
    last = max((n for s in segments for n in s.nodes), key=lambda n: n.id)
    last_seg = next(s for s in segments if last.id in s.local)
    result_stream = last_seg.exit_stream(-1)
    first = {s.component for s in segments if any(k[0] == prepare for k in s.inputs)}
    consumers = _consumers(segments)
    consumers[last_seg.component].append(results)
    for s in segments:
        sources = {src: SINGLE if src in first else ALL_SOURCES for src, _ in s.inputs if src != prepare}
        plan = _plan(s, False, graph, (last.id, result_stream) if s is last_seg else None)
        bolt = CoordinatedBolt(SegmentBolt(plan), sources=sources, downstream=consumers.get(s.component, []))
        d = b.set_bolt(s.component, bolt, s.parallelism)
        for key, grouping in s.inputs.items():
            _subscribe(d, key, grouping)
        for src in dict.fromkeys(src for src, _ in s.inputs if src != prepare):
            d.direct_grouping(src, stream=COORD_STREAM)
        d.add_configuration("topology.tick.tuple.freq.secs", TICK_SECS)
    collect = CoordinatedBolt(CollectResults(), sources={last_seg.component: SINGLE if last_seg.component in first
                                                         else ALL_SOURCES}, downstream=[])
    d = b.set_bolt(results, collect, 1)
    d.global_grouping(last_seg.component, stream=result_stream)
    d.direct_grouping(last_seg.component, stream=COORD_STREAM)
    d.add_configuration("topology.tick.tuple.freq.secs", TICK_SECS)
    j = b.set_bolt(join, JoinResult(prepare))
    j.fields_grouping(results, ["request"])
    j.fields_grouping(prepare, ["request"], stream=RETURN_STREAM)
    j.add_configuration("topology.tick.tuple.freq.secs", TICK_SECS)
    b.set_bolt(ret, ReturnResults()).none_grouping(join)
