"""The DRPC function the end-to-end tests call, ``probe``: three stages whose behaviour the
request's args choose, ``MODE:K[:TOKEN]``.

    bolt0 Fan     (BasicBolt)  emits K tuples (id, i, mode)
    bolt1 Middle  (Bolt)       ok: passes (id, i) on; empty: emits nothing; fail: fails the tuple;
                               hold (args hold:K:TOKEN:PID): the first tuple of TOKEN that reaches
                               the worker PID ("*": any) is kept unacked and its pid recorded (a
                               worker to SIGKILL, a client timeout); the others pass on
    bolt2 Sum     (BatchBolt)  finish_batch emits (id, "COUNT/SUM")
"""

from __future__ import annotations

import os

from state.connection import connect
from topology_runtime import BasicBolt, Bolt
from topology_runtime.drpc import LinearDRPCTopologyBuilder
from topology_runtime.transactional import BatchBolt


class Fan(BasicBolt):
    outputs = ["id", "n", "mode"]

    def execute(self, tup):
        request, args = tup.values
        mode, k, *_ = args.split(":") + [""]
        for i in range(int(k)):
            self.emit([request, i, args])


class Middle(Bolt):
    outputs = ["id", "n"]

    def prepare(self, conf, context):
        self.redis = connect(conf["redis.url"])
        self.held = []

    def execute(self, tup):
        request, i, args = tup.values
        mode = args.split(":")[0]
        if mode == "fail":
            self.fail(tup)
            return
        if mode == "hold":
            _, _, token, pid = args.split(":")
            if pid in ("*", str(os.getpid())) and self.redis.set(f"probe:hold:{token}", os.getpid(), nx=True, ex=60):
                self.redis.rpush(f"probe:held:{token}", os.getpid())
                self.held.append(tup)  # never acked: its tree times out or its worker dies
                return
        if mode != "empty":
            self.emit([request, i], anchors=tup)
        self.ack(tup)


class Sum(BatchBolt):
    outputs = ["id", "result"]

    def prepare(self, conf, context, batch_id):
        self.id, self.count, self.total = batch_id, 0, 0

    def execute(self, tup):
        self.count += 1
        self.total += tup.values[1]

    def finish_batch(self):
        self.emit([self.id, f"{self.count}/{self.total}"])


def probe_topology():
    b = LinearDRPCTopologyBuilder("probe")
    b.add_bolt(Fan(), 2)
    b.add_bolt(Middle(), 4).shuffle_grouping()
    b.add_bolt(Sum(), 2).fields_grouping(["id"])
    return b.create_topology()


class Record(Bolt):
    """Appends ``ID=VALUE`` of each input to the list ``conf['test.key']``."""

    outputs: list = []

    def prepare(self, conf, context):
        self.redis, self.key = connect(conf["redis.url"]), conf["test.key"]

    def execute(self, tup):
        self.redis.rpush(self.key, f"{tup.values[0]}={tup.values[1]}")
        self.ack(tup)


# --- delegates of the CoordinatedBolt tests (tests/test_drpc_unit.py, an ordinary topology) --------
class CreateTuples(BasicBolt):
    """First stage: the request's args say how many tuples to emit (DRPCIntegrationTest)."""

    outputs = ["id", "n"]

    def execute(self, tup):
        for i in range(int(tup.values[1])):
            self.emit([tup.values[0], i])


class PassOn(Bolt):
    outputs = ["id", "n"]

    def execute(self, tup):
        self.emit(list(tup.values), anchors=tup)
        self.ack(tup)


class CountBatch(BatchBolt):
    outputs = ["id", "count"]

    def prepare(self, conf, context, batch_id):
        self.id, self.n = batch_id, 0

    def execute(self, tup):
        self.n += 1

    def finish_batch(self):
        self.emit([self.id, self.n])
