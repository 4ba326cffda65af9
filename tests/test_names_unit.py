"""Every public entry point that takes a list of names (fields, streams, stream keys, components,
commit kinds) refuses a bare string, naming the argument, instead of reading it as one name per
character (``"word"`` -> ``['w', 'o', 'r', 'd']``). Storm's API takes a ``Fields`` object;
here a list, and one name is written ``["word"]``. In process, no services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from topology_runtime import Bolt, Stream, TopologyBuilder
from topology_runtime.testing import FixedTupleSpout


class _Words(FixedTupleSpout):
    def __init__(self) -> None:
        super().__init__([["a b"]], ["sentence"])


class _Pass(Bolt):
    outputs = ["word"]

    def execute(self, tup):
        pass


def _builder() -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("src", _Words())
    return b


def _outputs_as_a_string() -> Any:
    class OneString(Bolt):
        outputs = {"default": "word"}  # a stream whose fields are a string

        def execute(self, tup):
            pass

    b = _builder()
    b.set_bolt("one", OneString()).shuffle_grouping("src")
    return b.create_topology()


def _transactional() -> Any:
    from topology_runtime.transactional import TransactionalTopologyBuilder
    from topology_runtime.transactional.spouts import MemoryTransactionalSpout

    b = TransactionalTopologyBuilder("names", "spout", MemoryTransactionalSpout({0: [["a"]]}, ["word"], 1))
    return b.set_bolt("count", _Pass()).fields_grouping("spout", "word")


def _drpc() -> Any:
    from topology_runtime.drpc import LinearDRPCTopologyBuilder

    return LinearDRPCTopologyBuilder("names").add_bolt(_Pass()).fields_grouping("id")


def _coordinated() -> Any:
    from topology_runtime.coordination.bolt import CoordinatedBolt

    return CoordinatedBolt(_Pass(), sources={"up": "all"}, downstream="next")


def _trident_tuple(of: bool) -> Any:
    from topology_runtime.trident import TridentTuple

    return TridentTuple.of("word", ["w", "o", "r", "d"]) if of else TridentTuple("word", [0])


def _trident_stream(op: str) -> Any:
    from topology_runtime.trident import Count, FixedBatchSpout, TridentTopology

    s = TridentTopology().new_stream("names", FixedBatchSpout(["word", "n"], 2, [["a", 1]]))
    return {"each": lambda: s.each("word", lambda t, c: None, ["out"]),
            "group_by": lambda: s.group_by("word"),
            "project": lambda: s.project("word"),
            "partition_by": lambda: s.partition_by("word"),
            "aggregate": lambda: s.aggregate(Count(), "count")}[op]()


def _connector(kind: str) -> Any:
    from topology_runtime import connectors as c

    return {"transactional streams": lambda: c.RedisStreamsTransactionalSpout("sentences", ["sentence"]),
            "transactional fields": lambda: c.RedisStreamsTransactionalSpout(["sentences"], "sentence"),
            "stream spout": lambda: c.RedisStreamSpout("s", fields="sentence"),
            "replay spout": lambda: c.RedisStreamReplaySpout("s", fields="sentence")}[kind]()


def _assets(which: str) -> Any:
    from topology_airflow.assets import TopologyCommitTrigger, topology_asset

    if which == "trigger":
        return TopologyCommitTrigger("wordcount", "redis://127.0.0.1:1/0", kinds="checkpoint")
    return topology_asset("committed", "wordcount", "redis://127.0.0.1:1/0", kinds="checkpoint")


# (entry point, what it says before the argument, the argument, the string given)
CASES: list[tuple[str, Callable[[], Any], str, str]] = [
    ("Stream", lambda: Stream("word"), "Stream: fields", "word"),
    ("a component's outputs", _outputs_as_a_string, "component 'one': outputs['default']", "word"),
    ("TopologyBuilder.fields_grouping",
     lambda: _builder().set_bolt("b", _Pass()).fields_grouping("src", "sentence"),
     "bolt 'b': fields_grouping('src', ...): fields", "sentence"),
    ("TopologyBuilder.partial_key_grouping",
     lambda: _builder().set_bolt("b", _Pass()).partial_key_grouping("src", "sentence"),
     "bolt 'b': partial_key_grouping('src', ...): fields", "sentence"),
    ("TransactionalTopologyBuilder fields_grouping", _transactional,
     "bolt 'count': fields_grouping('spout', ...): fields", "word"),
    ("LinearDRPCInputDeclarer.fields_grouping", _drpc, "LinearDRPCInputDeclarer.fields_grouping: fields", "id"),
    ("FixedTupleSpout", lambda: FixedTupleSpout([["a"]], "word"), "FixedTupleSpout: fields", "word"),
    ("CoordinatedBolt", _coordinated, "CoordinatedBolt: downstream", "next"),
    ("TridentTuple", lambda: _trident_tuple(False), "TridentTuple: fields", "word"),
    ("TridentTuple.of", lambda: _trident_tuple(True), "TridentTuple: fields", "word"),
    ("MemoryTransactionalSpout", lambda: __import__("topology_runtime.transactional.spouts", fromlist=["x"])
     .MemoryTransactionalSpout({0: [["a"]]}, "word", 1), "MemoryTransactionalSpout: fields", "word"),
    ("FixedBatchSpout", lambda: __import__("topology_runtime.trident", fromlist=["x"])
     .FixedBatchSpout("word", 2, [["a"]]), "FixedBatchSpout: fields", "word"),
    *[(f"Trident {op}", lambda op=op: _trident_stream(op), f"{op}: ", arg)
      for op, arg in (("each", "word"), ("group_by", "word"), ("project", "word"), ("partition_by", "word"),
                      ("aggregate", "count"))],
    ("RedisStreamsTransactionalSpout streams", lambda: _connector("transactional streams"),
     "RedisStreamsTransactionalSpout: streams (the stream keys, one per partition)", "sentences"),
    ("RedisStreamsTransactionalSpout fields", lambda: _connector("transactional fields"),
     "RedisStreamsTransactionalSpout: fields", "sentence"),
    ("RedisStreamSpout", lambda: _connector("stream spout"), "RedisStreamSpout('s'): fields", "sentence"),
    ("RedisStreamReplaySpout", lambda: _connector("replay spout"), "RedisStreamReplaySpout('s'): fields", "sentence"),
    ("TopologyCommitTrigger", lambda: _assets("trigger"), "TopologyCommitTrigger: kinds", "checkpoint"),
    ("topology_asset", lambda: _assets("asset"), "topology_asset: kinds", "checkpoint"),
]


@pytest.mark.parametrize(("make", "where", "value"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bare_string_where_a_list_of_names_goes_is_refused_naming_the_argument(make, where, value):
    with pytest.raises(ValueError) as e:
        make()
    text = str(e.value)
    assert where in text and f"must be a list of names, got the string {value!r}" in text, text


def test_the_list_forms_are_accepted():
    b = _builder()
    b.set_bolt("b", _Pass()).fields_grouping("src", ["sentence"]).partial_key_grouping("src", ("sentence",))
    topo = b.create_topology()
    assert [g.fields for g in topo.components["b"].inputs] == [("sentence",), ("sentence",)]
    assert FixedTupleSpout([["a"]], ("word",)).outputs == ["word"]


def test_a_grouping_on_no_fields_is_still_reported_with_every_other_problem():
    from topology_runtime import TopologyError

    b = _builder()
    b.set_bolt("b", _Pass()).fields_grouping("src", [])
    b.set_bolt("c", _Pass(), parallelism=0).shuffle_grouping("src")
    with pytest.raises(TopologyError) as e:
        b.create_topology()
    assert "fields grouping needs at least one field" in str(e.value) and "parallelism" in str(e.value)


@pytest.mark.parametrize("tuples", ["ab", ["ab", "cd"]])
def test_fixed_tuple_spout_refuses_strings_where_value_lists_go(tuples):
    with pytest.raises(ValueError, match="FixedTupleSpout: tuples must be a list of value lists"):
        FixedTupleSpout(tuples, ["word"])


def test_commit_kinds_are_checked():
    from topology_airflow.assets import TopologyCommitTrigger

    with pytest.raises(ValueError, match=r"TopologyCommitTrigger: kinds must be among \['checkpoint', "
                                         r"'transactional'\], got \['checkpoints'\]"):
        TopologyCommitTrigger("wordcount", kinds=["checkpoints"])
    assert TopologyCommitTrigger("wordcount", kinds=("transactional",)).kinds == ["transactional"]


def test_coordinated_bolt_id_stream_is_a_pair():
    from topology_runtime.coordination.bolt import CoordinatedBolt

    with pytest.raises(ValueError, match=r"id_stream must be a \(component, stream\) pair, got 'id'"):
        CoordinatedBolt(_Pass(), id_stream="id")
