"""Upgrade a running topology to new code with a way back: drain it, take a savepoint, start the
new code from the savepoint under the same id. If the new code fails, the savepoint stays and the
last task says how to roll back. Triggered by a person from the UI form (or the REST API)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task
from topology_airflow import SavepointTopologyOperator, StopTopologyOperator, SubmitTopologyOperator

with DAG(
    dag_id="topology_upgrade",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=True,
    params={
        "topology_id": Param("wordcount", type="string", minLength=1, title="Topology id",
                             description="The run to upgrade; the new code runs under the same id"),
        "new_topology": Param("examples.stateful_wordcount:topology", type="string", minLength=3,
                              title="New code", description="package.module:attribute of the new version"),
        "workers": Param(2, type="integer", minimum=1, title="Workers"),
        "conf": Param({}, type="object", title="Config",
                      description="The new run's config (its state settings must match the saved state's)"),
        "savepoint_name": Param(None, type=["null", "string"], title="Savepoint name",
                                description="Default: a timestamp"),
        "rollback_topology": Param(None, type=["null", "string"], title="Old code",
                                   description="package.module:attribute of the running version, for the "
                                               "rollback command the DAG prints if the upgrade fails"),
    },
    tags=["topology"],
) as dag:
    drain = StopTopologyOperator(task_id="drain", topology_id="{{ params.topology_id }}", drain=True, wait=300)
    savepoint = SavepointTopologyOperator(task_id="savepoint", topology_id="{{ params.topology_id }}",
                                          name="{{ params.savepoint_name }}")
    upgrade = SubmitTopologyOperator(
        task_id="upgrade", topology="{{ params.new_topology }}", name="{{ params.topology_id }}",
        workers="{{ params.workers }}", conf="{{ params.conf }}",
        from_savepoint="{{ ti.xcom_pull(task_ids='savepoint') }}",
    )

    @task(trigger_rule="one_failed")
    def rollback_hint(params: dict | None = None, ti=None) -> None:
        """The upgrade failed: the savepoint stays; say how to go back to it."""
        params = params or {}
        saved = ti.xcom_pull(task_ids="savepoint") if ti is not None else None
        old = params.get("rollback_topology") or "OLD.MODULE:ATTR"
        hint = (f"the upgrade of {params.get('topology_id')!r} failed; its savepoint {saved} stays. Roll back with: "
                f"topology submit {old} --name {params.get('topology_id')} --from-savepoint {saved} "
                f"(or trigger topology_upgrade with new_topology={old})")
        print(hint)
        raise RuntimeError(hint)  # the run ends failed, this task's log says how to go back

    drain >> savepoint >> upgrade >> rollback_hint()
