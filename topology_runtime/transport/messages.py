"""The control messages between the supervisor and its workers: one class per kind, in this one
module. A message is built by its class (the constructor names every field) and read back by
``parse``, which checks the kind and the fields and names what is wrong.

On the wire a message is a msgpack map: ``t`` is its kind, the other keys its fields. A worker's
messages carry ``w`` (its index) and ``inc`` (its incarnation: messages from an earlier one are
ignored). The sockets sign and check them (sockets.py); nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar


class ControlMessageError(ValueError):
    """An authenticated control message that is not one this version understands."""


@dataclass(frozen=True)
class ControlMessage:
    KIND: ClassVar[str] = ""

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": self.KIND}
        for f in fields(self):
            out[f.name] = getattr(self, f.name)
        return out


# --- worker -> supervisor -------------------------------------------------------------------------


@dataclass(frozen=True)
class FromWorker(ControlMessage):
    w: int  # the worker's index
    inc: int  # its incarnation


@dataclass(frozen=True)
class Hello(FromWorker):
    """A worker (incarnation) started: where it listens for data."""

    KIND = "hello"
    addr: str
    pid: int
    python: str
    host: str


@dataclass(frozen=True)
class Ready(FromWorker):
    """Every task opened or prepared."""

    KIND = "ready"


@dataclass(frozen=True)
class Stats(FromWorker):
    """Periodic counters (per task and per worker) and the errors since the last report."""

    KIND = "stats"
    stats: dict
    errors: list


@dataclass(frozen=True)
class Stopped(Stats):
    """The final stats: the worker is ending."""

    KIND = "stopped"


@dataclass(frozen=True)
class Fatal(FromWorker):
    """open/prepare/state set-up raised: the worker cannot start."""

    KIND = "fatal"
    component: str
    task: int
    error: str
    traceback: str


@dataclass(frozen=True)
class ProbeReply(FromWorker):
    """What the supervisor needs to tell that a bounded run is done."""

    KIND = "probe_reply"
    seq: int
    idle: bool  # nothing queued, nothing waiting to be sent, nothing running off the loop
    finished: bool  # every user spout finished (or is deactivated)
    input_done: bool  # every user spout finished or has no new input (finish_input)
    pending: int  # spout tuple trees not yet acked or failed
    counters: list  # [sent batches, received batches, bolt executes, spout emits]: moves while busy
    held: dict = field(default_factory=dict)  # windowed component -> tuples its windows hold
    at_cap: dict = field(default_factory=dict)  # spout component -> pending limit it is at
    cp_final_done: bool | None = None  # stateful: the final checkpoint committed


@dataclass(frozen=True)
class InputDrained(FromWorker):
    """Unasked, once an incarnation: every user spout of the worker is done and nothing is
    queued. A bounded run may be ending: the supervisor probes now, not at its next interval."""

    KIND = "input_drained"


@dataclass(frozen=True)
class BarrierDone(FromWorker):
    """Exactly-once: a spout task's barrier tree for ``txid`` completed."""

    KIND = "barrier_done"
    task: int
    txid: int


@dataclass(frozen=True)
class Committed(FromWorker):
    """Exactly-once: this worker committed checkpoint ``txid``."""

    KIND = "committed"
    txid: int


@dataclass(frozen=True)
class ExactlyOnceFailure(FromWorker):
    """Exactly-once: something failed here; roll every task back."""

    KIND = "eo_failure"
    reason: str


@dataclass(frozen=True)
class RunFailed(FromWorker):
    """A component gave up (no retry can help): end the run failed."""

    KIND = "run_failed"
    component: str
    task: int
    error: str


# --- supervisor -> worker -------------------------------------------------------------------------


@dataclass(frozen=True)
class Peers(ControlMessage):
    """Worker index (a string, as msgpack map keys from JSON-minded peers) -> data address."""

    KIND = "peers"
    peers: dict


@dataclass(frozen=True)
class Probe(ControlMessage):
    """Answer with a ProbeReply carrying ``seq``."""

    KIND = "probe"
    seq: int


@dataclass(frozen=True)
class Drain(ControlMessage):
    """Stop the spouts; let pending trees finish."""

    KIND = "drain"


@dataclass(frozen=True)
class Pause(ControlMessage):
    """Deactivate the user spouts (no next_tuple); everything else goes on."""

    KIND = "pause"


@dataclass(frozen=True)
class Resume(ControlMessage):
    """Activate the user spouts again."""

    KIND = "resume"


@dataclass(frozen=True)
class Stop(ControlMessage):
    """End the worker."""

    KIND = "stop"


@dataclass(frozen=True)
class FinalCheckpoint(ControlMessage):
    """Stateful: take one more checkpoint before completing."""

    KIND = "final_checkpoint"


@dataclass(frozen=True)
class EndOfInput(ControlMessage):
    """Every spout has no new input: these windowed components evaluate what they hold."""

    KIND = "end_of_input"
    components: list


@dataclass(frozen=True)
class Barrier(ControlMessage):
    """Exactly-once: spouts snapshot their position and emit the barrier of ``txid``."""

    KIND = "barrier"
    txid: int


@dataclass(frozen=True)
class Commit(ControlMessage):
    """Exactly-once: commit what was prepared for ``txid``."""

    KIND = "commit"
    txid: int


@dataclass(frozen=True)
class Inspect(ControlMessage):
    """What the worker logs and samples: ``log_level`` {logger, level, until} and ``sample``
    {component, percent, until} (until: wall-clock seconds), each empty when not asked."""

    KIND = "inspect"
    log_level: dict
    sample: dict


KINDS: dict[str, type[ControlMessage]] = {
    cls.KIND: cls for cls in (
        Hello, Ready, Stats, Stopped, Fatal, ProbeReply, InputDrained, BarrierDone, Committed, ExactlyOnceFailure, RunFailed,
        Peers, Probe, Drain, Pause, Resume, Stop, FinalCheckpoint, EndOfInput, Barrier, Commit, Inspect)
}

_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "str": (str,), "bool": (bool,), "dict": (dict,),
                                       "list": (list,), "bool | None": (bool, type(None))}


def parse(wire: Any) -> ControlMessage:
    """The message a wire map holds; ControlMessageError names the kind and field at fault."""
    if not isinstance(wire, dict):
        raise ControlMessageError(f"a control message is a map, got {type(wire).__name__}")
    kind = wire.get("t")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ControlMessageError(f"unknown control message kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in wire:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ControlMessageError(f"control message {kind!r}: no field {f.name!r}")
            continue
        v = wire[f.name]
        ok = _TYPES.get(str(f.type))
        if ok is not None and not isinstance(v, ok) or (ok == (int,) and isinstance(v, bool)):
            raise ControlMessageError(f"control message {kind!r}: field {f.name!r} is {type(v).__name__}, "
                                      f"not {f.type}")
        values[f.name] = v
    return cls(**values)
