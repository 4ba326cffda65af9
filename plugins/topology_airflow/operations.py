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
    """Move a live run onto ``workers`` worker processes (its spouts pause while in-flight trees
    drain, at most ``timeout`` s; every worker restarts with the same tasks and state). Waits until
    it runs on the new number; pushes its shape to XCom. ``parallelism`` changes are refused in
    this version, and so is a run on Spark (the log says what to do instead)."""

    template_fields: Sequence[str] = ("topology_id", "workers", "parallelism", "timeout", "redis_url")

    def __init__(self, *, topology_id: str, workers: int | str | None = None,
                 parallelism: dict[str, int] | None = None, timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(topology_id=topology_id, **kwargs)
        self.workers = workers
        self.parallelism = parallelism
        self.timeout = timeout

    def execute(self, context: Any) -> dict:
        from topology_runtime.control import day_two

        return self._request(f"rebalance to {self.workers} worker(s)", lambda cp: day_two.rebalance(
            cp, self.topology_id, _count(self.workers), dict(self.parallelism or {}), self.timeout, self.wait))


def _count(v: int | str | None) -> int | None:
    """A worker count given as a number or a rendered template string (ValueError naming it)."""
    if v is None or isinstance(v, int):
        return v
    try:
        return int(str(v).strip())
    except ValueError:
        raise ValueError(f"workers must be an integer, got {v!r}") from None
