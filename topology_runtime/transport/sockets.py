"""Batched, authenticated messages between processes over pyzmq; msgpack payloads.

Knows nothing of topologies. Two modes, both keyed by the per-run secret:

* **CURVE** (the default; libsodium, in the pyzmq wheel): every socket is a CurveZMQ endpoint.
  The run's key pair is derived from the run secret (``curve_keys``), so workers get it the way
  they get the secret, never on a command line. A peer without it cannot complete the handshake:
  nothing it sends is buffered past the handshake or decoded. Traffic is encrypted and each
  connection authenticated, with CurveZMQ's per-message nonces against replay and reordering
  inside a connection. A message is two frames: a header (sender, epoch, sequence number) and
  the payload; the header's (epoch, seq) must still grow per sender, which CURVE cannot know:
  a process of an earlier incarnation, still connected, is not heard over its successor.
* **MAC** (``curve=False``, or a libzmq without CURVE): plaintext, three frames: a keyed BLAKE2b
  MAC over the header, the payload and the address of the process it is meant for, then the
  header and the payload. Replays are refused by the (epoch, seq) order, a message captured for
  an earlier incarnation of a process fails the MAC of the new one (a new address). Connections
  are admitted at the handshake by a token derived from the secret (``admission``), so a
  stranger's frames are not buffered up to the MAC check either.

A receiver drops (and counts), never decodes, a message of the wrong shape or order (or MAC).
Every socket caps the size of what it accepts. Payloads are msgpack only: nothing from the
network is ever unpickled.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import secrets
import struct
import threading
from collections import deque
from typing import Any

import msgpack
import zmq

from .admission import ZapHandler, plain_client, plain_server
from .messages import ControlMessage, ControlMessageError, parse

log = logging.getLogger(__name__)

_MAC_SIZE = 16
_HEADER = struct.Struct("!IQQ")  # sender, epoch, seq
SUPERVISOR = 0xFFFFFFFF  # the sender id of the supervisor's control messages
CONTROL_MAX_BYTES = 16 << 20  # a control message: stats, errors with tracebacks, a peer table
# Default cap of one message between workers. The sender halves a batch over it until each part
# fits, so it never limits batches, only a single tuple: it is the largest tuple one can send
# (docs/configuration.md). As large as the credit window: what one peer makes a worker hold is
# then bounded by the window, whether its batches are small or one tuple is that large.
DATA_MAX_BYTES = 64 << 20
DATA_WINDOW_BYTES = 64 << 20  # default credit window: bytes a worker may have unconsumed at one peer
# A payload that starts with this byte is a credit ([marker, bytes consumed]): 0xc1 is never the
# first byte of msgpack, so no batch is mistaken for one.
_CREDIT = 0xC1
_CREDIT_MSG = struct.Struct("!BQ")
_CREDIT_EVERY_SECS = 0.02  # a consumer owes less than a quarter window: it still pays it this often
CURVE_AVAILABLE = zmq.has("curve")


def curve_keys(secret: bytes) -> tuple[bytes, bytes]:
    """(public, secret) Z85 CurveZMQ key pair of a run, derived from its secret: every process
    that holds the secret holds the keys; nothing else does."""
    from zmq.utils import z85

    seed = hashlib.blake2b(secret, digest_size=32, person=b"topology-curve").digest()
    secret_key = z85.encode(seed)
    return zmq.curve_public(secret_key), secret_key


def transport_encryption(conf: Any) -> bool:
    """Whether a run's sockets use CURVE: ``topology.transport.encryption`` (default on), if
    this libzmq has it (else the MAC mode, with a warning)."""
    wanted = bool(conf.get("topology.transport.encryption", True))
    if wanted and not CURVE_AVAILABLE:
        log.warning("this libzmq has no CURVE: worker traffic goes in plaintext with a MAC per message")
    return wanted and CURVE_AVAILABLE


def curve_server(sock: zmq.Socket, secret: bytes) -> None:
    public, secret_key = curve_keys(secret)
    sock.curve_server = True
    sock.curve_publickey, sock.curve_secretkey = public, secret_key


def _server(sock: zmq.Socket, secret: bytes, curve: bool) -> None:
    """CURVE, or PLAIN admitted by the context's ZapHandler (the caller starts it)."""
    if curve:
        curve_server(sock, secret)
    else:
        plain_server(sock)


def _client(sock: zmq.Socket, secret: bytes, curve: bool) -> None:
    if curve:
        curve_client(sock, secret)
    else:
        plain_client(sock, secret)


def curve_client(sock: zmq.Socket, secret: bytes) -> None:
    """The client side: the run's public key as the server's, a key pair of its own (no ZAP
    handler: knowing the server's public key, derived from the secret, is what admits it)."""
    server_public, _ = curve_keys(secret)
    public, secret_key = zmq.curve_keypair()
    sock.curve_serverkey = server_public
    sock.curve_publickey, sock.curve_secretkey = public, secret_key


def _mac(secret: bytes, dest: bytes, header: bytes, payload: bytes) -> bytes:
    h = hashlib.blake2b(dest, key=secret, digest_size=_MAC_SIZE)
    h.update(header)
    h.update(payload)
    return h.digest()


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


class _Sender:
    """Headers of one sender: its id, its epoch (incarnation), a growing sequence number."""

    def __init__(self, sender: int, epoch: int) -> None:
        self.sender, self.epoch = sender, epoch
        self._seq = itertools.count(1)

    def header(self) -> bytes:
        return _HEADER.pack(self.sender, self.epoch, next(self._seq))


class _Receiver:
    """Checks what arrives for ``dest``: shape, MAC (MAC mode), and (epoch, seq) growing per sender."""

    def __init__(self, secret: bytes, dest: str, what: str, curve: bool = False) -> None:
        self.secret, self.dest, self.what = secret, dest.encode(), what
        self.curve = curve
        self.frames = 2 if curve else 3
        self.last: dict[int, tuple[int, int]] = {}
        self.rejected = 0

    def check(self, frames: list) -> tuple[int, int, bytes] | None:
        """(sender, epoch, payload) of an authentic, new message; None (counted) otherwise."""
        if len(frames) == self.frames and len(frames[-2]) == _HEADER.size:
            header, payload = frames[-2], frames[-1]
            if self.curve or hmac.compare_digest(frames[0], _mac(self.secret, self.dest, header, payload)):
                sender, epoch, seq = _HEADER.unpack(header)
                if (epoch, seq) > self.last.get(sender, (-1, 0)):
                    self.last[sender] = (epoch, seq)
                    return sender, epoch, payload
        self.rejected += 1
        if self.rejected in (1, 10, 100) or self.rejected % 1000 == 0:
            log.warning("%s: dropped %d message(s) that failed authentication or were replayed",
                        self.what, self.rejected)
        return None


class DataTransport:
    """One inbound PULL socket per process, one outbound PUSH socket per peer.

    ``send`` never blocks: past the peer's high-water mark, or past its credit window, the batch
    waits in a local backlog that ``flush`` retries; callers use ``backlogged`` to stop producing
    new work.

    Credit-based flow control bounds what a process buffers for each peer in bytes: a sender
    has at most ``window`` bytes of batches that its peer has not consumed yet (a single batch
    larger than the window goes alone); the receiver pays them back with credits
    (``release_credits``) once it has worked through its queue, so a slow consumer holds back
    its producers instead of buffering without end, and no peer can make it hold more than
    about ``window`` bytes, whatever its batches weigh. Headers are stamped when a message
    leaves, so credits, which overtake the backlog, keep each sender's sequence growing.

    The receiver holds its peers to it: per sender (incarnation), the bytes it read and has not
    worked through never exceed ``max(window, max_bytes)``, what a sender keeping to its window
    can have outstanding; a batch beyond that is dropped unread (``over_window``), its tuples
    replay. Two dict updates per message, nothing per tuple.
    """

    def __init__(self, secret: bytes, send_hwm: int = 64, recv_hwm: int = 1024, host: str = "127.0.0.1",
                 sender: int = 0, epoch: int = 0, max_bytes: int = DATA_MAX_BYTES,
                 curve: bool = CURVE_AVAILABLE, window: int | None = DATA_WINDOW_BYTES) -> None:
        self.secret = secret
        self.curve = curve
        self.ctx = zmq.Context()
        self.host = host
        self.send_hwm = send_hwm
        self.max_bytes = max_bytes
        self.window = window or 0  # 0: no credit window
        self._zap = None if curve else ZapHandler(self.ctx, secret)
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, recv_hwm)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.pull.setsockopt(zmq.MAXMSGSIZE, max_bytes)  # larger: the sender is disconnected
        _server(self.pull, secret, curve)
        self.peers: dict[int, zmq.Socket] = {}
        self.peer_dest: dict[int, bytes] = {}
        self.backlog: dict[int, deque] = {}
        self.unconsumed: dict[int, int] = {}  # per peer: bytes sent that it has not credited yet
        # [sender, bytes, queue position] of each batch read and not paid for yet (the caller
        # says, through ``queued``, at which position of its queue the batch's tuples end).
        self._unpaid: deque[list] = deque()
        self._owed: dict[int, int] = {}  # per sender: credit not sent yet
        self._paid_at: dict[int, float] = {}
        # Per sender: bytes read and not worked through yet, and the incarnation they are of.
        self._held: dict[int, int] = {}
        self._epoch: dict[int, int] = {}
        self.held_limit = max(self.window, max_bytes) if self.window else 0
        self.over_window = 0  # batches dropped because their sender ignored its credit window
        self.window_waits = 0  # times a batch waited for credit (the peer consumes slower than this produces)
        self._sender = _Sender(sender, epoch)
        self._receiver: _Receiver | None = None
        self.oversized = 0
        self.address = ""

    @property
    def rejected(self) -> int:
        return self._receiver.rejected if self._receiver is not None else 0

    def bind(self, port: int = 0) -> str:
        if port:
            self.pull.bind(f"tcp://{self.host}:{port}")
        else:
            port = self.pull.bind_to_random_port(f"tcp://{self.host}")
        self.address = f"tcp://{self.host}:{port}"
        self._receiver = _Receiver(self.secret, self.address, "data", self.curve)
        return self.address

    def connect(self, peer: int, address: str) -> None:
        old = self.peers.pop(peer, None)
        if old is not None:
            old.close(0)
        s = self.ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.SNDHWM, self.send_hwm)
        s.setsockopt(zmq.LINGER, 0)
        _client(s, self.secret, self.curve)
        s.connect(address)
        self.peers[peer] = s
        self.peer_dest[peer] = address.encode()
        # A new incarnation of the peer: what was queued for the old one, and what it held, are gone.
        self.unconsumed[peer] = 0
        self.backlog[peer] = deque()

    def _frames(self, peer: int, payload: bytes) -> tuple:
        header = self._sender.header()
        if self.curve:
            return header, payload
        return _mac(self.secret, self.peer_dest[peer], header, payload), header, payload

    def send(self, peer: int, payload: bytes) -> bool:
        """Queue ``payload`` for ``peer``; False if it is over the cap (refused, logged)."""
        if len(payload) > self.max_bytes:  # the peer would drop the connection: say why here
            self.oversized += 1
            log.error("a batch of %d bytes for worker %d is over the %d-byte cap; dropped (its tuples time "
                      "out and replay). Emit smaller tuples or raise topology.transfer.max.message.bytes",
                      len(payload), peer, self.max_bytes)
            return False
        q = self.backlog[peer]
        q.append(payload)
        if len(q) == 1:
            self._flush_peer(peer, q)
        return True

    def _flush_peer(self, peer: int, q: deque) -> None:
        sock, window = self.peers[peer], self.window
        held = self.unconsumed[peer]
        while q:
            payload = q[0]
            if window and held and held + len(payload) > window:
                self.window_waits += 1
                break
            try:
                sock.send_multipart(self._frames(peer, payload), flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            q.popleft()
            held += len(payload)
        self.unconsumed[peer] = held

    def flush(self) -> None:
        for peer, q in self.backlog.items():
            if q:
                self._flush_peer(peer, q)

    def backlogged(self) -> int:
        return sum(len(q) for q in self.backlog.values())

    def recv_payloads(self, limit: int) -> list[bytes]:
        out = []
        pull, check, unpaid = self.pull, self._receiver.check, self._unpaid
        held, epochs, held_limit = self._held, self._epoch, self.held_limit
        for _ in range(limit):
            try:
                frames = pull.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            got = check(frames)
            if got is None:
                continue
            sender, epoch, payload = got
            if payload[:1] == b"\xc1" and len(payload) == _CREDIT_MSG.size:
                sent = self.unconsumed.get(sender)
                if sent is not None:
                    self.unconsumed[sender] = max(0, sent - _CREDIT_MSG.unpack(payload)[1])
                continue
            if held_limit:
                if epochs.get(sender) != epoch:
                    # A new incarnation starts with its own window: what its predecessor left in
                    # the queue is not its debt, nor is the credit for it its due.
                    epochs[sender], held[sender] = epoch, 0
                    self._owed.pop(sender, None)
                n = len(payload)
                h = held[sender] + n
                if h > held_limit:
                    self._over_window(sender, n)
                    continue
                held[sender] = h
                unpaid.append([sender, n, None, epoch])
            out.append(payload)
        return out

    def _over_window(self, sender: int, n: int) -> None:
        self.over_window += 1
        if self.over_window in (1, 10, 100) or self.over_window % 1000 == 0:
            log.error("data: dropped %d batch(es) from senders past their credit window (last: %d bytes from "
                      "worker %d, which holds %d unworked bytes here; the limit is %d)", self.over_window, n,
                      sender, self._held[sender], self.held_limit)

    def queued(self, position: int) -> None:
        """The batches read so far put their tuples at or before ``position`` of the caller's
        queue (a count of tuples ever queued)."""
        for entry in reversed(self._unpaid):
            if entry[2] is not None:
                break
            entry[2] = position

    def release_credits(self, now: float, done: int) -> None:
        """The caller's queue has been worked through up to position ``done``: pay the senders
        of those batches back, a quarter window at a time, or what is owed every few ms."""
        if not self.window:
            return
        owed, unpaid, held, epochs = self._owed, self._unpaid, self._held, self._epoch
        while unpaid and unpaid[0][2] is not None and unpaid[0][2] <= done:
            sender, n, _, epoch = unpaid.popleft()
            if epochs.get(sender) == epoch:  # else its sender restarted since: nobody to pay
                held[sender] -= n
                owed[sender] = owed.get(sender, 0) + n
        quarter = self.window // 4
        for sender, n in owed.items():
            if not n or (n < quarter and now - self._paid_at.get(sender, 0.0) < _CREDIT_EVERY_SECS):
                continue
            sock = self.peers.get(sender)
            if sock is None:
                continue  # not connected to it yet: paid once it is
            try:
                sock.send_multipart(self._frames(sender, _CREDIT_MSG.pack(_CREDIT, n)), flags=zmq.NOBLOCK)
            except zmq.Again:
                continue
            owed[sender] = 0
            self._paid_at[sender] = now

    def close(self) -> None:
        for s in self.peers.values():
            s.close(0)
        self.pull.close(0)
        self.ctx.term()


def _parse_control(payload: bytes) -> ControlMessage | None:
    """An authentic control message, or None (logged): authentic but unreadable is a bug or a
    peer of another version, not an attack."""
    try:
        return parse(unpack(payload))
    except ControlMessageError as e:
        log.warning("control: dropped an authenticated message: %s", e)
    except Exception:  # noqa: BLE001 - not msgpack
        log.warning("control: dropped an authenticated message that is not msgpack")
    return None


class ControlServer:
    """The run's control endpoint (the supervisor's side): a ROUTER that workers' DEALERs connect
    to. Identities are the ROUTER's own (random per connection): a worker is known by the identity
    its authenticated hello came from, so a client cannot take a worker's place by naming itself."""

    def __init__(self, secret: bytes, host: str = "127.0.0.1", curve: bool = CURVE_AVAILABLE) -> None:
        self.secret = secret
        self.curve = curve
        self.ctx = zmq.Context()
        self._zap = None if curve else ZapHandler(self.ctx, secret)
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, CONTROL_MAX_BYTES)
        _server(self.sock, secret, curve)
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        self._receiver = _Receiver(secret, self.address, "control", curve)
        # A zmq socket is not thread-safe: the supervisor's loop polls and receives while another
        # thread (a kill, a pause from the launcher) may send. One lock around every use.
        self._lock = threading.Lock()
        self._sender = _Sender(SUPERVISOR, secrets.randbits(63))

    @property
    def rejected(self) -> int:
        return self._receiver.rejected

    def poll(self, timeout_ms: int) -> bool:
        # Under the lock: a send from another thread waits at most this poll's timeout.
        with self._lock:
            return bool(self.sock.poll(timeout_ms, zmq.POLLIN))

    def recv(self) -> tuple[bytes, int, int, ControlMessage] | None:
        """(identity, sender, epoch, message) of the next authentic message; None when none is
        waiting. Junk is dropped in a loop (never by recursion: a flood must not overflow)."""
        while True:
            try:
                with self._lock:
                    frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return None
            got = self._receiver.check(frames[1:]) if len(frames) == self._receiver.frames + 1 \
                else self._receiver.check([])
            if got is None:
                continue
            msg = _parse_control(got[2])
            if msg is not None:
                return frames[0], got[0], got[1], msg

    def send(self, identity: bytes, dest: str, msg: ControlMessage) -> None:
        """To the worker connected as ``identity`` whose data address is ``dest``."""
        payload = pack(msg.to_wire())
        header = self._sender.header()
        frames = [identity, header, payload] if self.curve else \
            [identity, _mac(self.secret, dest.encode(), header, payload), header, payload]
        try:
            with self._lock:
                self.sock.send_multipart(frames, flags=zmq.NOBLOCK)
        except (zmq.Again, zmq.ZMQError):
            pass  # the worker is gone; the launcher notices that separately

    def close(self) -> None:
        with self._lock:
            self.sock.close(0)
        self.ctx.term()


class ControlClient:
    """A worker's connection to the control endpoint. ``me`` is the worker's data address: what
    the supervisor's messages to this incarnation are bound to."""

    def __init__(self, ctx: zmq.Context, secret: bytes, address: str, me: str, sender: int, epoch: int,
                 curve: bool = CURVE_AVAILABLE) -> None:
        self.secret = secret
        self.curve = curve
        self.server = address.encode()
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 2000)
        self.sock.setsockopt(zmq.MAXMSGSIZE, CONTROL_MAX_BYTES)
        _client(self.sock, secret, curve)
        self.sock.connect(address)
        self._sender = _Sender(sender, epoch)
        self._receiver = _Receiver(secret, me, "control", curve)

    def send(self, msg: ControlMessage) -> None:
        payload = pack(msg.to_wire())
        header = self._sender.header()
        frames = [header, payload] if self.curve else [_mac(self.secret, self.server, header, payload), header, payload]
        try:
            self.sock.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass

    def recv_all(self) -> list[ControlMessage]:
        out = []
        while True:
            try:
                frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return out
            got = self._receiver.check(frames)
            if got is not None and got[0] == SUPERVISOR:
                msg = _parse_control(got[2])
                if msg is not None:
                    out.append(msg)

    def close(self) -> None:
        self.sock.close()
