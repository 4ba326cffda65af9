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
WINDOW_QUIET_SECS = 10.0


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
    """Two ways windows can wait for ever, each explained once (``update`` returns
    ``(is_error, component, text)``):

    * spouts capped by ``topology.max.spout.pending`` while windows hold tuples and nothing moves:
      nothing can until the message timeout fails the windows' tuples (an error of the run, after
      WINDOW_STALL_SECS);
    * windows holding tuples, no spout saying its input is done and nothing moving, for
      WINDOW_QUIET_SECS: fine for an unbounded stream that went quiet, a hang for a bounded run
      whose spout waits for its acks before finish() (a hint for the log).

    "Nothing moves" is the probes' counters (batches, executes, emits) standing still: tick
    tuples, which windows keep getting, count for none of them."""

    def __init__(self) -> None:
        self.vector: list | None = None
        self.since = 0.0
        self.reported: set[bool] = set()

    def update(self, replies: list[ProbeReply], now: float) -> tuple[bool, str, str] | None:
        held = windows_held(replies)
        vector = [(r.inc, *r.counters) for r in replies]
        if not held or vector != self.vector:
            self.vector, self.since = (vector if held else None), now
            return None
        capped = {c: cap for r in replies for c, cap in r.at_cap.items()}
        holding = ", ".join(f"{c} ({n} tuple(s))" for c, n in sorted(held.items()))
        still = now - self.since
        if capped:
            if True in self.reported or still < WINDOW_STALL_SECS:
                return None
            self.reported.add(True)
            return True, min(capped), (
                f"spout(s) {', '.join(f'{c} ({n} pending)' for c, n in sorted(capped.items()))} at "
                "topology.max.spout.pending (or topology.max.spout.pending.bytes) while windowed "
                f"bolt(s) hold {holding}: a window acks its tuples only when they leave it, so nothing can "
                "move. Raise topology.max.spout.pending above the tuples a window holds (window length + "
                "sliding interval + lag), or use StatefulWindowedBolt (it acks at each checkpoint)")
        if False in self.reported or still < WINDOW_QUIET_SECS:
            return None
        self.reported.add(False)
        return False, min(held), (
            f"windowed bolt(s) {holding} wait for more input: nothing has moved for "
            f"{WINDOW_QUIET_SECS:.0f} s. If this is a bounded run, its spouts should call finish_input() "
            "once they have nothing new to emit, so the windows get end of input (docs/windowing.md)")
