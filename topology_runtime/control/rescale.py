"""A live run's rescale, as every launcher carries it out: the plan it goes on with (other numbers
of tasks for some components), checked against the state the id holds before anything changes,
and the stateful components recorded once every worker is down and the state settled.

A component may change its number of tasks when it keeps no state, or when its state is keyed
(state/keygroups.py: every entry lives in a key group, which changes hands); anything else is
refused naming the component and one key (state/namespaces.py), and the run goes on as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from state import namespaces
from state.namespaces import ALLOW_DROPPED_KEY, StateComponents
from state.providers import MEMORY, PROVIDER_KEY, is_redis_based

from ..api.builder import TopologyError
from ..plan.planner import Plan, replan, rescale

if TYPE_CHECKING:  # a run without Redis (LocalCluster's default) never loads redis
    from .control_plane import ControlPlane


def state_components(plan: Plan) -> StateComponents:
    """The run's stateful components, as the id's state registry compares them."""
    provider = plan.conf.get(PROVIDER_KEY) or MEMORY
    redis_layout = provider == MEMORY or is_redis_based(provider)
    return StateComponents(plan.state_components(), bool(plan.conf.get(ALLOW_DROPPED_KEY)),
                           dict.fromkeys(plan.keyed, plan.key_groups) if redis_layout else {}, redis_layout)


def checked_rescale(control: ControlPlane | None, name: str, plan: Plan, workers: int,
                    parallelism: Mapping[str, int] | None) -> Plan:
    """The plan with ``workers`` workers and ``parallelism``; TopologyError for an unknown
    component or a bad number, StateComponentsChanged when the id's state does not allow it."""
    if not parallelism:
        return replan(plan, workers)
    new = rescale(plan, workers, parallelism)
    if control is not None:
        namespaces.check(control.redis, name, state_components(new))
    return new


def plan_rescale(control: ControlPlane | None, name: str, plan: Plan, workers: int,
                 parallelism: Mapping[str, int] | None) -> tuple[Plan, str | None]:
    """(the plan to go on with, why the rescale was refused or None). Refused: the run keeps its
    components' numbers of tasks (``workers`` still applies)."""
    try:
        return checked_rescale(control, name, plan, workers, parallelism), None
    except (TopologyError, namespaces.StateComponentsChanged) as e:
        return replan(plan, workers), str(e)


def record_components(control: ControlPlane | None, name: str, token: int | None, plan: Plan) -> None:
    """Record ``plan``'s stateful components for the id (after the state was settled under the
    old numbers, before any worker of the new plan starts: its tasks check them)."""
    if control is None or token is None:
        return
    commands = namespaces.check(control.redis, name, state_components(plan))
    if commands:
        control.record_state(name, token, commands)


__all__ = ["checked_rescale", "plan_rescale", "record_components", "state_components"]
