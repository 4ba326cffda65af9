"""TransactionalTopologyBuilder: a Topology of coordinator, emitter and coordinated batch bolts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..api.builder import Topology, TopologyBuilder, TopologyError
from ..api.names import name_list
from ..coordination.bolt import ALL, CoordinatedBolt
from ..coordination.streams import BATCH_STREAM, COMMIT_STREAM, COORD_STREAM, ROWS_STREAM
from .batch_executor import BATCH, AttemptIds, BatchBoltExecutor, SpoutBatchExecutor, bolt_kind, is_committer
from .coordinator import CoordinatorSpout


class _Declarer:
    def __init__(self, builder: TransactionalTopologyBuilder, bolt_id: str) -> None:
        self._b, self._id = builder, bolt_id

    def _add(self, kind: str, component: str, *args: Any, **kw: Any) -> _Declarer:
        self._b._inputs[self._id].append((kind, component, args, kw))
        return self

    def shuffle_grouping(self, component: str, stream: str = "default") -> _Declarer:
        return self._add("shuffle_grouping", component, stream=stream)

    def fields_grouping(self, component: str, fields: Sequence[str], stream: str = "default") -> _Declarer:
        return self._add("fields_grouping", component, name_list(
            fields, "fields", f"bolt {self._id!r}: fields_grouping({component!r}, ...)", allow_empty=True,
            error=TopologyError), stream=stream)

    def global_grouping(self, component: str, stream: str = "default") -> _Declarer:
        return self._add("global_grouping", component, stream=stream)

    def all_grouping(self, component: str, stream: str = "default") -> _Declarer:
        return self._add("all_grouping", component, stream=stream)

    def local_or_shuffle_grouping(self, component: str, stream: str = "default") -> _Declarer:
        return self._add("local_or_shuffle_grouping", component, stream=stream)


class TransactionalTopologyBuilder:
    def __init__(self, topology_id: str, spout_id: str, spout: Any, parallelism: int = 1) -> None:
        self.topology_id = topology_id
        self.spout_id = spout_id
        self.spout = spout
        self.spout_parallelism = parallelism
        self._bolts: dict[str, tuple[Any, int, bool]] = {}
        self._inputs: dict[str, list] = {}

    def set_bolt(self, bolt_id: str, bolt: Any, parallelism: int = 1) -> _Declarer:
        self._bolts[bolt_id] = (bolt, parallelism, is_committer(bolt))
        self._inputs[bolt_id] = []
        return _Declarer(self, bolt_id)

    def set_committer_bolt(self, bolt_id: str, bolt: Any, parallelism: int = 1) -> _Declarer:
        self._bolts[bolt_id] = (bolt, parallelism, True)
        self._inputs[bolt_id] = []
        return _Declarer(self, bolt_id)

    def _check_bolts(self) -> None:
        """The kinds of bolt transactional topologies take (BatchBolt, committer BatchBolt,
        BasicBolt; and a plain Bolt, per tuple like Storm's IRichBolt in a CoordinatedBolt); anything else is refused
        here, naming the component, not when its first batch arrives."""
        errors = []
        for bid, (bolt, _, committer) in self._bolts.items():
            try:
                kind = bolt_kind(bolt)
            except ValueError as e:
                errors.append(f"bolt {bid!r}: {e}")
                continue
            if committer and kind != BATCH:
                errors.append(f"bolt {bid!r}: a committer must be a BatchBolt (its finish_batch is the commit), "
                              f"got a {kind}")
        if errors:
            raise TopologyError(f"invalid transactional topology {self.topology_id!r}:\n  " + "\n  ".join(errors))

    def create_topology(self) -> Topology:
        self._check_bolts()
        coord = f"coord-{self.spout_id}"
        b = TopologyBuilder()
        downstream: dict[str, list[str]] = {self.spout_id: []}
        sources: dict[str, list[str]] = {}
        for bid in self._bolts:
            sources[bid] = sorted({c for _, c, _, _ in self._inputs[bid]})
            for s in sources[bid]:
                downstream.setdefault(s, []).append(bid)
        b.set_spout(coord, CoordinatorSpout(self.spout, self.topology_id), 1)
        # Every component runs in coordination's CoordinatedBolt; its timeout map rotates at each
        # tick (every 5 s: an unfinished attempt fails after 10-15 s).
        emitter = CoordinatedBolt(SpoutBatchExecutor(self.spout, self.topology_id), sources={},
                                  downstream=downstream.get(self.spout_id, []), ids=AttemptIds(), rotate_secs=0)
        b.set_bolt(self.spout_id, emitter, self.spout_parallelism).all_grouping(coord, stream=BATCH_STREAM)
        wrappers = {self.spout_id: emitter}
        executors: dict[str, BatchBoltExecutor] = {}
        for bid, (bolt, _, committer) in self._bolts.items():
            executors[bid] = BatchBoltExecutor(bolt, committer, self.topology_id)
            wrappers[bid] = CoordinatedBolt(executors[bid], sources=dict.fromkeys(sources[bid], ALL),
                                            downstream=downstream.get(bid, []),
                                            id_stream=(coord, COMMIT_STREAM) if committer else None,
                                            ids=AttemptIds(), rotate_secs=0)
        for bid, (_, par, committer) in self._bolts.items():
            wrapper = wrappers[bid]
            d = b.set_bolt(bid, wrapper, par)
            for kind, comp, args, kw in self._inputs[bid]:
                getattr(d, kind)(comp, *args, **kw)
                src = wrappers.get(comp)
                if kw.get("stream", "default") == "default" and src is not None and ROWS_STREAM in src.outputs:
                    # the source's default-stream tuples arrive as row chunks, sent to this task directly
                    executors[bid].source_fields[comp] = list(src.outputs["default"].fields)
                    d.direct_grouping(comp, stream=ROWS_STREAM)
            for s in sources[bid]:
                d.direct_grouping(s, stream=COORD_STREAM)
            if committer:
                d.all_grouping(coord, stream=COMMIT_STREAM)
            d.add_configuration("topology.tick.tuple.freq.secs", 5)
        return b.create_topology()
