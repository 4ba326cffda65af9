"""Multi-anchoring: a streaming join of orders and payments.

Two reliable spouts emit orders and payments; the join bolt (fields-grouped on order_id) holds
each side until its partner arrives, then emits the joined tuple anchored to BOTH inputs and
acks them. If the joined tuple fails downstream, both the order and the payment are replayed.

    python examples/join.py
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from topology_runtime import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder  # noqa: E402


class ListSpout(Spout):
    """Emits a fixed list reliably: replays on fail, finishes when everything is acked."""

    def __init__(self, fields: list[str], rows: list[list]) -> None:
        self.outputs = list(fields)
        self.rows = rows

    def open(self, conf, context):
        mine = range(context.task_index, len(self.rows), context.parallelism)
        self.todo = list(mine)[::-1]
        self.pending: set[int] = set()

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop()
            self.pending.add(i)
            self.emit(self.rows[i], msg_id=i)
        elif not self.pending:
            self.finish()

    def ack(self, msg_id):
        self.pending.discard(msg_id)

    def fail(self, msg_id):
        self.todo.append(msg_id)


class JoinBolt(Bolt):
    outputs = ["order_id", "item", "amount"]

    def prepare(self, conf, context):
        self.orders: dict = {}
        self.payments: dict = {}

    def execute(self, tup):
        oid = tup["order_id"]
        if tup.source_component == "orders":
            other = self.payments.pop(oid, None)
            if other is None:
                self.orders[oid] = tup
                return
            order, payment = tup, other
        else:
            other = self.orders.pop(oid, None)
            if other is None:
                self.payments[oid] = tup
                return
            order, payment = other, tup
        # One output in two tuple trees: it completes only when both spout tuples' trees do.
        self.emit([oid, order["item"], payment["amount"]], anchors=[order, payment])
        self.ack(order)
        self.ack(payment)


class Totals(BasicBolt):
    outputs = ["item", "revenue"]

    def prepare(self, conf, context):
        self.revenue: dict[str, float] = {}

    def execute(self, tup):
        self.revenue[tup["item"]] = self.revenue.get(tup["item"], 0.0) + tup["amount"]
        self.emit([tup["item"], self.revenue[tup["item"]]])


def build(n_orders: int = 1000):
    items = ["book", "pen", "lamp", "mug"]
    orders = [[i, items[i % len(items)]] for i in range(n_orders)]
    payments = [[i, float(1 + i % 7)] for i in reversed(range(n_orders))]  # arrive in the other order
    builder = TopologyBuilder()
    builder.set_spout("orders", ListSpout(["order_id", "item"], orders), 1)
    builder.set_spout("payments", ListSpout(["order_id", "amount"], payments), 1)
    builder.set_bolt("join", JoinBolt(), 2) \
        .fields_grouping("orders", ["order_id"]).fields_grouping("payments", ["order_id"])
    builder.set_bolt("totals", Totals(), 1).fields_grouping("join", ["item"])
    return builder.create_topology()


def topology():
    return build()


def main() -> int:
    with LocalCluster(workers=2) as cluster:
        status = cluster.run("join-example", build(), timeout=120)
    print(status.table())
    ok = status.components["orders"].acked == 1000 and status.components["payments"].acked == 1000
    print("every order and payment acked after its join completed" if ok else "INCOMPLETE")
    return 0 if ok and status.state == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
