"""Who may open a connection to a run's sockets in the plaintext mode (CURVE off).

The MAC of each message is checked only once ZeroMQ has received the whole message, and ZeroMQ
caps the size of a frame, not the number of frames of a message nor the bytes it queues: a
stranger who could connect would be buffered by the gigabyte before any check. So a plaintext
socket still authenticates each connection at the handshake: ZeroMQ's PLAIN mechanism with a
token derived from the run secret, checked by a ZAP handler (RFC 27) in the process; a peer
without the token is refused before any of its frames is read. The token crosses the wire in
clear at each handshake (PLAIN): it only admits; the MAC per message still authenticates,
so an eavesdropper who learns it can be buffered, not heard.
"""

from __future__ import annotations

import hashlib
import hmac
import threading

import zmq

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq asks, per context (RFC 27)
_USER = b"topology"
_DOMAIN = b"topology"


def plain_token(secret: bytes) -> bytes:
    """The run's PLAIN password: derived from the secret, never the secret or a key itself."""
    return hashlib.blake2b(secret, digest_size=32, person=b"topology-plain").hexdigest().encode()


class ZapHandler:
    """Answers libzmq's admission requests for the server sockets of one context: PLAIN with the
    run's token, nothing else. Its thread ends when the context is terminated."""

    def __init__(self, ctx: zmq.Context, secret: bytes) -> None:
        self._token = plain_token(secret)
        self._sock = ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(ZAP_ENDPOINT)  # before any server socket of the context binds
        self.denied = 0
        threading.Thread(target=self._serve, name="zap", daemon=True).start()

    def _serve(self) -> None:
        sock, token = self._sock, self._token
        try:
            while True:
                req = sock.recv_multipart()
                # version, request id, domain, address, identity, mechanism, username, password
                ok = (len(req) == 8 and req[0] == b"1.0" and req[5] == b"PLAIN" and req[6] == _USER
                      and hmac.compare_digest(req[7], token))
                if not ok:
                    self.denied += 1
                rid = req[1] if len(req) > 1 else b""
                sock.send_multipart([b"1.0", rid, b"200" if ok else b"400", b"OK" if ok else b"denied", b"", b""])
        except zmq.ContextTerminated:
            pass
        finally:
            sock.close(0)


def plain_server(sock: zmq.Socket) -> None:
    """A server socket whose connections the context's ZapHandler admits."""
    sock.plain_server = True
    sock.zap_domain = _DOMAIN


def plain_client(sock: zmq.Socket, secret: bytes) -> None:
    sock.plain_username = _USER
    sock.plain_password = plain_token(secret)
