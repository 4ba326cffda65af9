"""A worker's start-up: its tasks' executors built, spouts opened, bolts prepared, state,
checkpoints and ticks wired. A task that cannot start is reported to the supervisor as fatal."""

from __future__ import annotations

import traceback
from typing import Any, Protocol

from ..api.builder import is_basic
from ..api.components import StatefulBolt, TopologyContext
from ..api.config import spout_pending_limits
from ..plan.planner import ACKER
from ..reliability.checkpointing import CHECKPOINT_SPOUT
from .acker_executor import AckerExecutor
from .bolt_executor import BoltExecutor
from .checkpoints import BarrierAlignment, StormCheckpointing
from .control_channel import WorkerControl
from .fatal import FatalStartupError
from .port import WorkerPort
from .routing import build_routes
from .spout_executor import SpoutExecutor
from .task_state import TaskStateProvider


class Worker(Protocol):
    """What start-up reads and fills in (the worker has it)."""

    plan: Any
    conf: dict[str, Any]
    spec: Any
    index: int
    port: WorkerPort
    ctl: WorkerControl
    eo: Any
    task_state: TaskStateProvider
    local_tasks: set[int]
    local_spouts: dict[int, SpoutExecutor]
    local_bolts: dict[int, BoltExecutor]
    local_ackers: dict[int, AckerExecutor]
    checkpoint_spout: Any


def start_tasks(w: Worker) -> None:
    plan = w.plan
    tasks_map = {c: list(t) for c, t in plan.component_tasks.items()}
    for task in sorted(w.local_tasks):
        cid = plan.task_component[task]
        if cid == ACKER:
            w.local_ackers[task] = AckerExecutor(task)
            continue
        if cid == CHECKPOINT_SPOUT:
            instance = w.task_state.checkpoint_spout()
            routes = build_routes(plan, cid, task, w.local_tasks)
            ctx = TopologyContext(task, cid, 0, tasks_map, w.spec.topology_id, w.index, plan.topology)
            ex = SpoutExecutor(w.port, task, cid, instance, routes, None)
            w.local_spouts[task] = ex
            w.checkpoint_spout = instance
            open_task(w, ex, instance.open, dict(w.conf), ctx)
            continue
        spec = plan.spec(cid)
        instance = spec.new_instance()
        conf = dict(w.conf)
        conf.update(plan.component_conf.get(cid, {}))
        ctx = TopologyContext(task, cid, plan.task_index(task), tasks_map, w.spec.topology_id, w.index, plan.topology)
        if spec.is_spout:
            ex = SpoutExecutor(w.port, task, cid, instance, {}, *spout_pending_limits(conf))
            w.local_spouts[task] = ex
            task_routes(w, ex, ctx)
            open_task(w, ex, instance.open, conf, ctx)
            if w.eo is not None:
                restore_spout(w, ex, task)
            if getattr(instance, "activate", None) is not None:
                ex.call_activation(True)  # Storm: a spout is activated once opened
        else:
            ex = BoltExecutor(w.port, task, cid, instance, {}, basic=is_basic(instance))
            w.local_bolts[task] = ex
            task_routes(w, ex, ctx)
            open_task(w, ex, instance.prepare, conf, ctx)
            if plan.stateful:
                state = bolt_state(w, ex, cid, task) if isinstance(instance, StatefulBolt) else None
                if w.eo is not None:
                    w.eo.add_bolt(BarrierAlignment(ex, plan.checkpoint_inputs[cid], state))
                else:
                    StormCheckpointing(ex, plan.checkpoint_inputs[cid], state)


def task_routes(w: Worker, ex, ctx: TopologyContext) -> None:
    """The task's routes, set before its open/prepare (which may take an emitter). Building them
    prepares the task's copies of custom groupings (with its context): a raise there is fatal
    for the task, as in open/prepare."""
    try:
        ex.routes = build_routes(w.plan, ex.component, ex.task, w.local_tasks, ctx)
    except Exception as e:
        report_fatal(w, ex, "custom grouping prepare", e)
        raise FatalStartupError(str(e)) from e


# --- state ---------------------------------------------------------------------------------------


def bolt_state(w: Worker, ex, component: str, task: int):
    try:
        return w.task_state.bolt_state(component, task)
    except Exception as e:
        report_fatal(w, ex, "state", e)
        raise FatalStartupError(str(e)) from e


def restore_spout(w: Worker, ex, task: int) -> None:
    try:
        st, snap = w.task_state.spout_position(ex.component, task)
        if snap is not None:
            ex.instance.restore(snap)
            ex.log.info("restored to the committed position %r", snap)
    except Exception as e:
        report_fatal(w, ex, "restore", e)
        raise FatalStartupError(str(e)) from e
    w.eo.add_spout(ex, st)


def report_fatal(w: Worker, ex, what: str, e: BaseException) -> None:
    tb = traceback.format_exc()
    ex.log.error("%s raised %s: %s\n%s", what, type(e).__name__, e, tb.rstrip())
    w.ctl.fatal(ex.component, ex.task, f"{ex.component}[{ex.task}] {what}: {type(e).__name__}: {e}", tb)


def open_task(w: Worker, ex, fn, conf: dict, ctx: TopologyContext) -> None:
    what = fn.__name__
    try:
        fn(conf, ctx)
    except Exception as e:
        tb = traceback.format_exc()
        ex.log.error("%s() raised %s: %s\n%s", what, type(e).__name__, e, tb.rstrip())
        w.ctl.fatal(ex.component, ex.task, f"{ex.component}[{ex.task}] {what}() raised {type(e).__name__}: {e}", tb)
        raise FatalStartupError(str(e)) from e


def tick_schedule(w: Worker, now: float) -> list[list]:
    sched = []
    by_comp: dict[str, list[BoltExecutor]] = {}
    for ex in w.local_bolts.values():
        by_comp.setdefault(ex.component, []).append(ex)
    for cid, exs in by_comp.items():
        freq = w.plan.component_conf.get(cid, {}).get("topology.tick.tuple.freq.secs",
                                                         w.conf.get("topology.tick.tuple.freq.secs"))
        if freq:
            sched.append([float(freq), exs, now + float(freq)])
    return sched
