"""The end of a bounded run for windowed bolts, decided from the workers' probe replies (pure:
no I/O, no clock of its own).

Windows ack their tuples only as the tuples leave them, so once every spout has no new input
the tuples still in windows would wait for a message timeout. The supervisor sends end of input
to the windowed components that hold tuples, in rounds down the topology: what an upstream
window emits when it flushes reaches a downstream window before that one flushes.
"""

from __future__ import annotations

from ..plan.planner import Plan
from ..transport.messages import ProbeReply

WINDOW_STALL_SECS = 5.0


def windows_held(replies: list[ProbeReply]) -> dict[str, int]:
    """Tuples held in windows, per component, over the workers' replies."""
    held: dict[str, int] = {}
    for r in replies:
        for cid, n in r.held.items():
            held[cid] = held.get(cid, 0) + n
    return held


def end_of_input_round(plan: Plan, holding: set[str]) -> set[str]:
    """The components of ``holding`` with no other component of ``holding`` upstream (all of
    them if a cycle leaves none)."""
    upstream: dict[str, set[str]] = {}
    for sid, subs in plan.subscriptions.items():
        source = plan.streams[sid].component
        for sub in subs:
            upstream.setdefault(sub.target, set()).add(source)

    def ancestors(c: str) -> set[str]:
        seen: set[str] = set()
        todo = list(upstream.get(c, ()))
        while todo:
            a = todo.pop()
            if a not in seen:
                seen.add(a)
                todo.extend(upstream.get(a, ()))
        return seen

    ready = {c for c in holding if not (ancestors(c) - {c}) & holding}
    return ready or set(holding)


class WindowStallCheck:
    """Spouts capped by ``topology.max.spout.pending`` while every worker is idle and windows
    hold tuples: nothing can move until the message timeout fails the windows' tuples. ``update``
    returns (a capped spout, the explanation) once, after WINDOW_STALL_SECS of it."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.reported = False

    def update(self, replies: list[ProbeReply], now: float) -> tuple[str, str] | None:
        capped = {c: cap for r in replies for c, cap in r.at_cap.items()}
        held = windows_held(replies)
        if not (capped and held and all(r.idle for r in replies)):
            self.since = None
            return None
        if self.since is None:
            self.since = now
        if self.reported or now - self.since < WINDOW_STALL_SECS:
            return None
        self.reported = True
        return min(capped), (f"spout(s) {', '.join(f'{c} ({n} pending)' for c, n in sorted(capped.items()))} at "
                "topology.max.spout.pending (or topology.max.spout.pending.bytes) while windowed "
                f"bolt(s) hold {', '.join(f'{c} ({n} tuple(s))' for c, n in sorted(held.items()))}: "
                "a window acks its tuples only when they leave it, so nothing can move. Raise "
                "topology.max.spout.pending above the tuples a window holds (window length + sliding "
                "interval + lag), or use StatefulWindowedBolt (it acks at each checkpoint)")
