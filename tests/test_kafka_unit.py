"""The Kafka connectors' rules without a broker: which offsets may be committed (a fully acked
prefix, a commit done only once the broker confirmed it), the spout driven through a stand-in
consumer (a failed asynchronous commit sent again, close committing what was not confirmed, a
revoked partition's late acks committed nowhere, a given-up record without a Redis logged and
dropped, a failing deserializer named with its record), and what the constructors refuse."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from topology_runtime import TopologyContext
from topology_runtime.connectors import (
    KafkaOpaqueTransactionalSpout,
    KafkaSpout,
    KafkaTransactionalSpout,
)
from topology_runtime.connectors.kafka_offsets import OffsetManager


def test_offsets_commit_only_past_a_fully_acked_prefix():
    m = OffsetManager()
    tp = ("t", 0)
    for o in range(10, 15):
        m.emitted(tp, o)
    assert m.to_commit() == {tp: 10}  # nothing acked: the first pending
    for o in (11, 12, 14):  # out of order
        m.acked(tp, o)
    assert m.to_commit() == {tp: 10}  # 10 still pending: a crash replays from it
    m.acked(tp, 10)
    assert m.to_commit() == {tp: 13}
    m.committed({tp: 13})
    assert m.to_commit() == {}  # nothing new
    m.acked(tp, 13)
    assert m.to_commit() == {tp: 15}  # every emitted record acked: one past the last
    m.revoke(tp)
    assert not m.acked(tp, 20) and m.to_commit() == {}  # a revoked partition's late acks go nowhere


def test_a_commit_counts_only_once_confirmed_and_a_failed_one_is_sent_again():
    m = OffsetManager()
    tp = ("t", 0)
    for o in range(5):
        m.emitted(tp, o)
        m.acked(tp, o)
    m.sent({tp: 5})
    assert m.to_commit() == {}  # on its way: not sent twice
    assert m.to_commit(resend=True) == {tp: 5}  # a synchronous commit (close) takes it all the same
    m.commit_failed({tp: 5})
    assert m.to_commit() == {tp: 5}  # failed: sent again without any new ack
    m.sent({tp: 5})
    m.emitted(tp, 5)
    m.acked(tp, 5)
    m.sent({tp: 6})
    m.commit_failed({tp: 5})  # an older commit failing after a newer one went out changes nothing
    m.committed({tp: 6})
    assert m.to_commit(resend=True) == {}
    m.committed({tp: 5})  # a late confirmation never moves a partition back
    assert m.partitions[tp].committed == 6


# --- KafkaSpout's commits, through a stand-in consumer ----------------------------------------------


class _Msg:
    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        self._t, self._p, self._o, self._v = topic, partition, offset, value

    def error(self):
        return None

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def key(self):
        return None

    def value(self):
        return self._v

    def timestamp(self):
        return (1, 0)


class _Consumer:
    """What KafkaSpout calls on confluent_kafka.Consumer; commits are recorded, never answered
    unless the test calls ``on_commit`` (librdkafka serves that callback inside consume)."""

    def __init__(self, conf: dict) -> None:
        self.conf = conf
        self.on_commit = conf["on_commit"]
        self.queue: list[_Msg] = []
        self.commits: list[tuple[dict, bool]] = []

    def list_topics(self, topic=None, timeout=None):
        parts = SimpleNamespace(error=None, partitions={0: None, 1: None})
        return SimpleNamespace(topics={"t": parts})

    def subscribe(self, topics, on_assign=None, on_revoke=None):
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def consume(self, n, timeout=None):
        out, self.queue = self.queue[:n], self.queue[n:]
        return out

    def commit(self, offsets, asynchronous=True):
        self.commits.append(({(tp.topic, tp.partition): tp.offset for tp in offsets}, asynchronous))
        return None if asynchronous else offsets

    def close(self):
        self.closed = True


def _tps(points: dict):
    from confluent_kafka import TopicPartition

    return [TopicPartition(t, p, o) for (t, p), o in points.items()]


@pytest.fixture
def spout(monkeypatch):
    import confluent_kafka

    monkeypatch.setattr(confluent_kafka, "Consumer", _Consumer)
    s = KafkaSpout(["t"], "broker:9092", "g", fields=["value"], commit_interval_ms=0)
    s.emitted = []
    s.emit = lambda values, msg_id=None, stream="default": s.emitted.append(tuple(msg_id))
    s.open({}, TopologyContext(1, "src", 0, {"src": [1]}, "topo"))
    c = s._consumer
    c.on_assign(c, _tps({("t", 0): 0, ("t", 1): 0}))
    return s


def test_a_failed_async_commit_is_sent_again_without_new_acks(spout):
    c = spout._consumer
    c.queue = [_Msg("t", 0, o, b"x") for o in range(3)]
    spout.next_tuple()  # emits, and commits the first pending offset (0)
    for key in spout.emitted:
        spout.ack(key)
    spout.next_tuple()
    assert c.commits[-1] == ({("t", 0): 3}, True)
    n = len(c.commits)
    spout.next_tuple()
    assert len(c.commits) == n  # on its way: not sent again
    c.on_commit(None, [SimpleNamespace(topic="t", partition=0, offset=3, error="REQUEST_TIMED_OUT")])
    spout.next_tuple()
    assert c.commits[n:] == [({("t", 0): 3}, True)]  # no new ack, sent again
    c.on_commit(None, _tps({("t", 0): 3}))
    spout.next_tuple()
    spout.close()
    assert len(c.commits) == n + 1  # confirmed: nothing left to commit, at close neither


def test_close_commits_synchronously_what_the_broker_did_not_confirm(spout):
    c = spout._consumer
    c.queue = [_Msg("t", 1, o, b"x") for o in range(4)]
    spout.next_tuple()
    for key in spout.emitted[:2]:
        spout.ack(key)
    spout.next_tuple()
    assert c.commits[-1] == ({("t", 1): 2}, True)  # sent, never answered
    spout.close()
    assert c.commits[-1] == ({("t", 1): 2}, False)  # the last acked prefix, for sure this time


def test_a_revoked_partition_is_committed_as_far_as_acked_and_its_late_acks_go_nowhere(spout):
    c = spout._consumer
    c.queue = [_Msg("t", 0, o, b"x") for o in range(3)] + [_Msg("t", 1, o, b"y") for o in range(3)]
    spout.next_tuple()
    p0 = [k for k in spout.emitted if k[1] == 0]
    p1 = [k for k in spout.emitted if k[1] == 1]
    spout.ack(p0[0])
    spout.ack(p1[0])
    c.commits.clear()
    c.on_revoke(c, _tps({("t", 0): -1001}))
    assert c.commits == [({("t", 0): 1}, False)]  # synchronously, as far as acked
    assert spout.revoked == 1
    for key in p0[1:] + p1[1:]:
        spout.ack(key)  # p0's acks come after the revoke: its new owner replays them
    spout.next_tuple()
    spout.close()
    committed = {tp: o for points, _sync in c.commits[1:] for tp, o in points.items()}
    assert committed == {("t", 1): 3}, c.commits


def test_without_a_redis_a_given_up_record_is_logged_and_dropped_and_the_offsets_move_past_it(spout, caplog):
    spout.max_fails = 0
    c = spout._consumer
    c.queue = [_Msg("t", 0, 0, b"poison"), _Msg("t", 0, 1, b"fine")]
    spout.next_tuple()
    spout.ack(("t", 0, 1))
    with caplog.at_level(logging.ERROR, logger="topology_runtime.connectors.kafka"):
        spout.fail(("t", 0, 0))
    assert spout.dead_lettered == 1
    assert "gave up on" in caplog.text and "'poison'" in caplog.text and "dropped" in caplog.text
    spout.close()
    assert c.commits[-1] == ({("t", 0): 2}, False)


def test_a_failing_deserializer_ends_the_run_naming_it_and_the_record(spout):
    failed: list[str] = []
    spout.fail_run = failed.append
    spout.deserializer = json.loads
    spout._consumer.queue = [_Msg("t", 1, 7, b"not json")]
    with pytest.raises(ValueError):
        spout.next_tuple()
    assert failed and failed[0].startswith("KafkaSpout in component 'src': deserializer loads failed on "
                                           "topic 't' partition 1 offset 7: JSONDecodeError"), failed


@pytest.mark.parametrize("cls", [KafkaTransactionalSpout, KafkaOpaqueTransactionalSpout])
def test_a_transactional_spouts_deserializer_error_names_it_and_the_record(cls):
    from topology_runtime.transactional import BatchCannotSucceed

    spout = cls(["t"], "broker:9092", fields=["value"], deserializer=json.loads)
    with pytest.raises(BatchCannotSucceed) as e:  # no attempt can succeed: the run ends at once
        spout._row(_Msg("t", 2, 41, b"{"))
    assert str(e.value).startswith(f"{cls.__name__}(['t']): deserializer loads failed on topic 't' partition 2 "
                                   f"offset 41: JSONDecodeError"), e.value


# --- what the constructors refuse ----------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda **kw: KafkaSpout(["t"], "b:9092", "g", **kw),
    lambda **kw: KafkaTransactionalSpout(["t"], "b:9092", **kw),
    lambda **kw: KafkaOpaqueTransactionalSpout(["t"], "b:9092", **kw),
], ids=["KafkaSpout", "KafkaTransactionalSpout", "KafkaOpaqueTransactionalSpout"])
def test_the_spouts_refuse_a_bare_string_or_an_unknown_field(make):
    with pytest.raises(ValueError, match=r"fields must be a list of names, got the string 'value' "
                                         r"\(for one name write \['value'\]\)"):
        make(fields="value")  # not read as the fields 'v', 'a', 'l', ...
    with pytest.raises(ValueError, match=r"fields \['headers'\] are not record fields"):
        make(fields=["value", "headers"])
    with pytest.raises(ValueError, match="start must be 'earliest' or 'latest'"):
        make(start="beginning")
    assert make(fields=("key", "value", "offset")).fields == ["key", "value", "offset"]


@pytest.mark.parametrize("cls", [KafkaSpout, KafkaTransactionalSpout, KafkaOpaqueTransactionalSpout])
def test_the_spouts_refuse_a_bare_string_of_topics(cls):
    args = ("b:9092", "g") if cls is KafkaSpout else ("b:9092",)
    with pytest.raises(ValueError, match="topics must be a list of names"):
        cls("sentences", *args)
