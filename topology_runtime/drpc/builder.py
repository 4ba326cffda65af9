"""LinearDRPCTopologyBuilder: a DRPC function as a chain of stages (Storm's builder).

    spout (DRPCSpout) -> prepare-request -args-> bolt0 -> bolt1 -> ... -> boltN -> join-result -> return-results
                                   |-return------------------------------------------^
                                   '-id (only if boltN is a finisher) ----------> boltN

Every stage is wrapped in a CoordinatedBolt; stage i reports its per-task counts to stage i+1
on the direct ``$coord`` stream (stage 1 expects one report, from the one stage-0 task that got
the request; later stages one from every upstream task). Tuples carry the request id in field 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..api.builder import Topology, TopologyBuilder, TopologyError
from ..api.names import name_list
from ..coordination.bolt import ALL, SINGLE, TICK_SECS, CoordinatedBolt, is_finisher
from ..coordination.streams import COORD_STREAM
from .protocol import check_function
from .results import ARGS_STREAM, ID_STREAM, RETURN_STREAM, JoinResult, PrepareRequest, ReturnResults
from .spout import DRPCSpout


class LinearDRPCInputDeclarer:
    """How a stage receives the previous stage's tuples (the source is implied)."""

    def __init__(self) -> None:
        self.groupings: list[tuple[str, tuple, dict]] = []

    def _add(self, kind: str, *args: Any, stream: str = "default") -> LinearDRPCInputDeclarer:
        self.groupings.append((kind, args, {"stream": stream}))
        return self

    def shuffle_grouping(self, stream: str = "default") -> LinearDRPCInputDeclarer:
        return self._add("shuffle_grouping", stream=stream)

    def fields_grouping(self, fields: Sequence[str], stream: str = "default") -> LinearDRPCInputDeclarer:
        return self._add("fields_grouping", name_list(fields, "fields", "LinearDRPCInputDeclarer.fields_grouping",
                                                      allow_empty=True, error=TopologyError), stream=stream)

    def global_grouping(self, stream: str = "default") -> LinearDRPCInputDeclarer:
        return self._add("global_grouping", stream=stream)

    def all_grouping(self, stream: str = "default") -> LinearDRPCInputDeclarer:
        return self._add("all_grouping", stream=stream)

    def local_or_shuffle_grouping(self, stream: str = "default") -> LinearDRPCInputDeclarer:
        return self._add("local_or_shuffle_grouping", stream=stream)

    def none_grouping(self, stream: str = "default") -> LinearDRPCInputDeclarer:
        return self._add("none_grouping", stream=stream)


class LinearDRPCTopologyBuilder:
    """``add_bolt(bolt, parallelism)`` per stage, then ``create_topology()``; requests come from
    the function's Redis stream (``DRPCClient.execute(function, args)``)."""

    def __init__(self, function: str, spout_parallelism: int = 1) -> None:
        self.function = check_function(function)
        self.spout_parallelism = spout_parallelism
        self._stages: list[tuple[Any, int, LinearDRPCInputDeclarer]] = []

    def add_bolt(self, bolt: Any, parallelism: int = 1) -> LinearDRPCInputDeclarer:
        d = LinearDRPCInputDeclarer()
        self._stages.append((bolt, parallelism, d))
        return d

    def create_topology(self, url: str | None = None) -> Topology:
        """``url``: the Redis of the requests and replies (default: the run's ``redis.url``)."""
        if not self._stages:
            raise ValueError(f"LinearDRPCTopologyBuilder({self.function!r}): add at least one bolt")
        b = TopologyBuilder()
        b.set_spout("spout", DRPCSpout(self.function, url=url), self.spout_parallelism)
        b.set_bolt("prepare-request", PrepareRequest()).none_grouping("spout")
        n = len(self._stages)
        last_id = f"bolt{n - 1}"
        for i, (bolt, par, decl) in enumerate(self._stages):
            cid, prev = f"bolt{i}", f"bolt{i - 1}"
            finisher_last = i == n - 1 and is_finisher(bolt)
            wrapper = CoordinatedBolt(
                bolt,
                sources={} if i == 0 else {prev: SINGLE if i == 1 else ALL},
                downstream=[f"bolt{i + 1}"] if i < n - 1 else [],
                id_stream=("prepare-request", ID_STREAM) if finisher_last else None)
            d = b.set_bolt(cid, wrapper, par)
            if i == 0 and finisher_last:  # one stage: the request and its id tuple must meet in one task
                d.fields_grouping("prepare-request", ["request"], stream=ARGS_STREAM)
            elif i == 0:
                d.shuffle_grouping("prepare-request", stream=ARGS_STREAM)
            else:
                groupings = decl.groupings or [("fields_grouping", ([_first_field(self._stages[i - 1][0])],),
                                                {"stream": "default"})]
                for kind, args, kw in groupings:
                    getattr(d, kind)(prev, *args, **kw)
                d.direct_grouping(prev, stream=COORD_STREAM)
            if finisher_last:
                d.fields_grouping("prepare-request", ["request"], stream=ID_STREAM)
            d.add_configuration("topology.tick.tuple.freq.secs", TICK_SECS)
        join = b.set_bolt("join-result", JoinResult("prepare-request"))
        join.fields_grouping(last_id, [_first_field(self._stages[-1][0])])
        join.fields_grouping("prepare-request", ["request"], stream=RETURN_STREAM)
        join.add_configuration("topology.tick.tuple.freq.secs", TICK_SECS)
        b.set_bolt("return-results", ReturnResults(url=url)).none_grouping("join-result")
        return b.create_topology()


def _first_field(bolt: Any) -> str:
    out = getattr(bolt, "outputs", None)
    fields = out.get("default") if isinstance(out, dict) else out
    if not fields:
        raise ValueError(f"DRPC stage {type(bolt).__name__}: declare outputs with the request id first "
                         "(e.g. outputs = ['id', 'value'])")
    return list(getattr(fields, "fields", fields))[0]
