"""create_topology() and resolve_config(): bad input is rejected with an error naming the
component/stream/field/key at fault."""

from __future__ import annotations

import logging

import pytest

from topology_runtime import BasicBolt, Bolt, Spout, Stream, TopologyBuilder, TopologyError
from topology_runtime.config import ConfigError, resolve_config


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


def test_unknown_component():
    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("count", B()).shuffle_grouping("nope")
    msg = _err(b)
    assert "bolt 'count'" in msg and "unknown component 'nope'" in msg


def test_unknown_stream():
    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("count", B()).shuffle_grouping("s", stream="missing")
    msg = _err(b)
    assert "bolt 'count'" in msg and "no stream 'missing'" in msg


def test_fields_grouping_on_undeclared_field():
    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("count", B()).fields_grouping("s", ["wrod"])
    msg = _err(b)
    assert "bolt 'count'" in msg and "field 'wrod' is not declared" in msg


def test_duplicate_id():
    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("s", B()).shuffle_grouping("s")
    assert "'s': duplicate component id" in _err(b)


@pytest.mark.parametrize("p", [0, -1, "2", 1.5])
def test_parallelism_must_be_a_positive_integer(p):
    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("count", B(), p).shuffle_grouping("s")
    msg = _err(b)
    assert "bolt 'count'" in msg and "parallelism" in msg


def test_direct_grouping_needs_a_direct_stream_and_back():
    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("d", B()).direct_grouping("s")
    assert "not declared direct" in _err(b)
    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("d", B()).shuffle_grouping("s", stream="targeted")
    assert "is direct; subscribe with direct_grouping" in _err(b)


def test_bolt_without_inputs_and_reserved_ids():
    b = TopologyBuilder()
    b.set_spout("s", S())
    b.set_bolt("lonely", B())
    assert "bolt 'lonely': has no inputs" in _err(b)
    with pytest.raises(TopologyError, match="reserved"):
        TopologyBuilder().set_bolt("__acker", B())
    with pytest.raises(TopologyError, match="reserved"):
        TopologyBuilder().set_spout("$checkpointspout", S())


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


# --- config ----------------------------------------------------------------------------------------
def test_config_defaults():
    c = resolve_config({})
    assert c["topology.message.timeout.secs"] == 30
    assert c["topology.enable.message.timeouts"] is True
    assert c["topology.acker.executors"] is None
    assert c["topology.max.spout.pending"] is None


def test_unknown_topology_key_is_an_error_naming_it():
    with pytest.raises(ConfigError, match="topology.mesage.timeout.secs"):
        resolve_config({"topology.mesage.timeout.secs": 5})


def test_storm_key_not_implemented_warns(caplog):
    with caplog.at_level(logging.WARNING):
        c = resolve_config({"topology.kryo.register": ["x"]})
    assert "topology.kryo.register" in caplog.text and c["topology.kryo.register"] == ["x"]


def test_user_keys_pass_through_unchanged():
    value = {"nested": [1, 2]}
    assert resolve_config({"my.app.setting": value})["my.app.setting"] is value


@pytest.mark.parametrize("key,value", [
    ("topology.workers", 0), ("topology.workers", "abc"), ("topology.message.timeout.secs", -1),
    ("topology.max.spout.pending", 0), ("topology.enable.message.timeouts", "maybe"),
    ("topology.state.provider", "zookeeper"), ("topology.acker.executors", 1.5),
])
def test_bad_values_name_the_key(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        resolve_config({key: value})
