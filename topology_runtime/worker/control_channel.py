"""The worker's side of the control channel: hello and peer addresses at start, then the
supervisor's messages (probe, drain, stop, checkpoints, end of input) and this worker's reports.

``WorkerControl`` owns the connection and speaks the typed messages of transport/messages.py;
what it needs of the worker is the ``ControlledWorker`` interface below, nothing else, so the
worker's internals stay its own and this module does not import it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Protocol

from ..transport.messages import (
    Barrier,
    BarrierDone,
    Commit,
    Committed,
    ControlMessage,
    Drain,
    EndOfInput,
    ExactlyOnceFailure,
    Fatal,
    FinalCheckpoint,
    Hello,
    InputDrained,
    Inspect,
    Pause,
    Peers,
    Probe,
    ProbeReply,
    Ready,
    Resume,
    RunFailed,
    Stats,
    Stop,
    Stopped,
)
from ..transport.sockets import ControlClient
from .fatal import FatalStartupError
from .inspection import Inspection

log = logging.getLogger("topology.worker")
PEER_WAIT_SECS = 120.0
HELLO_AGAIN_SECS = 2.0


class ControlledWorker(Protocol):
    """What the supervisor's messages act on (the worker implements it)."""

    def connect_peer(self, index: int, address: str) -> None: ...
    def probe_reply(self, seq: int) -> ProbeReply: ...
    def stats_snapshot(self) -> dict: ...
    def take_errors(self) -> list[dict]: ...
    def drain(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def barrier(self, txid: int) -> None: ...
    def commit(self, txid: int) -> None: ...
    def end_of_input(self, components: set[str]) -> None: ...
    def final_checkpoint(self) -> None: ...
    def stop(self) -> None: ...
    def executors(self) -> list: ...


class WorkerControl:
    """One worker incarnation's control connection: its reports to the supervisor and the
    dispatch of the supervisor's messages to the worker."""

    def __init__(self, client: ControlClient, worker: ControlledWorker, index: int, incarnation: int,
                 address: str, host: str) -> None:
        self.client = client
        self.worker = worker
        self.index = index
        self.incarnation = incarnation
        self.address = address
        self.host = host
        self.last_heard = time.monotonic()
        self.preset_peers = False
        self.early: list[ControlMessage] = []  # what came with the peers, for after start-up
        self.inspection: Inspection | None = None  # log level and sampling, once asked

    # --- start -----------------------------------------------------------------------------------
    def hello(self) -> None:
        self.client.send(Hello(self.index, self.incarnation, self.address, os.getpid(), sys.executable, self.host))

    def set_peers(self, peers: dict) -> None:
        """Peer addresses known up front (Spark's allGather); else the supervisor sends them."""
        self._connect(peers)
        self.preset_peers = True

    def wait_for_peers(self) -> None:
        deadline = time.monotonic() + PEER_WAIT_SECS
        self.hello()
        if self.preset_peers:
            return
        last_hello = time.monotonic()
        while time.monotonic() < deadline:
            if self.client.sock.poll(200):
                got_peers = False
                for msg in self.client.recv_all():  # every one, in order: a newer table replaces an older
                    if isinstance(msg, Peers):
                        self._connect(msg.peers)
                        got_peers = True
                    elif isinstance(msg, Stop):
                        raise SystemExit(0)
                    elif isinstance(msg, (Pause, Drain, Inspect)):
                        self.early.append(msg)  # sent right after the peers to a restarted worker
                if got_peers:
                    return
            if time.monotonic() - last_hello > HELLO_AGAIN_SECS:  # the supervisor may have missed it
                self.hello()
                last_hello = time.monotonic()
        raise FatalStartupError(f"worker {self.index}: no peer addresses from the supervisor in {PEER_WAIT_SECS}s")

    def _connect(self, peers: dict) -> None:
        for index, addr in peers.items():
            if int(index) != self.index:
                self.worker.connect_peer(int(index), addr)

    # --- reports ---------------------------------------------------------------------------------
    def ready(self) -> None:
        self.client.send(Ready(self.index, self.incarnation))

    def fatal(self, component: str, task: int, error: str, traceback: str) -> None:
        self.client.send(Fatal(self.index, self.incarnation, component, task, error, traceback))

    def input_drained(self) -> None:
        self.client.send(InputDrained(self.index, self.incarnation))

    def barrier_done(self, task: int, txid: int) -> None:
        self.client.send(BarrierDone(self.index, self.incarnation, task, txid))

    def committed(self, txid: int) -> None:
        self.client.send(Committed(self.index, self.incarnation, txid))

    def exactly_once_failure(self, reason: str) -> None:
        self.client.send(ExactlyOnceFailure(self.index, self.incarnation, reason))

    def run_failed(self, component: str, task: int, error: str) -> None:
        self.client.send(RunFailed(self.index, self.incarnation, component, task, error))

    def send_stats(self, final: bool = False) -> None:
        kind = Stopped if final else Stats
        stats = self.worker.stats_snapshot()
        if self.inspection is not None:  # log level and sampling: undone at their expiry
            self.inspection.tick()
            stats["samples"] = self.inspection.take_samples()
        self.client.send(kind(self.index, self.incarnation, stats, self.worker.take_errors()))

    # --- the supervisor's messages ---------------------------------------------------------------
    def started(self) -> None:
        """The tasks are up: report ready, then act on what arrived before they were."""
        self.ready()
        early, self.early = self.early, []
        for msg in early:
            self.dispatch(msg)

    def handle(self) -> None:
        self.last_heard = time.monotonic()
        for msg in self.client.recv_all():
            self.dispatch(msg)

    def dispatch(self, msg: ControlMessage) -> None:
        w = self.worker
        if isinstance(msg, Probe):
            self.client.send(w.probe_reply(msg.seq))
        elif isinstance(msg, Peers):
            self._connect(msg.peers)
        elif isinstance(msg, Drain):
            w.drain()
        elif isinstance(msg, Pause):
            w.pause()
        elif isinstance(msg, Resume):
            w.resume()
        elif isinstance(msg, Barrier):
            w.barrier(msg.txid)
        elif isinstance(msg, Commit):
            w.commit(msg.txid)
        elif isinstance(msg, EndOfInput):
            w.end_of_input(set(msg.components))
        elif isinstance(msg, FinalCheckpoint):
            w.final_checkpoint()
        elif isinstance(msg, Inspect):
            if self.inspection is None:
                self.inspection = Inspection(w.executors())
            self.inspection.apply(msg.log_level, msg.sample)
        elif isinstance(msg, Stop):
            w.stop()
        else:
            log.warning("worker %d: unexpected control message %r", self.index, msg.KIND)
