"""Where a topology's state lives in Redis (docs/state.md).

Each task's keys share the Cluster hash tag ``{ID:TASK}``, so its commit is one atomic script
on one node; the topology's control records share ``{ID:ctl}``.

    topology:{ID:TASK}:state      hash   committed key -> value (msgpack)
    topology:{ID:TASK}:prepare    hash   prepared, uncommitted writes (deletes as tombstones)
    topology:{ID:TASK}:txid       hash   commit -> txid, prepare -> txid
    topology:{ID:ctl}:checkpoint  hash   txid, state (COMMITTED | PREPARING | COMMITTING)
    topology:{ID:ctl}:namespaces  hash   stateful component -> its task ids (JSON)
"""

from __future__ import annotations


def task_key(topology_id: str, task: int | str, name: str) -> str:
    return f"topology:{{{topology_id}:{task}}}:{name}"


def ctl_key(topology_id: str, name: str) -> str:
    return f"topology:{{{topology_id}:ctl}}:{name}"


def task_pattern(topology_id: str) -> str:
    """SCAN pattern for every task-tagged key of a topology (control records excluded)."""
    esc = topology_id.replace("[", "\\[").replace("]", "\\]").replace("*", "\\*").replace("?", "\\?")
    return f"topology:{{{esc}:*}}:*"
