"""The ports of a live run against an attacker without the run's secret (its sockets are
CurveZMQ endpoints: a stranger never completes the handshake; in the plaintext mode a PLAIN token
admits connections): a flood of junk, a client taking a worker's identity, oversized messages;
and, from one that has the keys, replayed messages and batches past its credit window. The run
must keep going, stay killable, and no worker may restart. The MAC mode (encryption off) keeps
its own checks. And the message cap: a batch over it goes in halves, a single tuple over it is
refused naming the setting."""

from __future__ import annotations

import threading
import time

import pytest
import zmq
from runtime_components import GatedSpout, peak_rss_growth

from topology_runtime import BasicBolt, LocalCluster, Spout, TopologyBuilder
from topology_runtime.testing import wait_for
from topology_runtime.transport.admission import plain_client
from topology_runtime.transport.messages import Fatal, Hello, Peers, Probe, Ready
from topology_runtime.transport.sockets import (
    _HEADER,
    CONTROL_MAX_BYTES,
    DATA_MAX_BYTES,
    DataTransport,
    _mac,
    curve_client,
    pack,
)

pytestmark = pytest.mark.slow  # attacks on live runs' ports: not in make test-fast
MB = 1 << 20


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
        run = cluster.submit("attacked", _topology())  # the default caps
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


def _tcp_junk(address: str, total: int, mechanism: bytes = b"CURVE") -> int:
    """Write ``total`` bytes of junk (a fake greeting, then a huge frame header and filler)
    straight to a zmq port over TCP; returns how many bytes the port took before hanging up."""
    import socket

    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=5) as c:
        head = b"\xff" + b"\0" * 7 + b"\x7f\x03\x00" + mechanism.ljust(20, b"\0") + b"\0" * 32
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


def _strangers(ctx: zmq.Context, address: str, kind: int, encryption: bool) -> list:
    """Sockets without the run's keys: one with no security at all, one that speaks the port's
    mechanism with credentials of its own (its own CURVE keys and a guessed server key, or a
    guessed PLAIN password)."""
    bare, guessing = ctx.socket(kind), ctx.socket(kind)
    if encryption:
        guessing.curve_serverkey = zmq.curve_keypair()[0]
        guessing.curve_publickey, guessing.curve_secretkey = zmq.curve_keypair()
    else:
        guessing.plain_username, guessing.plain_password = b"topology", b"guess"
    for sock in (bare, guessing):
        sock.connect(address)
    return [bare, guessing]


def _flood(ctx: zmq.Context, address: str, encryption: bool, kind: int = zmq.PUSH, cap: int = DATA_MAX_BYTES) -> list:
    """What strangers throw at one port: frames under the default cap (what the plaintext mode
    used to buffer up to its MAC check), one over it, a message of many frames each under it
    (ZeroMQ caps frames, not messages), and raw TCP junk; never waiting on a socket."""
    junk, over = b"j" * (cap - MB), b"o" * (cap + MB)
    socks = _strangers(ctx, address, kind, encryption)
    for sock in socks:
        for seq in range(1, 9):
            _send(sock, [b"m" * 16, _HEADER.pack(0, 0, seq), junk])
        _send(sock, [b"m" * 16, _HEADER.pack(0, 0, 9), over])
        _send(sock, [b"m" * 16, _HEADER.pack(0, 0, 10), junk, junk, junk, junk])
    _tcp_junk(address, 200 << 20, b"CURVE" if encryption else b"PLAIN")
    return socks


@pytest.mark.parametrize("encryption", [True, False], ids=["curve", "plaintext"])
def test_a_flood_from_a_peer_without_keys_grows_no_worker_by_100_mib(encryption, tmp_path):
    """At the default caps, on a bounded run: oversize and junk frames on every worker's data port
    and on the control port, over zmq and raw TCP. The run completes with every tuple acked once,
    no worker restarts, and no worker's peak RSS grows by 100 MiB. Encrypted, a stranger never
    completes the handshake; in the plaintext mode, where the MAC is checked after a message is
    received, the PLAIN token keeps it out before that."""
    n = 3000
    go = tmp_path / "go"
    b = TopologyBuilder()
    b.set_spout("numbers", GatedSpout(range(1, n + 1)))
    b.set_bolt("pass", Pass(), 2).shuffle_grouping("numbers")
    conf = {"topology.transport.encryption": encryption, "test.done.file": str(go)}
    ctx = zmq.Context()
    socks: list = []
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("flooded", b.create_topology(), conf)
        try:
            assert wait_for(lambda: run.status().state == "running" and _acked(run) > 50, timeout=60)
            measured: dict = {}
            sampler = threading.Thread(target=lambda: measured.update(
                zip(("status", "peak"), peak_rss_growth(run, timeout=240))))
            sampler.start()  # the baseline is this process before the flood's buffers exist
            with run.supervisor.lock:
                addresses = [s.address for s in run.supervisor.slots.values()]
            assert len(addresses) == 2
            for addr in addresses:
                socks += _flood(ctx, addr, encryption)
            socks += _flood(ctx, run.supervisor.control.address, encryption, zmq.DEALER, CONTROL_MAX_BYTES)
            time.sleep(1)  # the flood's queued frames have had their chance
            assert run.status().state == "running"  # the spout waits for the go: it was live throughout
        finally:
            go.touch()
        sampler.join()
        status, peak = measured["status"], measured["peak"]
        assert status.state == "completed", status.error
        assert status.restarts == 0, "a worker restarted"
        assert peak < 100, f"a worker's peak RSS grew by {peak:.0f} MiB"
        numbers, passed = status.components["numbers"], status.components["pass"]
        assert (numbers.acked, numbers.failed, passed.executed) == (n, 0, n)
        assert run.supervisor.control.rejected == 0  # nothing of the stranger's reached the MAC check
        if not encryption:
            assert run.supervisor.control._zap.denied > 0  # it tried, and was refused at the handshake
    for sock in socks:
        sock.close(0)
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
    incarnation fails the MAC of the new one. The replaying sockets present the PLAIN token (it
    crosses the wire in clear, so whoever captured the traffic has it); without it a socket is
    refused at the handshake and nothing it sends is even looked at."""
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
    plain_client(replay, secret)
    replay.connect(addr1)
    for frames in sent:
        replay.send_multipart(frames)
    time.sleep(0.3)
    assert b1.recv_payloads(10) == [] and b1.rejected == 2
    b2 = DataTransport(secret, sender=1, curve=False)  # the receiver restarted: a new address
    addr2 = b2.bind()
    replay2 = b2.ctx.socket(zmq.PUSH)
    plain_client(replay2, secret)
    replay2.connect(addr2)
    for frames in sent:
        replay2.send_multipart(frames)
    time.sleep(0.3)
    assert b2.recv_payloads(10) == [] and b2.rejected == 2  # bound to the old address: MAC fails
    strangers = _strangers(b2.ctx, addr2, zmq.PUSH, encryption=False)  # no token, a guessed one
    for frames in sent:
        for stranger in strangers:
            _send(stranger, frames)
    assert wait_for(lambda: b2._zap.denied > 0, timeout=5)
    time.sleep(0.3)
    assert b2.recv_payloads(10) == [] and b2.rejected == 2  # refused before the MAC check
    for s in (replay, replay2, *strangers, sock):
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


# --- a peer with the keys, past its credit window; the message cap ----------------------------
def _rogue(secret: bytes, address: str, curve: bool) -> tuple[zmq.Context, zmq.Socket]:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    (curve_client if curve else plain_client)(sock, secret)
    sock.connect(address)
    return ctx, sock


@pytest.mark.parametrize("curve", [True, False], ids=["curve", "plaintext"])
def test_a_peer_with_the_keys_that_ignores_its_credit_window_is_held_to_it(curve):
    """The receive side's bound: what a worker takes in from one sender and has not worked
    through stays within max(window, max message), whether or not the sender keeps to its
    credits; the rest is dropped unread. Paying credit makes room again; a new incarnation of
    the sender starts with its own window. (Senders that keep to it lose nothing:
    tests/test_credit_window.py.)"""
    secret = b"k" * 32
    r = DataTransport(secret, sender=1, curve=curve, window=4 * MB, max_bytes=2 * MB)
    addr = r.bind()
    ctx, rogue = _rogue(secret, addr, curve)
    batch = b"x" * MB
    got: list[bytes] = []

    def send(epoch: int, seqs: range) -> None:
        for seq in seqs:
            header = _HEADER.pack(7, epoch, seq)
            rogue.send_multipart([header, batch] if curve else [_mac(secret, addr.encode(), header, batch), header, batch])

    def read(total: int) -> None:
        assert wait_for(lambda: (got.extend(r.recv_payloads(100)), len(got) + r.over_window)[1] >= total, timeout=10)

    try:
        send(0, range(1, 21))
        read(20)
        assert (len(got), r.over_window) == (4, 16)  # 4 MiB taken in, 16 batches dropped unread
        r.queued(0)
        r.release_credits(time.monotonic(), 0)  # worked through: room for 4 MiB again
        send(0, range(21, 27))
        read(26)
        assert (len(got), r.over_window) == (8, 18)
        send(1, range(1, 5))  # the sender restarted: its predecessor's unpaid bytes are not its debt
        read(30)
        assert (len(got), r.over_window) == (12, 18) and r.rejected == 0
    finally:
        rogue.close(0)
        ctx.term()
        r.close()


def test_a_single_tuple_over_the_message_cap_is_refused_naming_the_setting(caplog):
    t = DataTransport(b"k" * 32, sender=0, max_bytes=MB)
    t.bind()
    t.connect(1, "tcp://127.0.0.1:1")
    try:
        t.send(1, b"x" * (MB + 1))
        assert t.oversized == 1 and t.backlogged() == 0
        assert "is over the 1048576-byte cap" in caplog.text
        assert "topology.transfer.max.message.bytes" in caplog.text
    finally:
        t.close()


class Heavy(Spout):
    """Twelve 256 KiB tuples (acked), then one of 2 MiB (no message id: it cannot replay)."""

    outputs = ["blob"]

    def open(self, conf, context):
        self.todo = [bytes(256 << 10)] * 12
        self.pending: set[int] = set()
        self.big_sent = False

    def next_tuple(self):
        if self.todo:
            self.todo.pop()
            self.pending.add(len(self.todo))
            self.emit([bytes(256 << 10)], msg_id=len(self.todo))
        elif not self.big_sent:
            self.big_sent = True
            self.emit([bytes(2 * MB)])
        elif not self.pending:
            self.finish()

    def ack(self, msg_id):
        self.pending.discard(msg_id)


class Sink(BasicBolt):
    outputs = []

    def execute(self, tup):
        pass


def test_a_batch_over_the_cap_goes_in_halves_and_only_a_single_tuple_over_it_is_refused(capfd):
    b = TopologyBuilder()
    b.set_spout("heavy", Heavy())
    b.set_bolt("sink", Sink()).shuffle_grouping("heavy")
    conf = {"topology.transfer.max.message.bytes": MB, "topology.transfer.batch.size": 100}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("capped", b.create_topology(), conf)
        plan = run.plan
        assert plan.task_worker[plan.component_tasks["heavy"][0]] != plan.task_worker[plan.component_tasks["sink"][0]]
        status = run.wait(timeout=120)
    assert status.state == "completed", status.error
    assert (status.components["heavy"].acked, status.components["sink"].executed) == (12, 12)
    err = capfd.readouterr().err
    assert "is over the 1048576-byte cap" in err and "topology.transfer.max.message.bytes" in err
