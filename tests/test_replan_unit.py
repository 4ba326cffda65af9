"""Losing Spark slots: the same tasks re-planned onto fewer workers, the restart back-off, and
the supervisor carrying a run's figures across plans."""

from __future__ import annotations

import pytest
from runtime_components import plan_wordcount

from topology_runtime import ConfigError
from topology_runtime.api.config import resolve_config
from topology_runtime.plan import build_plan, replan
from topology_runtime.supervisor.restart_backoff import RestartBackoff
from topology_runtime.supervisor.run_supervisor import RunSupervisor


def _topology():
    return plan_wordcount(words=2, split=3, count=4)


def test_replan_keeps_every_task_id_and_moves_tasks_onto_fewer_workers():
    plan = build_plan(_topology(), resolve_config({}), 4)
    small = replan(plan, 2)
    assert small.workers == 2
    assert small.component_tasks == plan.component_tasks  # user tasks, $checkpointspout and ackers
    assert small.acker_tasks == plan.acker_tasks and len(small.acker_tasks) == 4
    assert set(small.task_worker.values()) == {0, 1}
    assert sorted(small.task_worker) == sorted(plan.task_worker)
    assert small.checkpoint_inputs == plan.checkpoint_inputs
    back = replan(small, 4)  # grows back: the original placement
    assert back.task_worker == plan.task_worker


def test_backoff_grows_caps_and_gives_up_after_consecutive_failures():
    b = RestartBackoff(initial_secs=1, max_secs=5, multiplier=2, reset_secs=60, max_failures=5)
    assert [b.failed(t) for t in range(5)] == [1, 2, 4, 5, 5]
    assert b.failed(10) is None  # five failures in a row: give up


def test_a_stage_that_ran_healthy_starts_a_new_streak():
    b = RestartBackoff(initial_secs=1, max_secs=30, multiplier=2, reset_secs=60, max_failures=3)
    b.started(0)
    assert b.failed(10) == 1  # up 10 s: counts
    b.started(11)
    assert b.failed(20) == 2
    b.started(21)
    assert b.failed(200) == 1  # up 179 s >= 60: the streak starts over
    b.started(201)
    assert b.failed(202) == 2 and b.failed(203) == 4
    assert b.failed(204) is None
    assert b.total == 5


def test_backoff_keys_are_checked_by_name():
    conf = resolve_config({"topology.restart.backoff.max.secs": 0})
    assert RestartBackoff.from_conf(conf).failed(0) == 0
    with pytest.raises(ConfigError, match="topology.restart.backoff.multiplier"):
        resolve_config({"topology.restart.backoff.multiplier": 0.5})
    with pytest.raises(ConfigError, match="topology.restart.backoff.initial.secs"):
        resolve_config({"topology.restart.backoff.initial.secs": "soon"})


def test_supervisor_keeps_a_runs_figures_across_plans():
    plan = build_plan(_topology(), resolve_config({}), 4)
    sup = RunSupervisor("replan", plan)
    try:
        split = plan.component_tasks["split"]
        for i, task in enumerate(split):
            sup.slots[plan.task_worker[task]].stats[task] = {"executed": 10 * (i + 1)}
        sup.replan(replan(plan, 2))
        assert len(sup.slots) == 2
        assert sup.status().components["split"].executed == 60
        sup.slots[0].stats[split[0]] = {"executed": 5}  # the new incarnation's own counts add up
        assert sup.status().components["split"].executed == 65
    finally:
        sup.close()
