"""Batched, authenticated messages between processes over pyzmq; msgpack payloads.

Knows nothing of topologies. Every message carries a keyed BLAKE2b MAC of its payload under a
per-run secret; a message that fails the check is dropped and counted, never decoded. Payloads
are msgpack only: nothing from the network is ever unpickled.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections import deque
from typing import Any

import msgpack
import zmq

log = logging.getLogger(__name__)

_MAC_SIZE = 16


def _mac(secret: bytes, payload: bytes) -> bytes:
    return hashlib.blake2b(payload, key=secret, digest_size=_MAC_SIZE).digest()


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


class DataTransport:
    """One inbound PULL socket per process, one outbound PUSH socket per peer.

    ``send`` never blocks: past the peer's high-water mark the batch waits in a local backlog
    that ``flush`` retries; callers use ``backlogged`` to stop producing new work.
    """

    def __init__(self, secret: bytes, send_hwm: int = 64, recv_hwm: int = 1024, host: str = "127.0.0.1") -> None:
        self.secret = secret
        self.ctx = zmq.Context()
        self.host = host
        self.send_hwm = send_hwm
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, recv_hwm)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.peers: dict[int, zmq.Socket] = {}
        self.backlog: dict[int, deque] = {}
        self.rejected = 0
        self.address = ""

    def bind(self, port: int = 0) -> str:
        if port:
            self.pull.bind(f"tcp://{self.host}:{port}")
        else:
            port = self.pull.bind_to_random_port(f"tcp://{self.host}")
        self.address = f"tcp://{self.host}:{port}"
        return self.address

    def connect(self, peer: int, address: str) -> None:
        old = self.peers.pop(peer, None)
        if old is not None:
            old.close(0)
        s = self.ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.SNDHWM, self.send_hwm)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(address)
        self.peers[peer] = s
        self.backlog[peer] = deque()

    def send(self, peer: int, payload: bytes) -> None:
        q = self.backlog[peer]
        q.append((_mac(self.secret, payload), payload))
        if len(q) == 1:
            self._flush_peer(peer, q)

    def _flush_peer(self, peer: int, q: deque) -> None:
        sock = self.peers[peer]
        while q:
            try:
                sock.send_multipart(q[0], flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            q.popleft()

    def flush(self) -> None:
        for peer, q in self.backlog.items():
            if q:
                self._flush_peer(peer, q)

    def backlogged(self) -> int:
        return sum(len(q) for q in self.backlog.values())

    def recv_payloads(self, limit: int) -> list[bytes]:
        out = []
        pull = self.pull
        for _ in range(limit):
            try:
                mac, payload = pull.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            except ValueError:  # wrong frame count: not one of ours
                self.rejected += 1
                continue
            if not hmac.compare_digest(mac, _mac(self.secret, payload)):
                self.rejected += 1
                if self.rejected in (1, 10, 100) or self.rejected % 1000 == 0:
                    log.warning("dropped %d message(s) that failed authentication", self.rejected)
                continue
            out.append(payload)
        return out

    def close(self) -> None:
        for s in self.peers.values():
            s.close(0)
        self.pull.close(0)
        self.ctx.term()


class ControlServer:
    """The run's control endpoint (the supervisor's side): a ROUTER that workers' DEALERs connect to."""

    def __init__(self, secret: bytes, host: str = "127.0.0.1") -> None:
        self.secret = secret
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted worker reclaims its identity
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"

    def poll(self, timeout_ms: int) -> bool:
        return bool(self.sock.poll(timeout_ms, zmq.POLLIN))

    def recv(self) -> tuple[bytes, dict] | None:
        try:
            frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
        except zmq.Again:
            return None
        if len(frames) != 3 or not hmac.compare_digest(frames[1], _mac(self.secret, frames[2])):
            log.warning("control: dropped a message that failed authentication")
            return self.recv()
        return frames[0], unpack(frames[2])

    def send(self, identity: bytes, msg: dict) -> None:
        payload = pack(msg)
        try:
            self.sock.send_multipart([identity, _mac(self.secret, payload), payload], flags=zmq.NOBLOCK)
        except (zmq.Again, zmq.ZMQError):
            pass  # the worker is gone; the launcher notices that separately

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


class ControlClient:
    """A worker's connection to the control endpoint."""

    def __init__(self, ctx: zmq.Context, secret: bytes, address: str, identity: bytes) -> None:
        self.secret = secret
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.setsockopt(zmq.LINGER, 2000)
        self.sock.connect(address)

    def send(self, msg: dict) -> None:
        payload = pack(msg)
        try:
            self.sock.send_multipart([_mac(self.secret, payload), payload], flags=zmq.NOBLOCK)
        except zmq.Again:
            pass

    def recv_all(self) -> list[dict]:
        out = []
        while True:
            try:
                frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return out
            if len(frames) == 2 and hmac.compare_digest(frames[0], _mac(self.secret, frames[1])):
                out.append(unpack(frames[1]))

    def close(self) -> None:
        self.sock.close()
