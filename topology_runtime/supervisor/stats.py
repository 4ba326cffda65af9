"""A run's figures from its workers' reports: per-task counters and latency histograms summed
over incarnations (and plans), then per component."""

from __future__ import annotations

from ..api.builder import RESERVED_PREFIXES
from ..api.status import COUNTERS, ComponentStats, LatencyHistogram
from ..plan.planner import Plan


def is_system(component: str) -> bool:
    """The runtime's own components (acker, checkpoint spout): ids users may not take."""
    return component.startswith(RESERVED_PREFIXES)


def add_task_stats(into: dict, task: int, s: dict) -> None:
    cur = into.get(task)
    if cur is None:
        into[task] = {k: s.get(k, 0) for k in COUNTERS} | {
            "execute": LatencyHistogram.from_dict(s.get("execute", {})).to_dict(),
            "complete": LatencyHistogram.from_dict(s.get("complete", {})).to_dict(),
        }
        return
    for k in COUNTERS:
        cur[k] = cur.get(k, 0) + s.get(k, 0)
    for h in ("execute", "complete"):
        merged = LatencyHistogram.from_dict(cur[h])
        merged.merge(s.get(h, {}))
        cur[h] = merged.to_dict()


def rekey_task_stats(carried: dict, old: Plan, new: Plan) -> dict:
    """Stats of an earlier plan's tasks under a plan with other task ids (a rescale): each
    component's figures go to its first task of the new plan, so its totals carry over."""
    out: dict = {}
    for task, s in carried.items():
        component = old.task_component.get(int(task))
        tasks = new.component_tasks.get(component) if component is not None else None
        if tasks:
            add_task_stats(out, tasks[0], s)
    return out


def component_stats(plan: Plan, finished: list[dict], live: list[dict]) -> tuple[dict, dict]:
    """(user components, system components) -> ComponentStats, from the stats of finished
    incarnations and of the live ones (whose queue depths, capacities and execute latencies of
    the last stats interval count)."""
    per_task: dict[int, dict] = {}
    for group in (*finished, *live):
        for task, s in group.items():
            add_task_stats(per_task, int(task), s)
    live_queue = {int(t): s.get("queue", 0) for group in live for t, s in group.items()}
    live_capacity = {int(t): s["capacity"] for group in live for t, s in group.items() if s.get("capacity") is not None}
    # [timed executes, their total ms] in each task's last stats interval
    live_execute = {int(t): s["execute_interval"] for group in live for t, s in group.items()
                    if s.get("execute_interval")}
    components: dict[str, ComponentStats] = {}
    system: dict[str, ComponentStats] = {}
    for cid, tasks in plan.component_tasks.items():
        cs = ComponentStats(tasks=len(tasks))
        ex_h, co_h = LatencyHistogram(), LatencyHistogram()
        timed, timed_ms = 0, 0.0
        for t in tasks:
            s = per_task.get(t)
            if not s:
                continue
            for k in COUNTERS:
                setattr(cs, k, getattr(cs, k) + s.get(k, 0))
            cs.queue_depth += live_queue.get(t, 0)
            if t in live_capacity:
                cs.capacity = max(cs.capacity or 0.0, live_capacity[t])
            if t in live_execute:
                timed += int(live_execute[t][0])
                timed_ms += float(live_execute[t][1])
            ex_h.merge(s["execute"])
            co_h.merge(s["complete"])
        # Over the last interval, as capacity is; the run's mean when no execute was timed in it
        # (one in 32 is: a component that executed fewer tuples, or none, in that interval).
        cs.execute_latency_ms = round(timed_ms / timed, 3) if timed else ex_h.mean
        cs.complete_latency_ms = co_h.mean
        cs.complete_latency_p50_ms = co_h.percentile(50)
        cs.complete_latency_p99_ms = co_h.percentile(99)
        (system if is_system(cid) else components)[cid] = cs
    return components, system
