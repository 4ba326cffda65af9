"""The worker's side of the control channel: hello and peer addresses at start, then the
supervisor's messages (probe, drain, stop, checkpoints) and this worker's stats."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TYPE_CHECKING

from ..transport.messages import Control
from .startup import FatalStartupError

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("topology.worker")
PEER_WAIT_SECS = 120.0


def hello(w: Worker) -> None:
    w.control.send({"t": Control.HELLO, "w": w.index, "inc": w.spec.incarnation,
                       "addr": w.address, "pid": os.getpid(), "python": sys.executable,
                       "host": w.spec.host})


def set_peers(w: Worker, peers: dict) -> None:
    """Peer addresses known up front (Spark's allGather); else the supervisor sends them."""
    connect_peers(w, peers)
    w._preset_peers = True


def wait_for_peers(w: Worker) -> None:
    deadline = time.monotonic() + PEER_WAIT_SECS
    hello(w)
    if getattr(w, "_preset_peers", False):
        return
    last_hello = time.monotonic()
    while time.monotonic() < deadline:
        if w.control.sock.poll(200):
            got_peers = False
            for msg in w.control.recv_all():  # every one, in order: a newer table replaces an older
                if msg.get("t") == Control.PEERS:
                    connect_peers(w, msg["peers"])
                    got_peers = True
                elif msg.get("t") == Control.STOP:
                    raise SystemExit(0)
            if got_peers:
                return
        if time.monotonic() - last_hello > 2.0:  # the supervisor may have missed it
            hello(w)
            last_hello = time.monotonic()
    raise FatalStartupError(f"worker {w.index}: no peer addresses from the supervisor in {PEER_WAIT_SECS}s")


def connect_peers(w: Worker, peers: dict) -> None:
    for index, addr in peers.items():
        index = int(index)
        if index != w.index and w._peer_addr.get(index) != addr:
            w.transport.connect(index, addr)  # a restarted peer binds a new address
            w._peer_addr[index] = addr


def handle_control(w: Worker) -> None:
    w.last_control = time.monotonic()
    for msg in w.control.recv_all():
        t = msg.get("t")
        if t == Control.PROBE:
            w._flush()
            spouts = w.local_spouts.values()
            cp = w.checkpoint_spout.machine if w.checkpoint_spout is not None else None
            w.control.send({
                "t": Control.PROBE_REPLY, "w": w.index, "inc": w.spec.incarnation, "seq": msg["seq"],
                "idle": not w.queue and not w.transport.backlogged() and not w.off_loop_inflight,
                "finished": all(s.finished or s.deactivated for s in spouts if not s.system),
                "input_done": all(s.finished or s.deactivated or s.input_finished for s in spouts if not s.system),
                "cp_final_done": None if cp is None else cp.final_done,
                "pending": sum(len(s.pending) for s in spouts),
                "held": windows_held(w),
                "at_cap": {s.component: s.max_pending for s in spouts if not s.system
                           and s.max_pending is not None and len(s.pending) >= s.max_pending},
                "counters": [w.sent_batches, w.recv_batches,
                             sum(e.stats.executed for e in w.local_bolts.values()),
                             sum(e.stats.emitted for e in spouts)],
            })
        elif t == Control.PEERS:
            connect_peers(w, msg["peers"])
        elif t == Control.DRAIN:
            w.draining = True
            for s in w.local_spouts.values():
                if not s.system:  # the checkpoint spout keeps going: the final commit needs it
                    s.deactivated = True
        elif t == Control.BARRIER:
            try:
                w.eo.barrier(msg["txid"])
            except Exception as e:  # noqa: BLE001 - Redis down etc.: roll back, retry later
                log.exception("exactly-once barrier %s failed", msg["txid"])
                w.exactly_once_failure(f"barrier {msg['txid']}: {e}")
        elif t == Control.COMMIT:
            try:
                w.eo_commit(msg["txid"])
            except Exception as e:  # noqa: BLE001
                log.exception("exactly-once commit %s failed", msg["txid"])
                w.exactly_once_failure(f"commit {msg['txid']}: {e}")
        elif t == Control.END_OF_INPUT:
            end_of_input(w, set(msg.get("components") or ()))
        elif t == Control.FINAL_CHECKPOINT:
            if w.checkpoint_spout is not None and w.checkpoint_spout.machine is not None:
                w.checkpoint_spout.machine.request_final(time.monotonic())
        elif t == Control.STOP:
            w.stop_requested = True


def windows_held(w: Worker) -> dict[str, int]:
    """Tuples held by this worker's windowed bolts, per component (only those holding any)."""
    held: dict[str, int] = {}
    for ex in w.local_bolts.values():
        n = getattr(ex.instance, "window_held", 0)
        if n:
            held[ex.component] = held.get(ex.component, 0) + n
    return held


def end_of_input(w: Worker, components: set[str]) -> None:
    """A bounded run's input is done: these components' windows evaluate what they hold."""
    for ex in w.local_bolts.values():
        if ex.component not in components:
            continue
        flush = getattr(ex.instance, "end_of_input", None)
        if flush is None:
            continue
        try:
            flush()
        except Exception as e:  # noqa: BLE001 - a user's evaluation raised: reported, the worker goes on
            ex.report_error("end of input", e)
    w._flush()


def stats_snapshot(w: Worker) -> dict:
    tasks: dict[int, dict] = {}
    for group in (w.local_spouts, w.local_bolts, w.local_ackers):
        for task, ex in group.items():
            tasks[task] = ex.stats.to_dict()
    for task, ex in w.local_bolts.items():
        extra = getattr(ex.instance, "window_stats", None)  # windowed bolts: late and dropped tuples
        if extra:
            tasks[task].update(extra)
    if w.queue:  # input queue depth per task (once per stats interval, not per tuple)
        depth: dict[int, int] = {}
        for ex, _ in w.queue:
            depth[ex.task] = depth.get(ex.task, 0) + 1
        for task, n in depth.items():
            tasks[task]["queue"] = n
    return {"tasks": tasks, "queue": len(w.queue), "pid": os.getpid(), "backlog": w.transport.backlogged(),
            "pending": sum(len(s.pending) for s in w.local_spouts.values()),
            "acker_pending": sum(len(a.acker) for a in w.local_ackers.values()),
            "misrouted": w.misrouted, "rejected": w.transport.rejected}


def send_stats(w: Worker, final: bool = False) -> None:
    errors, w.errors = w.errors, []
    w.control.send({"t": Control.STOPPED if final else Control.STATS, "w": w.index, "inc": w.spec.incarnation,
                       "stats": stats_snapshot(w), "errors": errors})
