"""Operators for a live run's day two: pause, resume, rebalance. Thin: the request and the wait
are the runtime's (topology_runtime/control/day_two.py, shared with the ``topology`` command),
Redis comes from the hook. The task log says what was done and the run's new shape; a failure
says what stands and the command that continues or undoes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from .hooks import TopologyHook


class _DayTwoOperator(BaseOperator):
    template_fields: Sequence[str] = ("topology_id", "redis_url")
    ui_color = "#efe8fb"

    def __init__(self, *, topology_id: str, redis_url: str | None = None, wait: float = 120.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topology_id = topology_id
        self.redis_url = redis_url
        self.wait = wait

    def _request(self, what: str, call: Any) -> dict:
        from topology_runtime.control.day_two import NotConfirmed, NotLive, Refused

        hook = TopologyHook(redis_url=self.redis_url)
        self.log.info("%s of topology %r requested", what, self.topology_id)
        try:
            shape = call(hook.control)
        except (NotLive, Refused, ValueError) as e:  # retrying cannot help: nothing changed
            raise AirflowFailException(f"{what} of topology {self.topology_id!r}: {e}") from e
        except NotConfirmed as e:
            raise AirflowException(f"{what} of topology {self.topology_id!r}: {e}") from e
        self.log.info("done: %s", shape.describe())
        return {"state": shape.state, "workers": shape.workers, "parallelism": shape.parallelism}


class PauseTopologyOperator(_DayTwoOperator):
    """Pause a live run's spouts (Storm's deactivate): in-flight trees finish, checkpoints go on.
    Waits until the run says ``paused``; pushes its shape to XCom."""

    def execute(self, context: Any) -> dict:
        from topology_runtime.control import day_two

        return self._request("pause", lambda cp: day_two.pause(cp, self.topology_id, True, self.wait))


class ResumeTopologyOperator(_DayTwoOperator):
    """Resume a paused run's spouts (Storm's activate)."""

    def execute(self, context: Any) -> dict:
        from topology_runtime.control import day_two

        return self._request("resume", lambda cp: day_two.pause(cp, self.topology_id, False, self.wait))


class RebalanceTopologyOperator(_DayTwoOperator):
    """Move a live run onto ``workers`` worker processes (None: as many as now) and give the
    components in ``parallelism`` (component -> tasks, or ``"C=N,C2=M"``) that many tasks: its
    spouts pause while in-flight trees drain, at most ``timeout`` s; every worker restarts with the
    state (a keyed component's by key group). Waits until it runs in the new shape; pushes it to
    XCom. A rescale the state does not allow fails the task, naming the component and a key."""

    template_fields: Sequence[str] = ("topology_id", "workers", "parallelism", "timeout", "redis_url")

    def __init__(self, *, topology_id: str, workers: int | str | None = None,
                 parallelism: dict[str, int] | None = None, timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(topology_id=topology_id, **kwargs)
        self.workers = workers
        self.parallelism = parallelism
        self.timeout = timeout

    def execute(self, context: Any) -> dict:
        from topology_runtime.control import day_two

        parallelism = _parallelism(self.parallelism)
        what = "rebalance to " + ", ".join(([f"{self.workers} worker(s)"] if self.workers not in (None, "") else [])
                                           + [f"{c}={n}" for c, n in parallelism.items()])
        return self._request(what, lambda cp: day_two.rebalance(
            cp, self.topology_id, _count(self.workers), parallelism, self.timeout, self.wait))


def _parallelism(v: Any) -> dict[str, int]:
    """Component -> tasks from a dict, JSON text or ``"C=N,C2=M"`` (a rendered template);
    ValueError naming what is wrong."""
    import json

    if v in (None, "", {}):
        return {}
    if isinstance(v, str):
        text = v.strip()
        if text.startswith("{"):
            v = json.loads(text)
        else:
            pairs = [p.partition("=") for p in text.split(",") if p.strip()]
            if any(not sep for _, sep, _ in pairs):
                raise ValueError(f"parallelism: expected COMPONENT=N[,COMPONENT=N], got {text!r}")
            v = {c.strip(): n.strip() for c, _, n in pairs}
    if not isinstance(v, dict):
        raise ValueError(f"parallelism: expected component -> number of tasks, got {v!r}")
    out = {}
    for c, n in v.items():
        try:
            out[str(c)] = int(n)
        except (TypeError, ValueError):
            raise ValueError(f"parallelism of {c!r}: expected an integer, got {n!r}") from None
    return out


def _count(v: int | str | None) -> int | None:
    """A worker count given as a number or a rendered template string (ValueError naming it)."""
    if v is None or isinstance(v, int):
        return v
    if str(v).strip() in ("", "None"):
        return None
    try:
        return int(str(v).strip())
    except ValueError:
        raise ValueError(f"workers must be an integer, got {v!r}") from None


class SavepointTopologyOperator(_DayTwoOperator):
    """Take savepoint ``name`` (default: a timestamp) of a topology: of a live exactly-once run
    at a checkpoint started at once, of a stopped one from its committed state. Pushes
    ``"ID/NAME"`` to XCom: what ``SubmitTopologyOperator(from_savepoint=...)`` takes; its txid
    under the key ``txid``."""

    template_fields: Sequence[str] = ("topology_id", "name", "redis_url")

    def __init__(self, *, topology_id: str, name: str | None = None, **kwargs: Any) -> None:
        super().__init__(topology_id=topology_id, **kwargs)
        self.name = name

    def execute(self, context: Any) -> str:
        from state.recovery import UnknownTopology
        from topology_runtime.control import day_two
        from topology_runtime.control.day_two import NotConfirmed, Refused

        hook = TopologyHook(redis_url=self.redis_url)
        try:
            m = day_two.savepoint(hook.control, self.topology_id, self.name or None, self.wait)
        except (UnknownTopology, Refused, ValueError) as e:
            raise AirflowFailException(f"savepoint of topology {self.topology_id!r}: {e}") from e
        except NotConfirmed as e:
            raise AirflowException(f"savepoint of topology {self.topology_id!r}: {e}") from e
        self.log.info("savepoint %s/%s of topology %r at txid %s: %d task state(s)", self.topology_id, m.name,
                      self.topology_id, m.txid, len(m.parts))
        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is not None:  # a later check waits for the first checkpoint past it
            ti.xcom_push(key="txid", value=m.txid)
        return f"{self.topology_id}/{m.name}"


class StopTopologyOperator(_DayTwoOperator):
    """Stop a live run: ``drain=True`` (default) stops its spouts and lets in-flight trees finish
    first. Waits until it is no longer live, at most ``wait`` s; a run that is not live already
    is fine (logged)."""

    template_fields: Sequence[str] = ("topology_id", "wait", "redis_url")

    def __init__(self, *, topology_id: str, drain: bool = True, **kwargs: Any) -> None:
        super().__init__(topology_id=topology_id, **kwargs)
        self.drain = drain

    def execute(self, context: Any) -> str:
        import time

        cp = TopologyHook(redis_url=self.redis_url).control
        if not cp.request_kill(self.topology_id, drain=self.drain):
            rec = cp.get(self.topology_id)
            self.log.info("topology %r is not live (%s): nothing to stop", self.topology_id,
                          rec.state if rec else "no record")
            return rec.state if rec else "unknown"
        self.log.info("%s of topology %r requested", "drain" if self.drain else "kill", self.topology_id)
        wait = float(self.wait)  # a rendered template may be text
        deadline = time.monotonic() + wait
        while cp.is_live(self.topology_id):
            if time.monotonic() >= deadline:
                rec = cp.get(self.topology_id)
                name = self.topology_id
                raise AirflowException(
                    f"topology {name!r} still live after {wait:g}s ({rec.display_state if rec else 'no record'}); "
                    f"the {'drain' if self.drain else 'kill'} request stands and cannot be taken back: it stops "
                    f"once {'its in-flight trees finish' if self.drain else 'its driver sees the request'} "
                    f"(`topology status {name}`); to stop it now: `topology kill {name}`")
            time.sleep(0.5)
        rec = cp.get(self.topology_id)
        self.log.info("topology %r stopped: %s", self.topology_id, rec.state if rec else "?")
        return rec.state if rec else "unknown"


UPGRADE_STEPS = ("drain", "savepoint", "upgrade", "verify")  # the topology_upgrade DAG's steps, in order


def upgrade_failure(cp: Any, topology_id: str, failed: str, savepoint: str | None, old: str | None,
                    new: str | None) -> str:
    """What the failed step ``failed`` (one of UPGRADE_STEPS) of an upgrade from code ``old`` to
    ``new`` left, read from the run's record now, and the commands that go on from there or undo it."""
    name = topology_id
    rec = cp.get(name)
    state = "no run record" if rec is None else rec.display_state + (", live" if rec.live else "")
    old = old or "OLD.MODULE:ATTR"
    flags = "(with the old run's --master, --workers and --conf)"
    if failed == "drain":
        head = f"the drain of {name!r} failed: "
        if rec is not None and rec.live:
            return (head + f"the old run is still live ({state}); nothing was saved or replaced. The drain request "
                    "stands and cannot be taken back: the run stops once its in-flight trees finish (`topology "
                    f"status {name}`). To go on: `topology kill {name} --drain --wait 600`, then trigger "
                    "topology_upgrade again")
        return (head + f"the old run is {state}; nothing was saved or replaced. To go on: trigger topology_upgrade "
                f"again; to undo: start the old code again from its committed state: `topology submit {old} "
                f"--name {name}` {flags}")
    if failed == "savepoint":
        return (f"the savepoint of {name!r} failed (its task log says why): the old run is {state} and this "
                f"upgrade took no savepoint. To go on: `topology savepoint {name} --name NAME` (first `topology "
                f"recover {name}` if its checkpoint is not committed), then `topology submit {new} --name {name} "
                f"--from-savepoint {name}/NAME`, or trigger topology_upgrade again with a savepoint_name not taken "
                f"yet; to undo: start the old code again from its committed state: `topology submit {old} --name "
                f"{name}` {flags}")
    what = "did not start" if failed == "upgrade" else "started but did not commit a checkpoint"
    stop = f"`topology kill {name}`, then " if rec is not None and rec.live else ""
    return (f"the new version of {name!r} {what}: {name!r} is {state}; savepoint {savepoint} stands. Roll back: "
            f"{stop}`topology submit {old} --name {name} --from-savepoint {savepoint}` {flags}")
