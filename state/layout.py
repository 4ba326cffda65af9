"""Where everything of a topology lives in Redis: the one module that spells key names
(docs/state.md). Nothing else formats a key.

Each task's keys share the Cluster hash tag ``{ID:TASK}``, so its commit is one atomic script
on one node; the topology's control records share ``{ID:ctl}``.

    topology:runs                  zset   registry of run names (score: registration time)
    topology:{ID:TASK}:state       hash   committed key -> value (msgpack)
    topology:{ID:TASK}:prepare     hash   prepared, uncommitted writes (deletes as tombstones)
    topology:{ID:TASK}:txid        hash   commit -> txid, prepare -> txid
    topology:{ID:ctl}:checkpoint   hash   txid, state (COMMITTED | PREPARING | COMMITTING)
    topology:{ID:ctl}:namespaces   hash   stateful component -> its task ids (JSON)
    topology:{ID:ctl}:run|lease|token|epoch|kill|status|history   the run's control records
                                          (topology_runtime/control/control_plane.py)
    topology:{TX:ctl}:tx:NAME      the transactional coordinator's records, TX the transactional
                                   id (state/transactional.py)

Every multi-key MULTI/EXEC, WATCH or script touches one hash tag (docs/redis.md); the registry
is written apart from the control records. ``same_slot`` names a user key's companion (a
ValueMap's writers record) so it shares the user key's slot.
"""

from __future__ import annotations

REGISTRY = "topology:runs"


def task_key(topology_id: str, task: int | str, name: str) -> str:
    return f"topology:{{{topology_id}:{task}}}:{name}"


def ctl_key(topology_id: str, name: str) -> str:
    return f"topology:{{{topology_id}:ctl}}:{name}"


def tx_key(tx_id: str, name: str) -> str:
    """A transactional topology's record ``name`` (current, meta:TXID, last-meta, ...)."""
    return ctl_key(tx_id, f"tx:{name}")


def task_pattern(topology_id: str) -> str:
    """SCAN pattern for every task-tagged key of a topology (control records excluded)."""
    esc = topology_id.replace("[", "\\[").replace("]", "\\]").replace("*", "\\*").replace("?", "\\?")
    return f"topology:{{{esc}:*}}:*"


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes when it has one: between the first ``{`` and the
    first ``}`` after it, if not empty."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    return key[start + 1:end] if end > start + 1 else None


def same_slot(key: str, suffix: str) -> str:
    """A companion key of ``key`` in ``key``'s hash slot: ``key + suffix`` when ``key`` has a
    hash tag, else ``{key}`` + suffix (an untagged key hashes whole, as its tag would)."""
    return key + suffix if hash_tag(key) is not None else f"{{{key}}}{suffix}"
