"""TopologyBuilder.create_topology(): valid topologies are accepted, bad ones are rejected with a
message naming the component and the problem."""

from __future__ import annotations

import pytest

from topology_runtime import BasicBolt, Bolt, Spout, Stream, TopologyBuilder, TopologyError
from topology_runtime.api.builder import ALL, DIRECT, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE, NONE, SHUFFLE, Grouping


class WordSpout(Spout):
    outputs = ["word", "n"]


class MultiSpout(Spout):
    outputs = {"default": ["word", "n"], "side": ["x"], "targeted": Stream(["word"], direct=True)}


class Pass(BasicBolt):
    outputs = ["word"]


class Sink(Bolt):
    outputs = {}  # declares no streams


def _rejected(b: TopologyBuilder) -> str:
    with pytest.raises(TopologyError) as e:
        b.create_topology()
    return str(e.value)


def _base() -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("src", MultiSpout())
    return b


# --- rejections ------------------------------------------------------------------------------------
def test_grouping_on_unknown_component():
    b = _base()
    b.set_bolt("count", Pass()).shuffle_grouping("nope")
    msg = _rejected(b)
    assert "bolt 'count'" in msg
    assert "unknown component 'nope'" in msg


def test_grouping_on_unknown_stream():
    b = _base()
    b.set_bolt("count", Pass()).shuffle_grouping("src", stream="missing")
    msg = _rejected(b)
    assert "bolt 'count'" in msg
    assert "'src' declares no stream 'missing'" in msg
    assert "'default'" in msg and "'side'" in msg  # lists what is declared


def test_grouping_on_component_without_outputs():
    b = _base()
    b.set_bolt("sink", Sink()).shuffle_grouping("src")
    b.set_bolt("after", Pass()).shuffle_grouping("sink")
    msg = _rejected(b)
    assert "bolt 'after'" in msg and "no stream 'default'" in msg


def test_fields_grouping_on_undeclared_field():
    b = _base()
    b.set_bolt("count", Pass()).fields_grouping("src", ["wrod"])
    msg = _rejected(b)
    assert "bolt 'count'" in msg
    assert "field 'wrod' is not declared" in msg


def test_fields_grouping_checks_the_named_stream():
    b = _base()
    b.set_bolt("count", Pass()).fields_grouping("src", ["word"], stream="side")
    msg = _rejected(b)
    assert "bolt 'count'" in msg and "field 'word' is not declared" in msg


def test_fields_grouping_needs_a_field():
    b = _base()
    b.set_bolt("count", Pass()).fields_grouping("src", [])
    assert "needs at least one field" in _rejected(b)


@pytest.mark.parametrize("second", ["spout", "bolt"])
def test_duplicate_id(second):
    b = _base()
    b.set_bolt("dup", Pass()).shuffle_grouping("src")
    if second == "spout":
        b.set_spout("dup", WordSpout())
    else:
        b.set_bolt("dup", Pass()).shuffle_grouping("src")
    msg = _rejected(b)
    assert f"{second} 'dup': duplicate component id" in msg


@pytest.mark.parametrize("p", [0, "2", -1, 1.5, True, None])
def test_bad_bolt_parallelism(p):
    b = _base()
    b.set_bolt("count", Pass(), p).shuffle_grouping("src")
    msg = _rejected(b)
    assert f"bolt 'count': parallelism must be an integer >= 1, got {p!r}" in msg


@pytest.mark.parametrize("p", [0, "2"])
def test_bad_spout_parallelism_by_keyword(p):
    b = TopologyBuilder()
    b.set_spout("src", WordSpout(), parallelism=p)
    b.set_bolt("count", Pass()).shuffle_grouping("src")
    msg = _rejected(b)
    assert f"spout 'src': parallelism must be an integer >= 1, got {p!r}" in msg


def test_direct_grouping_on_a_stream_not_declared_direct():
    b = _base()
    b.set_bolt("d", Pass()).direct_grouping("src", stream="side")
    msg = _rejected(b)
    assert "bolt 'd'" in msg
    assert "stream 'side' is not declared direct" in msg


@pytest.mark.parametrize("grouping", ["shuffle_grouping", "global_grouping", "all_grouping",
                                      "local_or_shuffle_grouping", "none_grouping"])
def test_normal_grouping_on_a_direct_stream(grouping):
    b = _base()
    getattr(b.set_bolt("d", Pass()), grouping)("src", stream="targeted")
    msg = _rejected(b)
    assert "bolt 'd'" in msg
    assert "stream 'targeted' is direct; subscribe with direct_grouping" in msg


def test_fields_grouping_on_a_direct_stream():
    b = _base()
    b.set_bolt("d", Pass()).fields_grouping("src", ["word"], stream="targeted")
    assert "stream 'targeted' is direct" in _rejected(b)


def test_bolt_with_no_inputs():
    b = _base()
    b.set_bolt("lonely", Pass())
    msg = _rejected(b)
    assert "bolt 'lonely': has no inputs" in msg


@pytest.mark.parametrize("cid", ["__acker", "$x", "__system", "$checkpointspout"])
@pytest.mark.parametrize("kind", ["spout", "bolt"])
def test_reserved_ids(cid, kind):
    b = _base()
    with pytest.raises(TopologyError) as e:
        if kind == "spout":
            b.set_spout(cid, WordSpout())
        else:
            b.set_bolt(cid, Pass()).shuffle_grouping("src")
        b.create_topology()
    assert f"{kind} {cid!r}" in str(e.value)
    assert "reserved" in str(e.value)


@pytest.mark.parametrize("cid", ["", None, 3])
def test_id_must_be_a_non_empty_string(cid):
    with pytest.raises(TopologyError, match="id must be a non-empty string"):
        TopologyBuilder().set_bolt(cid, Pass())


def test_wrong_component_types_are_named():
    b = TopologyBuilder()
    b.set_spout("notspout", Pass())
    b.set_bolt("notbolt", object()).shuffle_grouping("notspout")
    msg = _rejected(b)
    assert "spout 'notspout': Pass is not a Spout" in msg
    assert "bolt 'notbolt': object is not a Bolt" in msg


def test_every_problem_is_reported_at_once():
    b = _base()
    b.set_bolt("a", Pass()).shuffle_grouping("ghost")
    b.set_bolt("c", Pass(), 0).fields_grouping("src", ["nope"])
    b.set_bolt("lonely", Pass())
    msg = _rejected(b)
    assert "bolt 'a'" in msg and "unknown component 'ghost'" in msg
    assert "bolt 'c': parallelism" in msg and "field 'nope'" in msg
    assert "bolt 'lonely': has no inputs" in msg


# --- acceptance ------------------------------------------------------------------------------------
def test_accepts_all_seven_groupings():
    b = _base()
    b.set_spout("words", WordSpout(), 2)
    b.set_bolt("shuffle", Pass(), 2).shuffle_grouping("words")
    b.set_bolt("fields", Pass(), 3).fields_grouping("words", ["word", "n"])
    b.set_bolt("global", Pass()).global_grouping("words")
    b.set_bolt("all", Pass()).all_grouping("words")
    b.set_bolt("direct", Pass()).direct_grouping("src", "targeted")
    b.set_bolt("local", Pass()).local_or_shuffle_grouping("shuffle")
    b.set_bolt("none", Sink()).none_grouping("fields")
    topo = b.create_topology()
    kinds = {c.id: [g.kind for g in c.inputs] for c in topo.bolts}
    assert kinds == {
        "shuffle": [SHUFFLE], "fields": [FIELDS], "global": [GLOBAL], "all": [ALL],
        "direct": [DIRECT], "local": [LOCAL_OR_SHUFFLE], "none": [NONE],
    }
    assert topo.components["fields"].inputs == [Grouping("words", "default", FIELDS, ("word", "n"))]
    assert topo.components["direct"].inputs == [Grouping("src", "targeted", DIRECT)]
    assert [s.id for s in topo.spouts] == ["src", "words"]
    assert list(topo.components) == ["src", "words", "shuffle", "fields", "global", "all", "direct",
                                     "local", "none"]


def test_accepts_named_streams_and_direct_stream_declarations():
    b = _base()
    b.set_bolt("side", Pass()).all_grouping("src", stream="side")
    b.set_bolt("tgt", Pass()).direct_grouping("src", stream="targeted")
    b.set_bolt("dflt", Pass()).fields_grouping("src", ["n"])
    topo = b.create_topology()
    streams = topo.components["src"].streams
    assert set(streams) == {"default", "side", "targeted"}
    assert streams["default"].fields == ["word", "n"] and not streams["default"].direct
    assert streams["targeted"].fields == ["word"] and streams["targeted"].direct
    assert topo.components["dflt"].streams["default"].fields == ["word"]


def test_chained_groupings_subscribe_to_each():
    b = _base()
    b.set_spout("b2", WordSpout())
    d = b.set_bolt("join", Pass())
    assert d.global_grouping("src").global_grouping("b2") is d
    d.shuffle_grouping("src", stream="side")
    topo = b.create_topology()
    assert topo.components["join"].inputs == [
        Grouping("src", "default", GLOBAL),
        Grouping("b2", "default", GLOBAL),
        Grouping("src", "side", SHUFFLE),
    ]


def test_parallelism_by_position_and_keyword():
    b = TopologyBuilder()
    b.set_spout("src", WordSpout(), parallelism=4)
    b.set_bolt("a", Pass(), 2).shuffle_grouping("src")
    b.set_bolt("b", Pass(), parallelism=3).shuffle_grouping("a")
    b.set_bolt("c", Pass()).shuffle_grouping("b")
    topo = b.create_topology()
    assert {c.id: c.parallelism for c in topo.components.values()} == {"src": 4, "a": 2, "b": 3, "c": 1}


def test_fields_grouping_refuses_a_bare_field_name():
    # Storm's API takes a Fields list: one name is written ["word"] (more in tests/test_names_unit.py).
    b = _base()
    with pytest.raises(TopologyError, match=r"fields_grouping\('src', ...\): fields must be a list of names, "
                                            r"got the string 'word' \(for one name write \['word'\]\)"):
        b.set_bolt("count", Pass()).fields_grouping("src", "word")


def test_bolt_to_bolt_cycle_is_allowed():
    b = _base()
    b.set_bolt("a", Pass()).shuffle_grouping("src").shuffle_grouping("b")
    b.set_bolt("b", Pass()).shuffle_grouping("a")
    topo = b.create_topology()
    assert [g.source for g in topo.components["a"].inputs] == ["src", "b"]


def test_templates_are_copied_per_instance():
    class Counter(BasicBolt):
        outputs = ["n"]

        def __init__(self) -> None:
            self.seen: list = []

    b = _base()
    tmpl = Counter()
    b.set_bolt("c", tmpl, 2).shuffle_grouping("src")
    spec = b.create_topology().components["c"]
    one, two = spec.new_instance(), spec.new_instance()
    one.seen.append(1)
    assert two.seen == [] and tmpl.seen == []
    assert isinstance(one, Counter) and one is not tmpl


def test_chunk_stream_declares_head_and_rows():
    assert Stream(["head", "rows"], direct=True, chunk=True).chunk
    with pytest.raises(ValueError, match=r"a chunk stream has two fields \(head, rows\), got \['rows'\]"):
        Stream(["rows"], direct=True, chunk=True)
