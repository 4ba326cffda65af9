"""TopologyBuilder: declare spouts, bolts and groupings; ``create_topology`` validates."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .components import (
    DEFAULT_STREAM,
    BasicBolt,
    Bolt,
    Spout,
    Stream,
    declared_streams,
)
from .config import check_topology_conf
from .groupings import CustomStreamGrouping
from .names import name_list

SHUFFLE, FIELDS, GLOBAL, ALL, DIRECT, LOCAL_OR_SHUFFLE, NONE = (
    "shuffle", "fields", "global", "all", "direct", "local_or_shuffle", "none",
)
PARTIAL_KEY, CUSTOM = "partial_key", "custom"
GROUPINGS = (SHUFFLE, FIELDS, GLOBAL, ALL, DIRECT, LOCAL_OR_SHUFFLE, NONE, PARTIAL_KEY, CUSTOM)
KEYED = (FIELDS, PARTIAL_KEY)  # groupings on named fields of the stream
RESERVED_PREFIXES = ("__", "$")


class TopologyError(ValueError):
    """The topology is invalid; the message names the component and what is wrong."""


@dataclass(frozen=True)
class Grouping:
    """One subscription as declared: what ``TopologyContext.get_sources``/``get_targets`` return.

    ``custom``: a custom grouping's template (each emitting task runs its own copy)."""

    source: str
    stream: str
    kind: str
    fields: tuple[str, ...] = ()
    custom: Any = field(default=None, compare=False, repr=False)


@dataclass
class ComponentSpec:
    id: str
    template: Any
    parallelism: int
    is_spout: bool
    inputs: list[Grouping] = field(default_factory=list)
    streams: dict[str, Stream] = field(default_factory=dict)
    conf: dict[str, Any] = field(default_factory=dict)

    def new_instance(self) -> Any:
        # Templates are copied per task so tasks never share mutable state.
        return copy.deepcopy(self.template)


@dataclass
class Topology:
    """A validated topology: components in declaration order, and the config it carries
    (``create_topology(conf=...)``): under the conf a run is given, over the defaults."""

    components: dict[str, ComponentSpec]
    conf: dict[str, Any] = field(default_factory=dict)

    @property
    def spouts(self) -> list[ComponentSpec]:
        return [c for c in self.components.values() if c.is_spout]

    @property
    def bolts(self) -> list[ComponentSpec]:
        return [c for c in self.components.values() if not c.is_spout]

    def graph(self) -> list[dict[str, Any]]:
        """Components and their subscriptions as plain data (the run record keeps it for the
        status pages' drawing)."""
        return [{"id": c.id, "spout": c.is_spout, "parallelism": c.parallelism,
                 "inputs": [{"source": g.source, "stream": g.stream, "grouping": g.kind, "fields": list(g.fields)}
                            for g in c.inputs]}
                for c in self.components.values()]


class InputDeclarer:
    """Returned by ``set_bolt``; grouping methods chain."""

    def __init__(self, spec: ComponentSpec) -> None:
        self._spec = spec

    def _add(self, kind: str, component: str, stream: str, fields: Sequence[str] = (), custom: Any = None) -> InputDeclarer:
        if not isinstance(component, str):
            raise TopologyError(f"bolt {self._spec.id!r}: {kind} grouping needs a component id, got {component!r}")
        self._spec.inputs.append(Grouping(component, stream, kind, tuple(fields), custom))
        return self

    def _fields(self, method: str, component: str, fields: Sequence[str]) -> list[str]:
        # Refused here, not read as one field per character; an empty list is reported by
        # create_topology with every other problem.
        return name_list(fields, "fields", f"bolt {self._spec.id!r}: {method}({component!r}, ...)",
                         allow_empty=True, error=TopologyError)

    def shuffle_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> InputDeclarer:
        return self._add(SHUFFLE, component, stream)

    def fields_grouping(self, component: str, fields: Sequence[str], stream: str = DEFAULT_STREAM) -> InputDeclarer:
        return self._add(FIELDS, component, stream, self._fields("fields_grouping", component, fields))

    def global_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> InputDeclarer:
        return self._add(GLOBAL, component, stream)

    def all_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> InputDeclarer:
        return self._add(ALL, component, stream)

    def direct_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> InputDeclarer:
        return self._add(DIRECT, component, stream)

    def local_or_shuffle_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> InputDeclarer:
        return self._add(LOCAL_OR_SHUFFLE, component, stream)

    def none_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> InputDeclarer:
        return self._add(NONE, component, stream)

    def partial_key_grouping(self, component: str, fields: Sequence[str], stream: str = DEFAULT_STREAM) -> InputDeclarer:
        """Storm's PartialKeyGrouping: each key has two candidate tasks; each emitting task sends
        to whichever of the two it has sent fewer tuples so far (a key may reach both)."""
        return self._add(PARTIAL_KEY, component, stream, self._fields("partial_key_grouping", component, fields))

    def custom_grouping(self, component: str, grouping: CustomStreamGrouping,
                        stream: str = DEFAULT_STREAM) -> InputDeclarer:
        """``grouping``: a ``CustomStreamGrouping`` instance, a template copied per emitting task."""
        return self._add(CUSTOM, component, stream, custom=grouping)

    def add_configuration(self, key: str, value: Any) -> InputDeclarer:
        """Per-component config (e.g. ``topology.tick.tuple.freq.secs``), as Storm's declarer."""
        self._spec.conf[key] = value
        return self


class SpoutDeclarer:
    def __init__(self, spec: ComponentSpec) -> None:
        self._spec = spec

    def add_configuration(self, key: str, value: Any) -> SpoutDeclarer:
        self._spec.conf[key] = value
        return self


class TopologyBuilder:
    def __init__(self) -> None:
        self._components: dict[str, ComponentSpec] = {}
        self._errors: list[str] = []

    def _add(self, cid: str, component: Any, parallelism: Any, is_spout: bool) -> ComponentSpec:
        kind = "spout" if is_spout else "bolt"
        if not isinstance(cid, str) or not cid:
            raise TopologyError(f"{kind} id must be a non-empty string, got {cid!r}")
        if cid.startswith(RESERVED_PREFIXES):
            raise TopologyError(f"{kind} {cid!r}: ids starting with '__' or '$' are reserved for system components")
        if cid in self._components:
            # Recorded and reported by create_topology, so every problem is listed at once.
            self._errors.append(f"{kind} {cid!r}: duplicate component id")
        spec = ComponentSpec(cid, component, parallelism, is_spout)
        self._components.setdefault(cid, spec)
        return spec

    def set_spout(self, spout_id: str, spout: Spout, parallelism: int = 1) -> SpoutDeclarer:
        return SpoutDeclarer(self._add(spout_id, spout, parallelism, True))

    def set_bolt(self, bolt_id: str, bolt: Bolt, parallelism: int = 1) -> InputDeclarer:
        return InputDeclarer(self._add(bolt_id, bolt, parallelism, False))

    def create_topology(self, conf: Mapping[str, Any] | None = None) -> Topology:
        """The validated topology. ``conf``: its own config, checked as any conf (an unknown
        ``topology.*`` key or a bad value raises ConfigError naming the key); every launcher
        uses it under the conf a run is given (docs/configuration.md, "Precedence")."""
        own = check_topology_conf(conf)
        errors = list(self._errors)
        comps = self._components
        for spec in comps.values():
            kind = "spout" if spec.is_spout else "bolt"
            p = spec.parallelism
            if isinstance(p, bool) or not isinstance(p, int) or p < 1:
                errors.append(f"{kind} {spec.id!r}: parallelism must be an integer >= 1, got {p!r}")
            if spec.is_spout and not isinstance(spec.template, Spout):
                errors.append(f"spout {spec.id!r}: {type(spec.template).__name__} is not a Spout")
            if not spec.is_spout and not isinstance(spec.template, Bolt) and not hasattr(spec.template, "execute"):
                errors.append(f"bolt {spec.id!r}: {type(spec.template).__name__} is not a Bolt")
            try:
                spec.streams = declared_streams(spec.template, spec.id)
            except (TypeError, ValueError) as e:
                errors.append(str(e))
        for spec in comps.values():
            if spec.is_spout:
                continue
            if not spec.inputs:
                errors.append(f"bolt {spec.id!r}: has no inputs (declare a grouping)")
            for g in spec.inputs:
                where = f"bolt {spec.id!r}: {g.kind} grouping on {g.source!r} stream {g.stream!r}"
                src = comps.get(g.source)
                if src is None:
                    errors.append(f"{where}: unknown component {g.source!r}")
                    continue
                stream = src.streams.get(g.stream)
                if stream is None:
                    errors.append(
                        f"{where}: component {g.source!r} declares no stream {g.stream!r} "
                        f"(it declares {sorted(src.streams) or 'none'})"
                    )
                    continue
                if g.kind in KEYED:
                    if not g.fields:
                        errors.append(f"{where}: {g.kind} grouping needs at least one field")
                    for f in g.fields:
                        if f not in stream.fields:
                            errors.append(f"{where}: field {f!r} is not declared (fields: {stream.fields})")
                if g.kind == CUSTOM and not isinstance(g.custom, CustomStreamGrouping):
                    what = g.custom.__name__ if isinstance(g.custom, type) else type(g.custom).__name__
                    hint = " (pass an instance, not the class)" if isinstance(g.custom, type) \
                        and issubclass(g.custom, CustomStreamGrouping) else ""
                    errors.append(f"{where}: {what} is not a CustomStreamGrouping{hint}")
                if g.kind == DIRECT and not stream.direct:
                    errors.append(f"{where}: stream {g.stream!r} is not declared direct (use Stream(..., direct=True))")
                if stream.direct and g.kind != DIRECT:
                    errors.append(f"{where}: stream {g.stream!r} is direct; subscribe with direct_grouping")
        for spec in comps.values():
            # A bolt that needs its own declaration (a windowed bolt: its inputs, the tick rate it
            # needs, the message timeout it must fit in) gets it through this duck-typed hook.
            configure = getattr(spec.template, "configure_component", None)
            if not spec.is_spout and callable(configure):
                errors.extend(configure(spec.id, [(g.source, g.stream) for g in spec.inputs], spec.conf))
        if errors:
            raise TopologyError("invalid topology:\n  " + "\n  ".join(errors))
        return Topology(dict(comps), own)


def is_basic(component: Any) -> bool:
    return isinstance(component, BasicBolt)
