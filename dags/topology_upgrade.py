"""Upgrade a running topology to new code with a way back: drain it, take a savepoint, start the
new code from the savepoint under the same id, and verify that it runs (its first checkpoint past
the savepoint committed). The new version is left running. If a step fails, the last task says
what that step left and the command that goes on from there or rolls back. Triggered by a person
from the UI form (or the REST API)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task
from topology_airflow import (
    SavepointTopologyOperator,
    StopTopologyOperator,
    SubmitTopologyOperator,
    TopologySensor,
)

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
        "drain_timeout": Param(300, type="number", exclusiveMinimum=0, title="Drain timeout (s)",
                               description="How long the old run may take to finish its in-flight trees"),
    },
    tags=["topology"],
) as dag:
    drain = StopTopologyOperator(task_id="drain", topology_id="{{ params.topology_id }}", drain=True,
                                 wait="{{ params.drain_timeout }}")
    savepoint = SavepointTopologyOperator(task_id="savepoint", topology_id="{{ params.topology_id }}",
                                          name="{{ params.savepoint_name }}")
    # Started, not followed to its end: a new version that runs for months must not hold the DAG run.
    upgrade = SubmitTopologyOperator(
        task_id="upgrade", topology="{{ params.new_topology }}", name="{{ params.topology_id }}",
        workers="{{ params.workers }}", conf="{{ params.conf }}",
        from_savepoint="{{ ti.xcom_pull(task_ids='savepoint') }}", wait_for_completion=False,
    )
    # Running is not enough: the new code must get as far as committing state past the savepoint.
    verify = TopologySensor(
        task_id="verify", name="{{ params.topology_id }}", condition="txid", txid_kind="any",
        txid="{{ ti.xcom_pull(task_ids='savepoint', key='txid') + 1 }}",
        mode="poke", poke_interval=2, timeout=600,
    )

    @task(trigger_rule="one_failed")
    def rollback_hint(params: dict | None = None, ti=None) -> None:
        """A step failed: log what it left and the command that goes on from there or undoes it."""
        from topology_airflow import TopologyHook
        from topology_airflow.operations import UPGRADE_STEPS, upgrade_failure

        params = params or {}
        # Each step pushes a value when it succeeds: the first without one is the one that failed.
        failed = next((t for t in UPGRADE_STEPS[:-1] if ti.xcom_pull(task_ids=t) is None), UPGRADE_STEPS[-1])
        hint = upgrade_failure(TopologyHook().control, str(params.get("topology_id")), failed,
                               ti.xcom_pull(task_ids="savepoint"), params.get("rollback_topology"),
                               params.get("new_topology"))
        ti.xcom_push(key="hint", value=hint)
        print(hint)
        raise RuntimeError(hint)  # the run ends failed; this task's log says how to go on or back

    drain >> savepoint >> upgrade >> verify
    [drain, savepoint, upgrade, verify] >> rollback_hint()
