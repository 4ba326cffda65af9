"""KafkaSpout through faults and rebalances against the test broker (Tansu,
tests/kafka_broker.py), every record tallied by partition and offset: a SIGKILLed spout worker
and a SIGKILLed bolts' worker (nothing lost, re-reads only past the committed offsets), a run
stopped part-way and resumed from its committed offsets (re-reads only what was uncommitted), and
a second member joining the group while acks are pending (the revoked partition's late acks are
not committed by the old member, nothing lost)."""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis
from kafka_broker import FAST_GROUP

from topology_runtime import BasicBolt, LocalCluster, TopologyBuilder, TopologyContext
from topology_runtime.connectors import KafkaSpout
from topology_runtime.testing import wait_for

pytestmark = pytest.mark.slow  # a broker, consumer groups forming, SIGKILLs

RECORDS = 4000


class _Tally(BasicBolt):
    """Counts each record it is given, by partition and offset (Redis hash ``tally.key``),
    before the record is acked."""

    outputs: list[str] = []

    def prepare(self, conf, context):
        self.client = redis.Redis.from_url(conf["redis.url"])
        self.key, self.pause = conf["tally.key"], conf.get("tally.pause", 0.0)

    def execute(self, tup):
        if self.pause:
            time.sleep(self.pause)  # so that a fault lands mid-run
        self.client.hincrby(self.key, f"{tup['partition']}:{tup['offset']}", 1)


def _tally_topology(topic: str, servers: str, group: str, bounded: bool = True):
    b = TopologyBuilder()
    b.set_spout("records", KafkaSpout([topic], servers, group, fields=["partition", "offset"], bounded=bounded,
                                      consumer_conf=FAST_GROUP), 1)
    b.set_bolt("tally", _Tally(), 2).shuffle_grouping("records")
    return b.create_topology()


def _tallied(client: redis.Redis, key: str) -> dict[tuple[int, int], int]:
    out = {}
    for k, n in client.hgetall(key).items():
        p, o = k.decode().split(":")
        out[(int(p), int(o))] = int(n)
    return out


def _produce(kafka, topic: str) -> dict[int, int]:
    """RECORDS records over two partitions; their number per partition."""
    kafka.create_topic(topic, 2)
    kafka.produce(topic, [(None, f"r{i}") for i in range(RECORDS // 2)], partition=0)
    kafka.produce(topic, [(None, f"r{i}") for i in range(RECORDS // 2, RECORDS)], partition=1)
    return {0: RECORDS // 2, 1: RECORDS // 2}


def _committed(kafka, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, 0 where none (it starts at the earliest record there)."""
    return {p: max(o, 0) for p, o in kafka.committed(group, topic).items()}


def _every_record(sizes: dict[int, int]) -> set[tuple[int, int]]:
    return {(p, o) for p, n in sizes.items() for o in range(n)}


@pytest.mark.parametrize("victim", ["spout", "bolts"])
def test_a_sigkilled_worker_loses_nothing_and_rereads_only_past_the_committed_offsets(kafka, redis_url, victim):
    """The spout's worker: its restarted task resumes from the group's committed offsets (the
    first record not committed) and replays what was read after them. The bolts' worker: the
    spout replays the tuples it lost from memory. Either way every record is counted, and none
    below the offsets committed before the kill is counted twice."""
    topic = group = f"kill-{victim}"
    sizes = _produce(kafka, topic)
    key = f"tally:{topic}"
    client = redis.Redis.from_url(redis_url)
    client.delete(key)
    conf = {"redis.url": redis_url, "tally.key": key, "tally.pause": 0.001, "topology.message.timeout.secs": 3,
            "topology.max.spout.pending": 200}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit(f"kafka-{topic}", _tally_topology(topic, kafka.servers, group), conf)
        plan = run.plan
        spout_worker = plan.task_worker[plan.component_tasks["records"][0]]
        assert wait_for(lambda: sum(_committed(kafka, group, topic).values()) >= 500, 60), run.status()
        before = _committed(kafka, group, topic)  # at most what is committed at the kill
        index = spout_worker if victim == "spout" else next(i for i in run.pids if i != spout_worker)
        os.kill(run.pids[index], signal.SIGKILL)
        status = run.wait(180)
    assert status.state == "completed", status.error
    assert status.restarts >= 1
    tally = _tallied(client, key)
    assert set(tally) == _every_record(sizes)  # nothing lost
    twice = {r for r, n in tally.items() if n > 1}
    assert all(o >= before[p] for p, o in twice), (before, sorted(twice)[:10])  # committed: never again
    if victim == "spout":
        assert twice  # what was counted and not committed yet, read again by the restarted task
    else:
        assert status.components["records"].replayed > 0  # from the spout's memory
    assert kafka.committed(group, topic) == sizes  # at the end, past every record


def test_a_run_stopped_part_way_resumes_from_its_committed_offsets_and_rereads_only_what_was_uncommitted(
        kafka, redis_url):
    topic = group = "stop-resume"
    sizes = _produce(kafka, topic)
    client = redis.Redis.from_url(redis_url)
    client.delete("tally:stop-1", "tally:stop-2")
    conf = {"redis.url": redis_url, "tally.key": "tally:stop-1", "tally.pause": 0.001,
            "topology.max.spout.pending": 100}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("kafka-stop-1", _tally_topology(topic, kafka.servers, group, bounded=False), conf)
        assert wait_for(lambda: sum(_committed(kafka, group, topic).values()) >= 500, 60), run.status()
        assert run.kill().state == "killed"
    committed = _committed(kafka, group, topic)
    assert 0 < sum(committed.values()) < RECORDS, committed  # stopped part-way, after commits
    first = _tallied(client, "tally:stop-1")
    below = {(p, o) for p, o in _every_record(sizes) if o < committed[p]}
    assert below <= set(first)  # committed only once counted
    # A new group seeded with the offsets: Tansu keeps the stopped member as the old group's leader.
    kafka.seed_group(f"{group}-2", topic, committed)
    conf["tally.key"] = "tally:stop-2"
    with LocalCluster(workers=2) as cluster:
        again = cluster.run("kafka-stop-2", _tally_topology(topic, kafka.servers, f"{group}-2"), conf, timeout=120)
    assert again.state == "completed", again.error
    second = _tallied(client, "tally:stop-2")
    uncommitted = _every_record(sizes) - below
    assert again.components["records"].emitted == len(uncommitted) < RECORDS  # re-reads nothing committed
    assert second == dict.fromkeys(uncommitted, 1)
    assert set(first) | set(second) == _every_record(sizes)  # nothing lost between the runs
    assert set(first) & set(second) <= uncommitted  # read twice: only what the stop left uncommitted


def test_a_member_joining_mid_run_revokes_a_partition_whose_late_acks_the_old_member_does_not_commit(kafka):
    """The spout driven directly as one member; a plain consumer joins the group while records
    of both partitions are in flight. The partition it takes was committed by the spout as far as
    acked at the revoke; acks that come later do not move that partition's offset, and the new
    owner reads on from it, so every record is processed at least once."""
    from confluent_kafka import Consumer

    topic = group = "rebalance"
    sizes = _produce(kafka, topic)
    spout = KafkaSpout([topic], kafka.servers, group, fields=["partition", "offset"], batch_size=50,
                       commit_interval_ms=100, consumer_conf=FAST_GROUP)
    emitted: list[tuple] = []
    spout.emit = lambda values, msg_id=None, stream="default": emitted.append(tuple(msg_id))
    spout.fail_run = pytest.fail
    spout.open({}, TopologyContext(1, "records", 0, {"records": [1]}, "rebalance"))
    processed: set[tuple[int, int]] = set()

    def ack(key: tuple) -> None:
        spout.ack(key)
        processed.add((key[1], key[2]))

    member: Consumer | None = None
    try:
        # Both partitions read, a prefix of each acked and committed, the rest in flight.
        assert wait_for(lambda: spout.next_tuple() or {k[1] for k in emitted} == {0, 1}, 30)
        for p in (0, 1):
            for key in [k for k in emitted if k[1] == p][:20]:
                ack(key)
        assert wait_for(lambda: spout.next_tuple() or kafka.committed(group, topic) == {0: 20, 1: 20}, 10)
        in_flight = [k for k in emitted if (k[1], k[2]) not in processed]
        assert {k[1] for k in in_flight} == {0, 1}
        # A second member joins: librdkafka revokes the spout's partitions inside consume.
        taken: list[int] = []
        member = Consumer({"bootstrap.servers": kafka.servers, "group.id": group, "enable.auto.commit": False,
                           **FAST_GROUP})
        member.subscribe([topic], on_assign=lambda c, ps: taken.extend(p.partition for p in ps))

        def both_assigned() -> bool:
            spout.next_tuple()
            member.poll(0.05)
            return bool(taken) and bool(spout._assigned)
        assert wait_for(both_assigned, 60), (taken, spout._assigned)
        assert spout.revoked >= 1 and len(taken) == 1
        moved = taken[0]
        at_revoke = kafka.committed(group, topic)[moved]
        assert at_revoke == 20  # committed as far as acked when it was revoked
        for key in in_flight:  # the acks that were pending come now, late for the moved partition
            ack(key)
        kept = 1 - moved
        while (kept, sizes[kept] - 1) not in processed:  # the spout reads its partition on to the end
            spout.next_tuple()
            for key in [k for k in emitted if k[1] == kept and (k[1], k[2]) not in processed]:
                ack(key)
        spout.close()
        assert kafka.committed(group, topic)[moved] == at_revoke  # the late acks went nowhere
        # The new owner reads on from the committed offset: together, every record once at least.
        while len(processed) < RECORDS:
            m = member.poll(1.0)
            assert m is not None, f"the new owner stopped at {len(processed)} records"
            if m.error() is None:
                o = m.offset()
                assert m.partition() == moved and o is not None and o >= at_revoke
                processed.add((moved, o))
        assert processed == _every_record(sizes)
    finally:
        if spout._consumer is not None:
            spout.close()
        if member is not None:
            member.close()
