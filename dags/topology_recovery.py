"""Recover a stopped topology's state after a crash: commit or roll back the checkpoint it left
prepared. Triggered by a person from the UI form (or the REST API with conf)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param
from topology_airflow import TopologyRecoveryOperator

with DAG(
    dag_id="topology_recovery",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=True,
    params={
        "topology_id": Param("", type="string", minLength=1, title="Topology id",
                             description="The run name / topology id whose state to recover; an id this "
                                         "Redis has no record of fails the run, naming the ids it knows"),
        "action": Param("auto", type="string", enum=["auto", "rollback", "commit"], title="Action",
                        description="auto follows the checkpoint record (PREPARING -> roll back, "
                                    "COMMITTING -> commit); a forced action that would split txids is refused"),
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="Report only; change nothing (on by default: read the report, then run "
                                     "again with it off)"),
    },
    tags=["topology"],
) as dag:
    TopologyRecoveryOperator(
        task_id="recover",
        topology_id="{{ params.topology_id }}",
        action="{{ params.action }}",
        dry_run="{{ params.dry_run }}",
    )
