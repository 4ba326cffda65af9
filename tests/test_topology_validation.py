"""create_topology() reports every problem at once; more rejection cases are in test_builder.py."""

from __future__ import annotations

import pytest

from topology_runtime import BasicBolt, Bolt, Spout, Stream, TopologyBuilder, TopologyError


class S(Spout):
    outputs = {"default": ["word", "n"], "side": ["x"], "targeted": Stream(["word"], direct=True)}


class B(BasicBolt):
    outputs = ["word"]


def _err(builder: TopologyBuilder) -> str:
    with pytest.raises(TopologyError) as e:
        builder.create_topology()
    return str(e.value)


def test_accepts_all_seven_groupings_named_streams_and_chaining():
    b = TopologyBuilder()
    b.set_spout("s", S(), parallelism=2)
    b.set_spout("t", S())
    b.set_bolt("shuffle", B(), 2).shuffle_grouping("s")
    b.set_bolt("fields", B(), parallelism=3).fields_grouping("s", ["word"])
    b.set_bolt("global", B()).global_grouping("s").global_grouping("t")
    b.set_bolt("all", B()).all_grouping("s", stream="side")
    b.set_bolt("direct", B()).direct_grouping("s", stream="targeted")
    b.set_bolt("local", B()).local_or_shuffle_grouping("shuffle")
    b.set_bolt("none", B()).none_grouping("fields")
    topo = b.create_topology()
    assert [g.source for g in topo.components["global"].inputs] == ["s", "t"]
    assert topo.components["fields"].parallelism == 3


def test_all_errors_are_reported_at_once():
    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("a", B()).shuffle_grouping("x")
    b.set_bolt("c", B(), 0).fields_grouping("s", ["nope"])
    msg = _err(b)
    assert "'a'" in msg and "'c'" in msg and "parallelism" in msg and "'nope'" in msg


def test_bad_outputs_declaration_names_component():
    class Weird(Bolt):
        outputs = "word"

    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("weird", Weird()).shuffle_grouping("s")
    assert "component 'weird': outputs must be" in _err(b)


