"""Day-two requests to a live run through its control records, for the CLI and the Airflow
operators alike: pause, resume and rebalance. Each asks, then waits until the run's published
status shows the new shape; the errors say what stands and the command that continues or undoes
it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .control_plane import ControlPlane, RunRecord


class NotLive(RuntimeError):
    """No live run of that id (never ran, or ended)."""


class Refused(RuntimeError):
    """The request cannot be carried out on this run; nothing changed."""


class NotConfirmed(RuntimeError):
    """Asked, but the run did not show the result in time: the request stands."""


@dataclass
class Shape:
    """What a run looks like after a request."""

    name: str
    state: str  # display state: running / paused / ...
    workers: int | None
    parallelism: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, rec: RunRecord) -> Shape:
        st = rec.status or {}
        return cls(rec.name, rec.display_state, st.get("worker_count"), dict(st.get("parallelism") or {}))

    def describe(self) -> str:
        shape = ", ".join(f"{c}={n}" for c, n in self.parallelism.items())
        return f"{self.name}: {self.state} on {self.workers} worker(s)" + (f" ({shape})" if shape else "")


def _not_live(rec: RunRecord | None, name: str, doing: str) -> NotLive:
    if rec is None:
        return NotLive(f"no live run named {name!r} to {doing}: Redis has no record of it (`topology list` shows "
                       "the runs it knows)")
    return NotLive(f"no live run named {name!r} to {doing}: it is {rec.state} (`topology status {name}`)")


def _live(cp: ControlPlane, name: str, doing: str) -> RunRecord:
    rec = cp.get(name)
    if rec is None or not rec.live:
        raise _not_live(rec, name, doing)
    return rec


def _wait(cp: ControlPlane, name: str, wait: float, done, what: str, undo: str) -> Shape:
    deadline = time.monotonic() + wait
    while True:
        rec = cp.get(name)
        if rec is None or not rec.live:
            raise NotLive(f"{name!r} ended ({rec.state if rec else 'no record'}) before it confirmed the {what}: "
                          f"`topology status {name}` says why; to go on, start it again (`topology run|submit "
                          f"MODULE:ATTR --name {name}`)")
        if done(rec):
            return Shape.of(rec)
        if time.monotonic() >= deadline:
            raise NotConfirmed(f"{name!r} has not confirmed the {what} after {wait:g}s and is now "
                               f"{Shape.of(rec).describe()}; the request stands (`topology status {name}` "
                               f"shows when it is done; to undo: `{undo}`)")
        time.sleep(0.25)


def pause(cp: ControlPlane, name: str, paused: bool, wait: float = 15.0) -> Shape:
    """Pause (or resume) the run's spouts and wait for the run to say so."""
    verb = "pause" if paused else "resume"
    _live(cp, name, verb)
    if not cp.request_pause(name, paused):
        raise _not_live(cp.get(name), name, verb)
    undo = f"topology {'resume' if paused else 'pause'} {name}"
    return _wait(cp, name, wait, lambda rec: rec.paused == paused, verb, undo)


def rebalance(cp: ControlPlane, name: str, workers: int | None, parallelism: dict[str, int] | None = None,
              timeout: float | None = None, wait: float = 120.0) -> Shape:
    """Move the run onto ``workers`` worker processes (None: as many as now) and give the
    components in ``parallelism`` that many tasks; wait until it runs so."""
    parallelism = dict(parallelism or {})
    if workers is None and not parallelism:
        raise ValueError("rebalance needs --workers N or --parallelism COMPONENT=N")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"rebalance needs workers >= 1, got {workers!r}")
    for c, n in parallelism.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"rebalance --parallelism {c}={n!r}: the number of tasks must be an integer >= 1")
    rec = _live(cp, name, "rebalance")
    before = Shape.of(rec)
    want_workers = before.workers if workers is None else workers
    if before.workers == want_workers and all(before.parallelism.get(c) == n for c, n in parallelism.items()):
        return before
    if not cp.request_rebalance(name, workers, timeout, parallelism):
        raise _not_live(cp.get(name), name, "rebalance")
    undo = f"topology rebalance {name} --workers {before.workers}" + "".join(
        f" --parallelism {c}={before.parallelism.get(c)}" for c in parallelism if c in before.parallelism)

    def done(r: RunRecord) -> bool:
        refused = cp.rebalance_refusal(name)
        if refused is not None:  # the driver said no: its components keep their numbers of tasks
            raise Refused(f"{name!r}: {refused}; the run goes on with its components' numbers of tasks as they "
                          f"were ({Shape.of(r).describe()}; `topology status {name}` shows it now); to go on, "
                          f"ask for a shape it allows: `topology rebalance {name} --workers N "
                          "[--parallelism COMPONENT=N]`")
        st = r.status or {}
        shape = st.get("parallelism") or {}
        return (st.get("worker_count") == want_workers and all(shape.get(c) == n for c, n in parallelism.items())
                and r.state == "running")

    what = f"rebalance to {want_workers} worker(s)" + "".join(f", {c}={n}" for c, n in parallelism.items())
    return _wait(cp, name, wait, done, what, undo)


def savepoint(cp: ControlPlane, name: str, savepoint_name: str | None = None, wait: float = 120.0):
    """Take a savepoint of ``name``: of a live run at a checkpoint it starts now (exactly-once),
    of a stopped one from its committed state. Returns the manifest (state/savepoints.py)."""
    from state import savepoints
    from state.connection import connect
    from state.layout import check_topology_id
    from state.recovery import UnknownTopology, is_known, unknown_message

    sp = check_topology_id(savepoint_name or savepoints.default_name(), "savepoint name")
    client = connect(cp.url)
    rec = cp.get(name)
    if rec is None or not rec.live or not cp.request_savepoint(name, sp):
        if not is_known(client, name):
            raise UnknownTopology(unknown_message(client, name))
        try:
            return savepoints.take(client, name, sp)
        except savepoints.SavepointRefused as e:
            raise Refused(str(e)) from None
    if client.hexists(savepoints.savepoints_key(name), sp):
        raise Refused(f"{name!r} already has a savepoint {sp!r}: choose another name or delete it first "
                      f"(`topology savepoint-delete {name} {sp}`); the run goes on unchanged")
    deadline = time.monotonic() + wait
    while True:
        try:
            return savepoints.get(client, name, sp)
        except savepoints.NoSuchSavepoint:
            pass
        why = savepoints.failure(client, name, sp)
        if why is not None:
            raise Refused(f"{name!r}: savepoint {sp!r} not taken: {why}; the run goes on unchanged")
        rec = cp.get(name)
        if rec is None or not rec.live:
            raise NotLive(f"{name!r} ended ({rec.state if rec else 'no record'}) before it took savepoint {sp!r}; "
                          f"a stopped run's committed state can be saved: `topology savepoint {name} --name {sp}`")
        if time.monotonic() >= deadline:
            raise NotConfirmed(f"{name!r} has not taken savepoint {sp!r} after {wait:g}s and is "
                               f"{Shape.of(rec).describe()}; the request stands (`topology savepoints {name}` "
                               f"lists it once taken; to drop it then: `topology savepoint-delete {name} {sp}`)")
        time.sleep(0.2)
