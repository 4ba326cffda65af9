"""The ports of a live run against an attacker without the run's secret (its sockets are
CurveZMQ endpoints: a stranger never completes the handshake): a flood of junk, a client taking
a worker's identity, oversized messages; and replayed messages from one that has the keys. The
run must keep going, stay killable, and no worker may restart. The MAC mode (encryption off)
keeps its own checks."""

from __future__ import annotations

import time

import psutil
import pytest
import zmq

from topology_runtime import BasicBolt, LocalCluster, Spout, TopologyBuilder
from topology_runtime.testing import wait_for
from topology_runtime.transport.messages import Fatal, Hello, Peers, Probe, Ready
from topology_runtime.transport.sockets import _HEADER, DataTransport, curve_client, pack

pytestmark = pytest.mark.slow  # attacks on live runs' ports: not in make test-fast


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context):
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.emit([self.n], msg_id=self.n)
        time.sleep(0.001)


class Pass(BasicBolt):
    outputs = ["n"]

    def execute(self, tup):
        self.emit([tup[0]])


def _topology():
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("pass", Pass(), 2).shuffle_grouping("numbers")
    return b.create_topology()


def _acked(run) -> int:
    return run.status().components["numbers"].acked


@pytest.fixture
def live_run():
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("attacked", _topology(), {"topology.transfer.max.message.bytes": 8 << 20})
        assert wait_for(lambda: run.status().state == "running" and _acked(run) > 50, timeout=30)
        yield run
        status = run.kill(timeout=30)  # still killable after every attack
        assert status.state == "killed"
        assert status.restarts == 0, "a worker restarted"


def _keeps_going(run) -> None:
    before = _acked(run)
    assert wait_for(lambda: _acked(run) > before + 50, timeout=15), "the run stopped making progress"
    assert run.status().state == "running"


def _send(sock, frames) -> None:
    """A stranger's socket never completes the handshake, so it would block: never wait."""
    try:
        sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
    except zmq.Again:
        pass


def _tcp_junk(address: str, total: int) -> int:
    """Write ``total`` bytes of junk (a fake greeting, then a huge frame header and filler)
    straight to a zmq port over TCP; returns how many bytes the port took before hanging up."""
    import socket

    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=5) as c:
        head = b"\xff" + b"\0" * 7 + b"\x7f\x03\x00" + b"CURVE".ljust(20, b"\0") + b"\0" * 32
        chunk = head + b"\x02\x7f" + b"\xff" * 8 + b"J" * (1 << 20)
        try:
            while sent < total:
                c.sendall(chunk)
                sent += len(chunk)
        except OSError:  # the port hung up on the junk: what we want
            pass
    return sent


def test_a_flood_of_junk_on_the_control_port_is_dropped(live_run):
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.connect(live_run.supervisor.control.address)
    shapes = [[b"junk"], [b"x" * 16, b"y" * _HEADER.size, b"z"], [b"x" * 16, b"payload"], [b""] * 5]
    for i in range(3000):
        _send(s, shapes[i % len(shapes)])
    _tcp_junk(live_run.supervisor.control.address, 50 << 20)
    _keeps_going(live_run)
    assert live_run.supervisor.control.rejected == 0  # not one frame got past the handshake to be looked at
    s.close(0)
    ctx.term()


def test_a_client_named_like_a_worker_receives_nothing(live_run):
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.IDENTITY, b"w0")
    s.connect(live_run.supervisor.control.address)
    _send(s, [b"hello"])  # unauthenticated: never counts as a worker
    got = s.poll(3000)  # the supervisor probes every worker every 0.1 s: none of it may come here
    assert not got, "a stranger received a worker's control messages"
    _keeps_going(live_run)
    s.close(0)
    ctx.term()


def test_oversized_messages_are_refused_without_growing_memory(live_run):
    """Oversize and junk frames from peers without the keys, on the control port and every
    worker's data port, over zmq and over raw TCP: no worker grows by 100 MiB, the run goes on."""
    ctx = zmq.Context()
    worker_pids = list(live_run.pids.values())
    before = {pid: psutil.Process(pid).memory_info().rss for pid in worker_pids}
    big = b"\0" * (20 << 20)  # over the control cap (16 MiB) and the data cap set above (8 MiB)
    socks = []
    ctl = ctx.socket(zmq.DEALER)
    ctl.connect(live_run.supervisor.control.address)
    socks.append(ctl)
    for _ in range(10):
        _send(ctl, [big, big])
    with live_run.supervisor.lock:
        addresses = [s.address for s in live_run.supervisor.slots.values()]
    for addr in addresses:
        push = ctx.socket(zmq.PUSH)
        push.connect(addr)
        socks.append(push)
        for _ in range(10):
            _send(push, [b"m" * 16, big, big])
        _tcp_junk(addr, 200 << 20)
    time.sleep(3)
    for pid in worker_pids:
        grown = psutil.Process(pid).memory_info().rss - before[pid]
        assert grown < 100 << 20, f"worker {pid} grew by {grown >> 20} MiB"
    _keeps_going(live_run)
    for s in socks:
        s.close(0)
    ctx.term()


def test_replayed_or_redirected_authentic_messages_are_refused(live_run):
    """Even from a peer holding the run's keys (the test knows the run's secret): a message
    whose (epoch, seq) was already used by that sender is a replay; a fatal report replayed as
    worker 0's first message must not fail the run."""
    sup = live_run.supervisor
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    curve_client(s, sup.secret)
    s.connect(sup.control.address)
    rejected = sup.control.rejected
    for seq in (1, 2, 3):  # worker 0's first messages of incarnation 0: long used
        payload = pack(Fatal(0, 0, "src", 1, "replayed", "").to_wire())  # well-formed: only the replay is wrong
        s.send_multipart([_HEADER.pack(0, 0, seq), payload])
    assert wait_for(lambda: sup.control.rejected >= rejected + 3, timeout=10)
    assert not any(e.get("error") == "replayed" for e in sup.errors)
    _keeps_going(live_run)
    s.close(0)
    ctx.term()


def test_data_transport_refuses_replays_and_messages_for_an_earlier_incarnation():
    """The MAC mode (encryption off): replays refused, a message captured for an earlier
    incarnation fails the MAC of the new one."""
    secret = b"k" * 32
    b1 = DataTransport(secret, sender=1, curve=False)
    addr1 = b1.bind()
    a = DataTransport(secret, sender=0, epoch=3, curve=False)
    a.connect(1, addr1)
    sent = []
    sock = a.peers[1]
    real = sock.send_multipart

    def record(frames, **kw):
        sent.append([bytes(f) for f in frames])
        return real(frames, **kw)
    a.peers[1] = type("Rec", (), {"send_multipart": staticmethod(record)})()
    a.send(1, b"batch-1")
    a.send(1, b"batch-2")
    assert wait_for(lambda: b1.pull.poll(0), timeout=5)
    time.sleep(0.2)
    assert b1.recv_payloads(10) == [b"batch-1", b"batch-2"]
    replay = b1.ctx.socket(zmq.PUSH)
    replay.connect(addr1)
    for frames in sent:
        replay.send_multipart(frames)
    time.sleep(0.3)
    assert b1.recv_payloads(10) == [] and b1.rejected == 2
    b2 = DataTransport(secret, sender=1, curve=False)  # the receiver restarted: a new address
    addr2 = b2.bind()
    replay2 = b2.ctx.socket(zmq.PUSH)
    replay2.connect(addr2)
    for frames in sent:
        replay2.send_multipart(frames)
    time.sleep(0.3)
    assert b2.recv_payloads(10) == [] and b2.rejected == 2  # bound to the old address: MAC fails
    for s in (replay, replay2, sock):
        s.close(0)
    a.peers.clear()
    for t in (a, b1, b2):
        t.close()


def test_a_worker_whose_control_connection_was_remade_is_heard_and_answered_again():
    """A dropped TCP connection comes back under a new ROUTER identity: the supervisor follows the
    worker there on its next authentic message (before, it kept sending to the dead identity and
    the worker stopped after 10 s of silence)."""
    from topology_runtime.api.config import resolve_config
    from topology_runtime.plan import build_plan
    from topology_runtime.supervisor.run_supervisor import RunSupervisor
    from topology_runtime.transport.sockets import ControlClient

    sup = RunSupervisor("reconnect", build_plan(_topology(), resolve_config({}), 1))
    ctx = zmq.Context()
    me = "tcp://127.0.0.1:1"  # the worker's data address: what the supervisor's MACs are bound to
    first = ControlClient(ctx, sup.secret, sup.control.address, me=me, sender=0, epoch=0)
    first.send(Hello(0, 0, me, 1, "python", "localhost"))
    assert wait_for(lambda: (sup.step(20), sup.slots[0].identity)[1] is not None, timeout=5)
    assert wait_for(lambda: any(isinstance(m, Peers) for m in first.recv_all()), timeout=5)
    again = ControlClient(ctx, sup.secret, sup.control.address, me=me, sender=0, epoch=0)
    again._sender = first._sender  # the same incarnation, its sequence numbers going on
    first.close()
    again.send(Ready(0, 0))
    assert wait_for(lambda: (sup.step(20), sup.state)[1] == "running", timeout=5)
    assert wait_for(lambda: (sup.step(20), any(isinstance(m, Probe) for m in again.recv_all()))[1], timeout=5)
    again.close()
    sup.close()
    ctx.term()


def test_with_encryption_a_stranger_gets_nothing_through_and_traffic_is_not_plaintext():
    """CURVE: frames from a socket without the run's keys are never delivered nor looked at;
    what goes over the wire between two workers does not contain the payload in clear."""
    import socket
    import threading

    secret = b"k" * 32
    b = DataTransport(secret, sender=1)
    addr = b.bind()
    ctx = zmq.Context()
    stranger = ctx.socket(zmq.PUSH)
    stranger.connect(addr)
    for _ in range(100):
        stranger.send_multipart([b"x" * 16, _HEADER.pack(0, 0, 1), b"junk"])
    time.sleep(0.5)
    assert b.recv_payloads(100) == [] and b.rejected == 0
    # A relay between sender and receiver records the bytes on the wire.
    relay = socket.socket()
    relay.bind(("127.0.0.1", 0))
    relay.listen()
    wire = bytearray()

    def pump():
        conn, _ = relay.accept()
        out = socket.create_connection(("127.0.0.1", int(addr.rsplit(":", 1)[1])))

        def copy(src, dst, keep):
            while True:
                data = src.recv(65536)
                if not data:
                    return
                if keep:
                    wire.extend(data)
                dst.sendall(data)
        threading.Thread(target=copy, args=(out, conn, False), daemon=True).start()
        copy(conn, out, True)
    threading.Thread(target=pump, daemon=True).start()
    a = DataTransport(secret, sender=0)
    a.connect(1, f"tcp://127.0.0.1:{relay.getsockname()[1]}")
    secret_words = b"the quick brown fox jumps over the lazy dog " * 20
    a.send(1, secret_words)
    got: list[bytes] = []
    assert wait_for(lambda: (a.flush(), got.extend(b.recv_payloads(10)), got)[2] == [secret_words], timeout=10)
    assert len(wire) > len(secret_words) and b"quick brown fox" not in bytes(wire)
    stranger.close(0)
    ctx.term()
    for t in (a, b):
        t.close()

