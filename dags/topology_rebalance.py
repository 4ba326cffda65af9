"""Change a live topology's shape or pause it: rebalance onto another number of workers or
rescale components, pause or resume its spouts. Triggered by a person from the UI form (or the
REST API with conf)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task
from topology_airflow import PauseTopologyOperator, RebalanceTopologyOperator, ResumeTopologyOperator

with DAG(
    dag_id="topology_rebalance",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=True,
    params={
        "topology_id": Param("wordcount", type="string", minLength=1, title="Topology id",
                             description="The live run to change"),
        "action": Param("rebalance", type="string", enum=["rebalance", "pause", "resume"], title="Action",
                        description="rebalance: go on with Workers worker processes and the Parallelism "
                                    "given (the spouts pause while in-flight trees drain, then every worker "
                                    "restarts with the state); pause / resume: the spouts only"),
        "workers": Param(2, type=["null", "integer"], minimum=1, title="Workers",
                         description="For rebalance (empty: as many as now)"),
        "parallelism": Param({}, type="object", title="Parallelism",
                             description="For rebalance: component -> new number of tasks, e.g. "
                                         "{\"count\": 4}. Stateless components, and stateful ones keyed by their "
                                         "fields grouping (docs/state.md); other state is refused"),
        "timeout": Param(None, type=["null", "number"], title="Drain timeout (s)",
                         description="For rebalance: how long in-flight trees may take to finish first "
                                     "(default: the topology's message timeout)"),
    },
    tags=["topology"],
) as dag:

    @task.branch(task_id="choose")
    def choose(params: dict | None = None) -> str:
        return str((params or {}).get("action", "rebalance"))

    rebalance = RebalanceTopologyOperator(task_id="rebalance", topology_id="{{ params.topology_id }}",
                                          workers="{{ params.workers }}", parallelism="{{ params.parallelism }}",
                                          timeout="{{ params.timeout }}")
    pause = PauseTopologyOperator(task_id="pause", topology_id="{{ params.topology_id }}")
    resume = ResumeTopologyOperator(task_id="resume", topology_id="{{ params.topology_id }}")
    choose() >> [rebalance, pause, resume]
